"""RedBeat: one Redis hash per entry plus a sorted set of due times."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from .base import HOUR, Driver, minute_of, task_name, task_of

#: RedBeat's key prefix here; only keys under it are written or deleted.
PREFIX = "cronstore-compare:"
#: Keys per SCAN page and per UNLINK.
BATCH = 10_000


def configure(app: Any, target: str) -> None:
    app.conf.update(redbeat_redis_url=target, redbeat_key_prefix=PREFIX)


def clear(app: Any) -> None:
    """Delete every key under :data:`PREFIX`."""
    from redbeat.schedulers import get_redis

    client = get_redis(app)
    batch: list[str] = []
    for key in client.scan_iter(match=PREFIX + "*", count=BATCH):
        batch.append(key)
        if len(batch) >= BATCH:
            client.unlink(*batch)
            batch = []
    if batch:
        client.unlink(*batch)


class RedBeat(Driver):
    """redbeat.RedBeatScheduler on one Redis database, keys under :data:`PREFIX`."""

    key = "redbeat"

    @staticmethod
    def fill(target: str, n: int, now: datetime) -> None:
        from celery import Celery
        from celery.schedules import crontab
        from redbeat import RedBeatSchedulerEntry

        app = Celery("compare-fill", broker="memory://", set_as_current=True)
        app.conf.update(timezone="UTC", enable_utc=True)
        configure(app, target)
        clear(app)
        crons = {m: crontab(minute=m) for m in range(60)}
        for i in range(n):
            RedBeatSchedulerEntry(
                task_name(i),
                task_of(i),
                crons[minute_of(i, now)],
                app=app,
                last_run_at=now,  # without it RedBeat treats an entry as never run: due
            ).save()

    @staticmethod
    def fill_spread(target: str, fires: list[datetime], now: datetime) -> None:
        from celery import Celery
        from celery.schedules import schedule
        from redbeat import RedBeatSchedulerEntry

        app = Celery("compare-fill", broker="memory://", set_as_current=True)
        app.conf.update(timezone="UTC", enable_utc=True)
        configure(app, target)
        clear(app)
        hourly = schedule(timedelta(seconds=HOUR))
        for i, at in enumerate(fires):
            RedBeatSchedulerEntry(
                task_name(i),
                task_of(i),
                hourly,
                args=[i],
                app=app,
                last_run_at=at - timedelta(seconds=HOUR),
            ).save()

    @staticmethod
    def edit_due(target: str, name: str, when: datetime) -> tuple[float, float]:
        # RedBeat's API: save the entry with its new schedule (save() leaves an existing
        # last run alone), then reschedule() it to have run an hour ago.
        import time

        from celery import Celery
        from celery.schedules import schedule
        from redbeat import RedBeatSchedulerEntry
        from redbeat.schedulers import ensure_conf

        app = Celery("compare-edit", broker="memory://", set_as_current=False)
        app.conf.update(timezone="UTC", enable_utc=True)
        configure(app, target)
        ensure_conf(app)
        before = time.time()
        key = RedBeatSchedulerEntry.generate_key(app, name)
        current = RedBeatSchedulerEntry.from_key(key, app=app)
        edited = RedBeatSchedulerEntry(
            name,
            current.task,
            schedule(timedelta(seconds=HOUR)),
            args=current.args,
            kwargs=current.kwargs,
            app=app,
        ).save()
        edited.reschedule(last_run_at=when - timedelta(seconds=HOUR))
        return before, time.time()

    @staticmethod
    def load(app: Any, target: str) -> Any:
        configure(app, target)
        from redbeat import RedBeatScheduler

        return RedBeatScheduler

    @staticmethod
    def build(app: Any, cls: Any) -> Any:
        from types import SimpleNamespace

        from redbeat.schedulers import acquire_distributed_beat_lock

        scheduler = cls(app=app, lazy=False)
        # celery beat takes the lock in its beat_init signal; tick() extends it.
        acquire_distributed_beat_lock(sender=SimpleNamespace(scheduler=scheduler))
        return scheduler

    @staticmethod
    def make_due(app: Any, target: str, names: list[str], last_run: datetime) -> None:
        from redbeat import RedBeatSchedulerEntry

        for name in names:
            key = RedBeatSchedulerEntry.generate_key(app, name)
            RedBeatSchedulerEntry.from_key(key, app=app).reschedule(last_run_at=last_run)

    @classmethod
    @contextmanager
    def target(cls, opts: argparse.Namespace) -> Iterator[str]:
        """Yield ``--redis``; delete the keys under :data:`PREFIX` afterwards."""
        from celery import Celery

        try:
            yield opts.redis
        finally:
            app = Celery("compare-clean", broker="memory://")
            configure(app, opts.redis)
            clear(app)

    @staticmethod
    def settle(target: str) -> None:
        """Nothing to do: Redis has no statistics to refresh."""
