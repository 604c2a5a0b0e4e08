"""Side-by-side benchmark: celery-cronstore, django-celery-beat, sqlalchemy-celery-beat, RedBeat.

Runs in the separate benchmark environment (``make bench-compare`` creates ``.venv-bench``;
none of the other schedulers is a dependency of this project):

    .venv-bench/bin/python benchmarks/compare.py
        [--sizes 100,1000,10000,100000] [--cronstore-sizes ...,1000000]
        [--schedulers cronstore,django,sqlalchemy,redbeat] [--budget 300]
    .venv-bench/bin/python benchmarks/compare.py --plot-only   # redraw from the JSON

For each scheduler and each number of periodic tasks N, a fill process writes N hourly
cron tasks (``<m> * * * *`` in UTC, minute m staggered so that nothing is due for at least
15 minutes), each scheduler through its own models; then a fresh measuring process builds
the scheduler's own ``celery.beat.Scheduler`` subclass on a Celery app whose broker is
``memory://`` and drives ``tick()`` the way ``celery beat`` does. It measures startup,
idle ticks, RSS, and the time to send K = min(N, 1000) tasks made due at once. The SQL
schedulers each get a scratch PostgreSQL database on the same server; RedBeat uses keys
under its own prefix in one Redis database. Results go to benchmarks/results/compare.json
and docs/img/compare-*.png; see docs/comparison.md for the method.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

UTC = timezone.utc
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS = "redis://127.0.0.1:6379/14"
#: RedBeat's key prefix here; only keys under it are written or deleted.
REDBEAT_PREFIX = "cronstore-compare:"
SCHEDULERS = ("cronstore", "django", "sqlalchemy", "redbeat")
LABELS = {
    "cronstore": "celery-cronstore",
    "django": "django-celery-beat",
    "sqlalchemy": "sqlalchemy-celery-beat",
    "redbeat": "RedBeat",
}
DISTRIBUTIONS = {
    "cronstore": "celery-cronstore",
    "django": "django-celery-beat",
    "sqlalchemy": "sqlalchemy-celery-beat",
    "redbeat": "celery-redbeat",
}
MODULES = {
    "cronstore": "celery_cronstore",
    "django": "django_celery_beat",
    "sqlalchemy": "sqlalchemy_celery_beat",
    "redbeat": "redbeat",
}
#: The filled tasks fire at minute (fill minute + MINUTE_GAP + i % MINUTE_SPREAD) of every
#: hour: nothing is due for MINUTE_GAP minutes after the fill, which bounds a measurement.
MINUTE_GAP = 15
MINUTE_SPREAD = 40
TASKS = ("bench.noop", "bench.report", "bench.cleanup", "bench.sync")
#: The K tasks of the dispatch measurement are made due by moving their last run back.
DUE_LAST_RUN = timedelta(hours=2)
#: Django's CONN_MAX_AGE for django-celery-beat (``--django-conn-max-age``; None: persistent).
DJANGO_CONN_MAX_AGE: int | None = 0


def noop(*args: Any, **kwargs: Any) -> None:
    """Stand for the filled tasks in beat's app (beat only sends them)."""


def task_name(i: int) -> str:
    return f"bench-{i:07d}"


def minute_of(i: int, fill_time: datetime) -> int:
    return (fill_time.minute + MINUTE_GAP + i % MINUTE_SPREAD) % 60


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over exec(), so a child
    # would report its parent's peak if that was higher.
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# -- the schedulers under test ---------------------------------------------------------------
#
# Each subject has fill(target, n, now) (run in its own process) and, for the measuring
# process, load(app, target) -> scheduler class (configures the app, imports), build(app,
# cls) -> scheduler, make_due(app, target, names, last_run). ``target`` is a SQLAlchemy
# URL (the SQL schedulers) or a Redis URL (RedBeat).


class Cronstore:
    """celery_cronstore.Scheduler: rows in cronstore_periodic_task, written by COPY."""

    @staticmethod
    def fill(target: str, n: int, now: datetime) -> None:
        from celery_cronstore.store import Store
        from celery_cronstore.store.schema import beat, fire, periodic_task
        from celery_cronstore.timers import parse_timer

        store = Store(target)
        store.upgrade()
        with store.begin() as conn:
            conn.exec_driver_sql(
                f"TRUNCATE {fire.name}, {periodic_task.name}, {beat.name} RESTART IDENTITY CASCADE"
            )
        timers = {m: parse_timer(f"{m} * * * *", tz="UTC") for m in range(60)}
        next_runs = {m: timer.next_after(now) for m, timer in timers.items()}
        naive = now.replace(tzinfo=None)
        raw = store.engine.raw_connection()
        try:
            cursor = raw.cursor()
            columns = "name, task, timer_kind, timer, tz, next_run, created_at, updated_at"
            with cursor.copy(f"COPY {periodic_task.name} ({columns}) FROM STDIN") as copy:
                for i in range(n):
                    timer = timers[minute_of(i, now)]
                    next_run = next_runs[minute_of(i, now)]
                    assert next_run is not None
                    copy.write_row(
                        (
                            task_name(i),
                            TASKS[i % len(TASKS)],
                            timer.kind,
                            str(timer),
                            timer.tz_name,
                            next_run.replace(tzinfo=None),  # naive UTC columns
                            naive,
                            naive,
                        )
                    )
            raw.commit()
            cursor.close()
        finally:
            raw.close()
        store.close()

    @staticmethod
    def load(app: Any, target: str) -> Any:
        app.conf.update(cronstore_url=target, cronstore_sync_beat_schedule=False)
        from celery_cronstore.scheduler import Scheduler

        return Scheduler

    @staticmethod
    def build(app: Any, cls: Any) -> Any:
        return cls(app=app, lazy=False)

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


def django_setup(target: str) -> None:
    import django
    from django.conf import settings
    from sqlalchemy.engine import make_url

    url = make_url(target)
    settings.configure(
        DEBUG=False,
        USE_TZ=True,
        TIME_ZONE="UTC",
        INSTALLED_APPS=["django_celery_beat"],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": url.database,
                "USER": url.username or "",
                "PASSWORD": url.password or "",
                "HOST": url.host or "",
                "PORT": str(url.port or ""),
                # Django's default is 0: beat's schedule check calls
                # close_old_connections() on every tick, so each tick reconnects.
                "CONN_MAX_AGE": DJANGO_CONN_MAX_AGE,
            }
        },
    )
    django.setup()


class Django:
    """django_celery_beat.schedulers.DatabaseScheduler on a PostgreSQL database."""

    @staticmethod
    def fill(target: str, n: int, now: datetime) -> None:
        django_setup(target)
        from django.core.management import call_command
        from django.db import connection
        from django_celery_beat.models import CrontabSchedule, PeriodicTask, PeriodicTasks

        call_command("migrate", "django_celery_beat", verbosity=0)
        with connection.cursor() as cursor:
            cursor.execute(
                "TRUNCATE django_celery_beat_periodictask, django_celery_beat_crontabschedule,"
                " django_celery_beat_periodictasks RESTART IDENTITY CASCADE"
            )
        crons = {
            m: CrontabSchedule.objects.create(minute=str(m), hour="*", timezone="UTC")
            for m in {minute_of(i, now) for i in range(min(n, MINUTE_SPREAD))}
        }
        PeriodicTask.objects.bulk_create(
            (
                PeriodicTask(
                    name=task_name(i),
                    task=TASKS[i % len(TASKS)],
                    crontab=crons[minute_of(i, now)],
                    last_run_at=now,
                )
                for i in range(n)
            ),
            batch_size=5000,
        )
        PeriodicTasks.update_changed()  # bulk_create sends no signals

    @staticmethod
    def load(app: Any, target: str) -> Any:
        django_setup(target)
        from django_celery_beat.schedulers import DatabaseScheduler

        return DatabaseScheduler

    @staticmethod
    def build(app: Any, cls: Any) -> Any:
        return cls(app=app, lazy=False)

    @staticmethod
    def make_due(app: Any, target: str, names: list[str], last_run: datetime) -> None:
        from django_celery_beat.models import PeriodicTask, PeriodicTasks

        # A queryset update sends no signals: bump the change marker as documented.
        PeriodicTask.objects.filter(name__in=names).update(last_run_at=last_run)
        PeriodicTasks.update_changed()


class SQLAlchemyBeat:
    """sqlalchemy_celery_beat.schedulers.DatabaseScheduler, ``beat_dburi`` on PostgreSQL."""

    @staticmethod
    def fill(target: str, n: int, now: datetime) -> None:
        import sqlalchemy as sa
        from sqlalchemy_celery_beat.models import (
            CrontabSchedule,
            PeriodicTask,
            PeriodicTaskChanged,
        )
        from sqlalchemy_celery_beat.session import ModelBase, SessionManager

        manager = SessionManager()
        engine, session_factory = manager.create_session(target)
        manager.prepare_models(engine)
        tables = ", ".join(t.name for t in ModelBase.metadata.sorted_tables)
        with engine.begin() as conn:
            conn.exec_driver_sql(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
        session = session_factory()
        try:
            crons = {}
            for m in {minute_of(i, now) for i in range(min(n, MINUTE_SPREAD))}:
                crons[m] = CrontabSchedule(minute=str(m), hour="*", timezone="UTC")
                session.add(crons[m])
            session.commit()
            chunk = 5000
            for start in range(0, n, chunk):
                session.execute(
                    sa.insert(PeriodicTask),
                    [
                        {
                            "name": task_name(i),
                            "task": TASKS[i % len(TASKS)],
                            "args": "[]",
                            "kwargs": "{}",
                            "headers": "{}",
                            "discriminator": "crontabschedule",
                            "schedule_id": crons[minute_of(i, now)].id,
                            "enabled": True,
                            "one_off": False,
                            "last_run_at": now,
                            "total_run_count": 0,
                            "date_changed": now,
                            "description": "",
                        }
                        for i in range(start, min(n, start + chunk))
                    ],
                )
            session.commit()
            PeriodicTaskChanged.update_from_session(session)  # bulk inserts skip the hook
        finally:
            session.close()
        engine.dispose()

    @staticmethod
    def load(app: Any, target: str) -> Any:
        app.conf.beat_dburi = target
        from sqlalchemy_celery_beat.schedulers import DatabaseScheduler

        return DatabaseScheduler

    @staticmethod
    def build(app: Any, cls: Any) -> Any:
        return cls(app=app, lazy=False)

    @staticmethod
    def make_due(app: Any, target: str, names: list[str], last_run: datetime) -> None:
        import sqlalchemy as sa
        from sqlalchemy_celery_beat.models import PeriodicTask, PeriodicTaskChanged
        from sqlalchemy_celery_beat.session import SessionManager

        engine, session_factory = SessionManager().create_session(target)
        session = session_factory()
        try:
            session.execute(
                sa.update(PeriodicTask)
                .where(PeriodicTask.name.in_(names))
                .values(last_run_at=last_run)
            )
            PeriodicTaskChanged.update_from_session(session)  # commits
        finally:
            session.close()
        engine.dispose()


class RedBeat:
    """redbeat.RedBeatScheduler: one hash per entry plus a sorted set of due times."""

    @staticmethod
    def configure(app: Any, target: str) -> None:
        app.conf.update(redbeat_redis_url=target, redbeat_key_prefix=REDBEAT_PREFIX)

    @staticmethod
    def clear(app: Any) -> None:
        from redbeat.schedulers import get_redis

        client = get_redis(app)
        batch: list[str] = []
        for key in client.scan_iter(match=REDBEAT_PREFIX + "*", count=10_000):
            batch.append(key)
            if len(batch) >= 10_000:
                client.unlink(*batch)
                batch = []
        if batch:
            client.unlink(*batch)

    @staticmethod
    def fill(target: str, n: int, now: datetime) -> None:
        from celery import Celery
        from celery.schedules import crontab
        from redbeat import RedBeatSchedulerEntry

        app = Celery("compare-fill", broker="memory://", set_as_current=True)
        app.conf.update(timezone="UTC", enable_utc=True)
        RedBeat.configure(app, target)
        RedBeat.clear(app)
        crons = {m: crontab(minute=m) for m in range(60)}
        for i in range(n):
            RedBeatSchedulerEntry(
                task_name(i),
                TASKS[i % len(TASKS)],
                crons[minute_of(i, now)],
                app=app,
                last_run_at=now,  # without it RedBeat treats an entry as never run: due
            ).save()

    @staticmethod
    def load(app: Any, target: str) -> Any:
        RedBeat.configure(app, target)
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


SUBJECTS: dict[str, Any] = {
    "cronstore": Cronstore,
    "django": Django,
    "sqlalchemy": SQLAlchemyBeat,
    "redbeat": RedBeat,
}


# -- the measuring process ---------------------------------------------------------------------


def measure(
    subject_name: str, target: str, n: int, ticks: int, idle_s: float, budget: float
) -> dict[str, Any]:
    """Build the scheduler in this fresh process and measure it; return the figures.

    The figures so far are also printed (one JSON line) after each phase, so that a
    process killed at its time limit still reports what it measured.
    """
    started = time.perf_counter()
    from celery import Celery
    from celery.signals import after_task_publish

    subject = SUBJECTS[subject_name]
    out: dict[str, Any] = {}
    sent = [0]

    def count(**_: Any) -> None:
        sent[0] += 1

    after_task_publish.connect(count, weak=False)
    app = Celery("compare", broker="memory://", set_as_current=True)
    app.conf.update(
        timezone="UTC",
        enable_utc=True,
        result_expires=None,  # no built-in celery.backend_cleanup entry for anyone
        beat_max_loop_interval=5,
        broker_connection_retry_on_startup=True,
    )
    for task in TASKS:  # registered: every scheduler sends through Task.apply_async
        app.task(name=task)(noop)
    # Beat imports the scheduler class before it builds it: not part of the startup figure.
    cls = subject.load(app, target)
    out["rss_base_mb"] = rss_mb()
    out["import_s"] = time.perf_counter() - started

    t0 = time.perf_counter()
    scheduler = subject.build(app, cls)
    t1 = time.perf_counter()
    first = scheduler.tick()
    t2 = time.perf_counter()
    out.update(construct_s=t1 - t0, first_tick_s=t2 - t1, startup_s=t2 - t0)
    out["rss_startup_mb"] = rss_mb()
    checkpoint(out)
    if sent[0]:
        raise SystemExit(f"{sent[0]} task(s) sent at startup: the fill made something due")
    if t2 - t0 > budget:
        out.update(status="over budget", reason=f"startup {t2 - t0:.0f}s > {budget:.0f}s")
        scheduler.close()
        out["peak_rss_mb"] = peak_rss_mb()
        return out
    del first

    # Idle ticks: three of warm-up, then up to `ticks` ticks or `idle_s` seconds.
    samples: list[float] = []
    cpu: list[float] = []  # this process's CPU time: less sensitive to a busy machine
    began = time.perf_counter()
    for i in range(ticks + 3):
        t = time.perf_counter()
        c = time.process_time()
        sleep = scheduler.tick()
        if i >= 3:
            samples.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        if sleep <= 0 or sent[0]:
            raise SystemExit("an idle tick sent something: the fill is wrong")
        if i >= 8 and time.perf_counter() - began > idle_s:
            break
    ordered = sorted(samples)
    out.update(
        idle_ticks=len(samples),
        idle_median_ms=statistics.median(samples) * 1e3,
        idle_p95_ms=ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1e3,
        idle_cpu_median_ms=statistics.median(cpu) * 1e3,
        rss_idle_mb=rss_mb(),
    )
    checkpoint(out)

    # Dispatch: move the last run of K tasks two hours back (each scheduler's own way of
    # storing it), then run beat's loop (tick, sleep what it asks) until K were sent.
    k = min(n, 1000)
    names = [task_name(i) for i in range(k)]
    t = time.perf_counter()
    subject.make_due(app, target, names, datetime.now(UTC) - DUE_LAST_RUN)
    out["make_due_s"] = time.perf_counter() - t
    deadline = budget - (time.perf_counter() - t0)
    rounds = 0
    slept = 0.0
    first_tick = None
    t = time.perf_counter()
    c = time.process_time()
    while sent[0] < k:
        elapsed = time.perf_counter() - t
        if elapsed > deadline:
            break
        tick_start = time.perf_counter()
        sleep = scheduler.tick()
        rounds += 1
        if first_tick is None:
            first_tick = time.perf_counter() - tick_start
        if sent[0] < k and sleep > 0:
            pause = min(sleep, max(0.0, deadline - (time.perf_counter() - t)))
            time.sleep(pause)
            slept += pause
    dispatch = time.perf_counter() - t
    out.update(
        dispatch_cpu_s=time.process_time() - c,
        due=k,
        sent=sent[0],
        dispatch_s=dispatch if sent[0] >= k else None,
        dispatch_elapsed_s=dispatch,
        dispatch_ticks=rounds,
        dispatch_first_tick_s=first_tick,
        dispatch_slept_s=slept,
        rss_after_dispatch_mb=rss_mb(),
    )
    if sent[0] < k:
        out.update(
            status="over budget",
            reason=f"{sent[0]} of {k} sent after {dispatch:.0f}s (budget {budget:.0f}s in all)",
        )
    else:
        out["status"] = "ok"
    checkpoint(out)
    # Drop the messages from the in-memory broker, then let the scheduler save its state.
    try:
        with app.connection_for_write() as conn:
            out["queued"] = conn.default_channel.queue_purge("celery") or 0
    except Exception as exc:  # the queue may never have been declared
        out["queued"] = f"{type(exc).__name__}: {exc}"
    t = time.perf_counter()
    scheduler.close()
    out["close_s"] = time.perf_counter() - t
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def checkpoint(out: dict[str, Any]) -> None:
    print(json.dumps(out), flush=True)


def fill_child(subject_name: str, target: str, n: int) -> dict[str, Any]:
    now = datetime.now(UTC).replace(microsecond=0)
    t = time.perf_counter()
    SUBJECTS[subject_name].fill(target, n, now)
    fill_s = time.perf_counter() - t
    return {"fill_s": fill_s, "fill_time": now.isoformat()}


# -- the parent: databases, processes, results ---------------------------------------------------


@contextmanager
def scratch_pg(admin_url: str, label: str, keep: bool) -> Iterator[str]:
    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"bench_compare_{label}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        if not keep:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def vacuum(url: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")
    engine.dispose()


def run(args: list[str], timeout: float) -> dict[str, Any]:
    age = "none" if DJANGO_CONN_MAX_AGE is None else str(DJANGO_CONN_MAX_AGE)
    command = [sys.executable, os.path.abspath(__file__), *args, "--django-conn-max-age", age]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        partial = last_json(exc.stdout)
        phase = "at close" if partial.get("status") == "ok" else "before the end"
        partial.update(status="over budget", reason=f"killed {phase} after {timeout:.0f}s")
        return partial
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        return {**last_json(done.stdout), "status": "failed", "reason": tail}
    return last_json(done.stdout)


def last_json(output: str | bytes | None) -> dict[str, Any]:
    if isinstance(output, bytes):
        output = output.decode("utf-8", "replace")
    lines = [line for line in (output or "").splitlines() if line.startswith("{")]
    return dict(json.loads(lines[-1])) if lines else {}


def load() -> float:
    return os.getloadavg()[0]


def bench_subject(name: str, sizes: list[int], opts: argparse.Namespace) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []

    def series(target: str) -> None:
        for n in sizes:
            point: dict[str, Any] = {"scheduler": name, "n": n, "load_before": load()}
            # Nothing filled is due before MINUTE_GAP minutes after the fill starts; the
            # measurement must end (less a minute's margin) before then.
            quiet_until = time.monotonic() + (MINUTE_GAP - 1) * 60
            filled = run(["--fill", name, target, str(n)], timeout=opts.budget * 4)
            if filled.get("status") == "failed":
                point.update(filled)
                points.append(point)
                log(f"{name} N={n:,}: fill failed\n{filled['reason']}")
                return
            if target.startswith("postgresql"):
                vacuum(target)
            point.update(filled)
            budget = min(opts.budget, quiet_until - time.monotonic() - 60)
            measured = run(
                [
                    "--measure",
                    name,
                    target,
                    str(n),
                    "--ticks",
                    str(opts.ticks),
                    "--idle-seconds",
                    str(opts.idle_seconds),
                    "--budget",
                    str(budget),
                ],
                timeout=max(1.0, quiet_until - time.monotonic()),
            )
            point.update(measured)
            point["load_after"] = load()
            points.append(point)
            log(f"{name} N={n:,}: {json.dumps(point)}")
            if point.get("status") != "ok":
                log(f"{name}: series stopped at N={n:,} ({point.get('reason')})")
                return

    if name == "redbeat":
        series(opts.redis)
        from celery import Celery

        app = Celery("compare-clean", broker="memory://")
        RedBeat.configure(app, opts.redis)
        RedBeat.clear(app)
    else:
        with scratch_pg(opts.pg_admin, name, opts.keep) as url:
            series(url)
    return points


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def environment(opts: argparse.Namespace) -> dict[str, Any]:
    from importlib.metadata import version

    import redis
    import sqlalchemy as sa

    info: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "celery": version("celery"),
        "kombu": version("kombu"),
        "SQLAlchemy": version("SQLAlchemy"),
        "Django": version("Django"),
        "redis-py": version("redis"),
        "psycopg": version("psycopg"),
    }
    for key in SCHEDULERS:
        info[DISTRIBUTIONS[key]] = version(DISTRIBUTIONS[key])
    engine = sa.create_engine(opts.pg_admin)
    with engine.connect() as conn:
        info["PostgreSQL"] = str(conn.exec_driver_sql("SHOW server_version").scalar_one()).split()[
            0
        ]
    engine.dispose()
    client = redis.Redis.from_url(opts.redis)
    info["Redis"] = client.info("server")["redis_version"]
    client.close()
    return info


# -- tables and plots ----------------------------------------------------------------------------


def fmt(value: Any, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def tables(data: dict[str, Any]) -> str:
    sys.path.insert(0, HERE)
    from _common import table

    headers = (
        "N tasks",
        "fill s",
        "startup s",
        "idle tick median / p95 ms",
        "idle tick CPU ms",
        "RSS MB idle / peak",
        "K due",
        "dispatch s (ticks)",
        "close s",
        "status",
    )
    parts = []
    for key in SCHEDULERS:
        rows = []
        for p in data["results"]:
            if p["scheduler"] != key:
                continue
            dispatch = p.get("dispatch_s")
            rows.append(
                [
                    f"{p['n']:,}",
                    fmt(p.get("fill_s"), ".1f"),
                    fmt(p.get("startup_s"), ".3f"),
                    f"{fmt(p.get('idle_median_ms'), '.2f')} / {fmt(p.get('idle_p95_ms'), '.2f')}",
                    fmt(p.get("idle_cpu_median_ms"), ".2f"),
                    f"{fmt(p.get('rss_idle_mb'), '.0f')} / {fmt(p.get('peak_rss_mb'), '.0f')}",
                    fmt(p.get("due"), ",d"),
                    (
                        f"{dispatch:.2f} ({p['dispatch_ticks']:,})"
                        if dispatch is not None
                        else f"{fmt(p.get('sent'), ',d', '?')} sent"
                    ),
                    fmt(p.get("close_s"), ".2f"),
                    p.get("status", "?") + (f": {p['reason']}" if p.get("reason") else ""),
                ]
            )
        if rows:
            parts.append(f"### {LABELS[key]}\n\n{table(headers, rows)}")
    return "\n\n".join(parts)


STYLE = {
    "cronstore": ("tab:green", "o"),
    "django": ("tab:blue", "s"),
    "sqlalchemy": ("tab:orange", "^"),
    "redbeat": ("tab:red", "D"),
}


def plots(data: dict[str, Any], folder: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    env = data["environment"]
    note = (
        f"PostgreSQL {env['PostgreSQL']} / Redis {env['Redis']}, {env['cpus']} CPUs, {env['date']}"
    )

    def series(key: str, field: str) -> tuple[list[int], list[float]]:
        xs, ys = [], []
        for p in data["results"]:
            if p["scheduler"] == key and p.get(field) is not None:
                xs.append(p["n"])
                ys.append(p[field])
        return xs, ys

    def draw(
        name: str,
        title: str,
        ylabel: str,
        field: str,
        scale: Callable[[float], float] = lambda v: v,
        dashed: str | None = None,
        partial: bool = False,
    ) -> str:
        fig, ax = plt.subplots(figsize=(8, 5.6), dpi=110)
        for key in SCHEDULERS:
            color, marker = STYLE[key]
            label = LABELS[key]
            stopped = [
                p["n"] for p in data["results"] if p["scheduler"] == key and p.get("status") != "ok"
            ]
            if stopped:
                label += f" (series stopped: N={stopped[0]:,} over budget)"
            xs, ys = series(key, field)
            if xs:
                ax.plot(xs, [scale(y) for y in ys], color=color, marker=marker, label=label)
            if dashed:
                xs, ys = series(key, dashed)
                if xs:
                    ax.plot(xs, [scale(y) for y in ys], color=color, linestyle="--", alpha=0.6)
            for p in data["results"] if partial else ():
                # An unfinished dispatch: a hollow marker at the time spent, a lower bound.
                if p["scheduler"] != key or p.get("dispatch_s") is not None:
                    continue
                if p.get("dispatch_elapsed_s") is None:
                    continue
                ax.plot(
                    [p["n"]],
                    [p["dispatch_elapsed_s"]],
                    marker=marker,
                    color=color,
                    markerfacecolor="white",
                    linestyle="none",
                )
                ax.annotate(
                    f"> {p['dispatch_elapsed_s']:.0f} s\n({p['sent']:,} of {p['due']:,} sent)",
                    (p["n"], p["dispatch_elapsed_s"]),
                    textcoords="offset points",
                    xytext=(8, -4 if key == "django" else -26),
                    fontsize=8,
                    color=color,
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("periodic tasks stored (N)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.4)
        ax.grid(True, which="minor", alpha=0.12)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8.5)
        fig.text(0.99, 0.01, note, ha="right", va="bottom", fontsize=7, color="gray")
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        path = os.path.join(folder, name)
        fig.savefig(path, bbox_inches="tight")  # the legend sits below the axes
        plt.close(fig)
        return path

    return [
        draw(
            "compare-tick.png",
            "Idle tick (nothing due): median time of one tick()",
            "ms per tick (log)",
            "idle_median_ms",
        ),
        draw(
            "compare-rss.png",
            "Beat process memory (solid: after startup + idle ticks; dashed: peak)",
            "RSS, MB (log)",
            "rss_idle_mb",
            dashed="peak_rss_mb",
        ),
        draw(
            "compare-dispatch.png",
            "Sending K = min(N, 1000) tasks made due at once",
            "seconds until all K are sent (log)",
            "dispatch_s",
            partial=True,
        ),
        draw(
            "compare-startup.png",
            "Startup: scheduler construction + first tick()",
            "seconds (log)",
            "startup_s",
        ),
    ]


# -- main ------------------------------------------------------------------------------------------


def parse_sizes(text: str) -> list[int]:
    return sorted({int(s.replace("_", "")) for s in text.split(",") if s.strip()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000,100000", help="N for every scheduler")
    parser.add_argument(
        "--cronstore-sizes", default="", help="N for celery-cronstore (default: --sizes)"
    )
    parser.add_argument("--schedulers", default=",".join(SCHEDULERS))
    parser.add_argument("--pg-admin", default=DEFAULT_PG, help="URL allowed to CREATE DATABASE")
    parser.add_argument("--redis", default=DEFAULT_REDIS, help="RedBeat's Redis database")
    parser.add_argument("--ticks", type=int, default=50, help="idle ticks measured (at most)")
    parser.add_argument(
        "--idle-seconds", type=float, default=30.0, help="stop idle ticks after this long"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=300.0,
        help="seconds one measurement (startup + idle + dispatch) may take; past it the "
        "scheduler's series stops",
    )
    parser.add_argument("--out", default=os.path.join(HERE, "results", "compare.json"))
    parser.add_argument("--img", default=os.path.join(ROOT, "docs", "img"))
    parser.add_argument(
        "--django-conn-max-age",
        default="0",
        help="Django CONN_MAX_AGE for django-celery-beat: seconds, or 'none' for persistent "
        "connections (default 0, Django's default)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch databases")
    parser.add_argument("--plot-only", action="store_true", help="redraw from --out")
    parser.add_argument(
        "--fill", nargs=3, metavar=("SCHEDULER", "TARGET", "N"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--measure", nargs=3, metavar=("SCHEDULER", "TARGET", "N"), help=argparse.SUPPRESS
    )
    opts = parser.parse_args(argv)
    global DJANGO_CONN_MAX_AGE
    age = opts.django_conn_max_age.strip().lower()
    if age != "none" and not age.isdigit():
        parser.error(f"--django-conn-max-age must be seconds or 'none', got {age!r}")
    DJANGO_CONN_MAX_AGE = None if age == "none" else int(age)

    if opts.fill:
        print(json.dumps(fill_child(opts.fill[0], opts.fill[1], int(opts.fill[2]))))
        return 0
    if opts.measure:
        name, target, n = opts.measure
        print(json.dumps(measure(name, target, int(n), opts.ticks, opts.idle_seconds, opts.budget)))
        return 0

    if not opts.plot_only:
        chosen = [s.strip() for s in opts.schedulers.split(",") if s.strip()]
        unknown = sorted(set(chosen) - set(SCHEDULERS))
        if unknown:
            parser.error(f"unknown scheduler(s) {', '.join(unknown)}; choose from {SCHEDULERS}")
        missing = [
            DISTRIBUTIONS[key] for key in chosen if importlib.util.find_spec(MODULES[key]) is None
        ]
        if missing or importlib.util.find_spec("matplotlib") is None:
            raise SystemExit(
                f"missing in {sys.executable}: {', '.join(missing) or 'matplotlib'}; "
                "run `make bench-compare` (it installs them into .venv-bench)"
            )
        sizes = parse_sizes(opts.sizes)
        ours = parse_sizes(opts.cronstore_sizes) if opts.cronstore_sizes else sizes
        data: dict[str, Any] = {
            "environment": environment(opts),
            "settings": {
                "sizes": sizes,
                "cronstore_sizes": ours,
                "ticks": opts.ticks,
                "idle_seconds": opts.idle_seconds,
                "budget_s": opts.budget,
                "broker": "memory://",
                "django_conn_max_age": DJANGO_CONN_MAX_AGE,
            },
            "results": [],
        }
        started = time.perf_counter()
        for name in chosen:
            data["results"] += bench_subject(name, ours if name == "cronstore" else sizes, opts)
        data["environment"]["total_s"] = round(time.perf_counter() - started)
        os.makedirs(os.path.dirname(opts.out), exist_ok=True)
        with open(opts.out, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
            handle.write("\n")
    with open(opts.out, encoding="utf-8") as handle:
        data = json.load(handle)
    for path in plots(data, opts.img):
        log(f"wrote {os.path.relpath(path, ROOT)}")
    env = ", ".join(f"{k} {v}" for k, v in data["environment"].items())
    print(f"# Scheduler comparison\n\n{env}\n\n{tables(data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
