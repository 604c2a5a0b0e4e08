"""celery-cronstore: rows in cronstore_periodic_task (``COPY`` on PostgreSQL, one
``executemany`` per chunk on SQLite)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from .base import Driver, format_instant, minute_of, task_name, task_of

#: Whether beat may block on its LISTEN socket inside ``tick()`` (PostgreSQL). The
#: harness turns it off while it times bare ticks, so that a tick is timed without the
#: sleep that follows it (with it off, ``tick()`` returns the sleep, as when SQLite polls).
LISTEN_WAIT = [True]
#: Rows per ``executemany`` of the SQLite fill.
CHUNK = 20_000
COLUMNS = (
    "name",
    "task",
    "args",
    "timer_kind",
    "timer",
    "tz",
    "next_run",
    "created_at",
    "updated_at",
)


def aware(value: Any) -> Any:
    """Return a naive datetime as aware UTC (the ORM path refuses naive ones)."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value


def write_rows(target: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Empty the store and write ``rows`` (values of :data:`COLUMNS`)."""
    import sqlalchemy as sa

    from celery_cronstore.store import Store
    from celery_cronstore.store.schema import beat, fire, periodic_task

    store = Store(target)
    store.upgrade()
    with store.begin() as conn:
        if store.engine.dialect.name == "postgresql":
            conn.exec_driver_sql(
                f"TRUNCATE {fire.name}, {periodic_task.name}, {beat.name} RESTART IDENTITY CASCADE"
            )
        else:
            for table in (fire, periodic_task, beat):
                conn.execute(sa.delete(table))
    if store.engine.dialect.name != "postgresql":
        with store.begin() as conn:
            for start in range(0, len(rows), CHUNK):
                conn.execute(
                    sa.insert(periodic_task),
                    [
                        {k: aware(v) for k, v in zip(COLUMNS, row, strict=True)}
                        for row in rows[start : start + CHUNK]
                    ],
                )
        store.close()
        return
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        with cursor.copy(f"COPY {periodic_task.name} ({', '.join(COLUMNS)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        raw.commit()
        cursor.close()
    finally:
        raw.close()
    store.close()


class Cronstore(Driver):
    """celery_cronstore.Scheduler on a PostgreSQL database."""

    key = "cronstore"

    @staticmethod
    def fill(target: str, n: int, now: datetime) -> None:
        from celery_cronstore.timers import parse_timer

        timers = {m: parse_timer(f"{m} * * * *", tz="UTC") for m in range(60)}
        next_runs = {m: timer.next_after(now) for m, timer in timers.items()}
        naive = now.replace(tzinfo=None)
        rows = []
        for i in range(n):
            timer = timers[minute_of(i, now)]
            next_run = next_runs[minute_of(i, now)]
            assert next_run is not None
            rows.append(
                (
                    task_name(i),
                    task_of(i),
                    "[]",
                    timer.kind,
                    str(timer),
                    timer.tz_name,
                    next_run.replace(tzinfo=None),  # naive UTC columns
                    naive,
                    naive,
                )
            )
        write_rows(target, rows)

    @staticmethod
    def fill_spread(target: str, fires: list[datetime], now: datetime) -> None:
        # ``every 1h from <fire>``: the first fire is the origin itself, then hourly.
        from celery_cronstore.timers import parse_timer

        naive = now.replace(tzinfo=None)
        rows = []
        for i, at in enumerate(fires):
            timer = parse_timer(f"every 1h from {format_instant(at)}", tz="UTC")
            first = timer.first_fire(now)
            assert first == at, (first, at)
            rows.append(
                (
                    task_name(i),
                    task_of(i),
                    f"[{i}]",
                    timer.kind,
                    str(timer),
                    timer.tz_name,
                    at.replace(tzinfo=None),
                    naive,
                    naive,
                )
            )
        write_rows(target, rows)

    @staticmethod
    def load(app: Any, target: str) -> Any:
        app.conf.update(cronstore_url=target, cronstore_sync_beat_schedule=False)
        from celery_cronstore.beat.scheduler import Scheduler
        from celery_cronstore.store.listen import Listener

        wait = Listener.wait

        def maybe_wait(self: Any, timeout: float) -> float:
            return wait(self, timeout) if LISTEN_WAIT[0] else max(timeout, 0.0)

        Listener.wait = maybe_wait  # type: ignore[method-assign]
        return Scheduler

    @staticmethod
    def block_in_tick(allowed: bool) -> None:
        LISTEN_WAIT[0] = allowed

    @staticmethod
    def make_due(app: Any, target: str, names: list[str], last_run: datetime) -> None:
        # The state a beat that was down for two hours finds: next_run in the past.
        import sqlalchemy as sa
        from sqlalchemy.pool import NullPool

        from celery_cronstore.store.schema import periodic_task
        from celery_cronstore.timers import parse_timer

        engine = sa.create_engine(target, poolclass=NullPool)
        with engine.begin() as conn:
            rows = conn.execute(
                sa.select(periodic_task.c.name, periodic_task.c.timer).where(
                    periodic_task.c.name.in_(names)
                )
            ).all()
            by_timer: dict[str, list[str]] = {}
            for name, timer in rows:
                by_timer.setdefault(timer, []).append(name)
            for timer, group in by_timer.items():
                due = parse_timer(timer, kind="cron", tz="UTC").next_after(last_run)
                conn.execute(
                    sa.update(periodic_task)
                    .where(periodic_task.c.name.in_(group))
                    .values(next_run=due)
                )
        engine.dispose()

    @staticmethod
    def edit_due(target: str, name: str, when: datetime) -> tuple[float, float]:
        # Through the API: a one-off timer at ``when`` (planned as is, even just past).
        import time

        from celery_cronstore.store import Store

        store = Store(target)
        try:
            before = time.time()
            store.update(name, timer=format_instant(when))
            return before, time.time()
        finally:
            store.close()


class CronstoreSQLite(Cronstore):
    """celery_cronstore.Scheduler on a SQLite file (beat polls: no LISTEN on SQLite)."""

    key = "cronstore-sqlite"

    @classmethod
    @contextmanager
    def target(cls, opts: argparse.Namespace) -> Iterator[str]:
        """Yield a SQLite file in a temporary folder, removed afterwards."""
        from _common import scratch_database  # benchmarks/ is on the path: compare.py runs

        with scratch_database("sqlite", opts.pg_admin, opts.keep) as scratch:
            yield scratch.url

    @staticmethod
    def settle(target: str) -> None:
        import sqlalchemy as sa

        engine = sa.create_engine(target)
        with engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")
        engine.dispose()
