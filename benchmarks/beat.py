"""Scaling benchmark of the beat scheduler (a script, not a timed test).

For each backend and each number of stored rows N it prints: the time to fill the rows,
beat's import and startup time, its RSS, the idle tick (median and p95), the cost of one
edit until a tick sees it, and the time to publish 10,000 fires that are due at once.

    python benchmarks/beat.py [--sizes 1000,10000,100000,1000000]
                              [--backends sqlite,postgresql]
                              [--redis redis://127.0.0.1:6379/15]

Rows are written in bulk (executemany on SQLite, COPY on PostgreSQL), cumulatively: the
run for 10k adds 9k rows to the 1k already there. Every measurement of beat runs in a
fresh subprocess (``--child``), so imports, startup and RSS are those of a new beat.
PostgreSQL runs in a scratch database (``bench_cronstore_*``) dropped at the end; SQLite
in a temporary file. Only the Redis list ``celery`` of the given database is touched.
See docs/benchmarks.md for the method and the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any

UTC = timezone.utc
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SIZES = "1000,10000,100000,1000000"
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS = "redis://127.0.0.1:6379/15"
#: The Redis list of Celery's default queue.
QUEUE = "celery"
#: The row whose timer the edit measurement changes (a one-off timer far in the future).
EDIT_ROW = "bench-edit"
PARKED = "2099-01-01T00:00:00Z"


# -- the child: one fresh beat process against a filled store --------------------------------


def child(url: str, redis_url: str, ticks: int, due: int, timeout: float) -> dict[str, Any]:
    """Measure one beat process; return the figures (printed as JSON on the last line)."""
    started = time.perf_counter()
    import redis
    import sqlalchemy as sa
    from celery import Celery

    from celery_cronstore.beat.scheduler import Scheduler
    from celery_cronstore.store import Store
    from celery_cronstore.store.schema import fire, periodic_task

    sys.path.insert(0, HERE)
    from _common import due_rows, median, percentile, rss_mb, tick_ms

    out: dict[str, Any] = {"import_s": time.perf_counter() - started}

    app = Celery("cronstore-bench", broker=redis_url, set_as_current=True)
    app.conf.update(
        cronstore_url=url,
        cronstore_sync_beat_schedule=False,
        cronstore_require_registered=False,  # the bench tasks are sent by name
        # Measure the tick's own work: with wake on change (PostgreSQL) tick() would sleep
        # until the next due time on its LISTEN socket (benchmarks/wake.py measures that).
        cronstore_listen=False,
        broker_connection_retry_on_startup=True,
    )

    # Startup: construct the scheduler (opens the store, checks the schema) + first tick.
    t0 = time.perf_counter()
    scheduler = Scheduler(app, lazy=False)
    t1 = time.perf_counter()
    first_sleep = scheduler.tick()
    t2 = time.perf_counter()
    out.update(construct_s=t1 - t0, first_tick_ms=(t2 - t1) * 1e3, startup_s=t2 - t0)
    if first_sleep <= 0:
        raise SystemExit(f"first tick returned {first_sleep}: something is due at start")
    out["rss_start_mb"] = rss_mb()

    # Idle ticks: nothing is due; housekeeping (heartbeat + reclaim) runs every 5 s, so
    # only the first of these back-to-back ticks may include it.
    samples = tick_ms(scheduler, ticks)
    out.update(
        idle_median_ms=median(samples[1:]),
        idle_p95_ms=percentile(samples[1:], 0.95),
        idle_first_ms=samples[0],
        rss_idle_mb=rss_mb(),
    )

    # Ticks that include housekeeping (forced by resetting its deadline).
    out["housekeeping_ms"] = median(tick_ms(scheduler, 20, housekeep=True))

    # What an idle beat pays per wake on average: it wakes every poll interval (5 s) and
    # housekeeps each time; the ledger pruner looks once a minute (one wake in 12).
    wakes: list[float] = []
    for _ in range(5):
        pruner = scheduler.loop.chores.pruner if scheduler.loop else None
        if pruner is not None:
            pruner.resume_at = 0.0
        wakes += tick_ms(scheduler, 12, housekeep=True)
    out["wake_avg_ms"] = sum(wakes) / len(wakes)

    # One edit from another process's point of view (its own Store): re-time one row to
    # fire 4 s from now; the very next tick must return a sleep of <= 4 s (it saw it).
    editor = Store(url)
    editor.get(EDIT_ROW)  # warm the editor's pool, as a long-lived admin process would be
    edits: list[float] = []
    seen = True
    for _ in range(5):
        target = editor.now() + timedelta(seconds=4)
        t = time.perf_counter()
        editor.update(EDIT_ROW, timer=target.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
        t_update = time.perf_counter()
        sleep = scheduler.tick()
        t_tick = time.perf_counter()
        editor.update(EDIT_ROW, timer=PARKED)
        seen = seen and 0 < sleep <= 4.0
        edits.append((t_update - t) * 1e3 + (t_tick - t_update) * 1e3)
    out.update(edit_ms=median(edits), edit_seen=seen)

    # Due fires: insert `due` rows due now on top of the N background rows, then tick
    # until Redis holds all of their messages.
    broker = redis.Redis.from_url(redis_url)
    broker.delete(QUEUE)
    with editor.begin() as conn:
        conn.execute(sa.insert(periodic_task), due_rows(due, editor.now(conn)))
    t = time.perf_counter()
    count = rounds = 0
    while count < due and time.perf_counter() - t < timeout:
        scheduler.tick()
        rounds += 1
        count = broker.llen(QUEUE)
    publish_s = time.perf_counter() - t
    with editor.engine.connect() as conn:
        published = conn.execute(
            sa.select(sa.func.count()).select_from(fire).where(fire.c.state == "published")
        ).scalar_one()
    out.update(
        due_publish_s=publish_s if count >= due else None,
        due_in_redis=count,
        due_marked_published=published,
        due_ticks=rounds,
        rss_after_due_mb=rss_mb(),
    )

    # Leave the store as it was: no due rows, an empty ledger, an empty queue.
    scheduler.close()
    with editor.begin() as conn:
        conn.execute(sa.delete(fire))
        conn.execute(sa.delete(periodic_task).where(periodic_task.c.name.like("due-%")))
    editor.close()
    broker.delete(QUEUE)
    broker.close()
    return out


# -- the parent: fill, spawn children, print tables -----------------------------------------


def run_child(url: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        url,
        "--redis",
        args.redis,
        "--ticks",
        str(args.ticks),
        "--due",
        str(args.due),
        "--timeout",
        str(args.timeout),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"benchmark child failed with exit code {done.returncode}")
    if done.stderr.strip():
        sys.stderr.write(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_backend(backend: str, sizes: list[int], args: argparse.Namespace) -> list[list[str]]:
    from _common import analyze, fill, scratch_database

    from celery_cronstore.store import Store

    rows: list[list[str]] = []
    with scratch_database(backend, args.pg_admin, keep=args.keep) as scratch:
        store = Store(scratch.url)
        store.upgrade()
        store.add(EDIT_ROW, task="bench.noop", timer=PARKED)
        now = store.now()
        filled = 0
        for n in sizes:
            t = time.perf_counter()
            fill(store.engine, filled, n, now)
            fill_s = time.perf_counter() - t
            t = time.perf_counter()
            analyze(store.engine)
            analyze_s = time.perf_counter() - t
            added, filled = n - filled, n
            print(
                f"  {backend} N={n:,}: filled {added:,} rows in {fill_s:.1f}s "
                f"({added / max(fill_s, 1e-9):,.0f} rows/s) + analyze {analyze_s:.1f}s",
                file=sys.stderr,
                flush=True,
            )
            r = run_child(scratch.url, args)
            print(f"  {backend} N={n:,}: {json.dumps(r)}", file=sys.stderr, flush=True)
            rows.append(format_row(n, added, fill_s, r))
        store.close()
    return rows


def format_row(n: int, added: int, fill_s: float, r: dict[str, Any]) -> list[str]:
    publish = r["due_publish_s"]
    due = (
        f"{publish:.2f} ({r['due_ticks']} ticks)"
        if publish is not None
        else f"TIMEOUT ({r['due_in_redis']} sent)"
    )
    if r["due_marked_published"] != r["due_in_redis"]:
        due += f" [ledger: {r['due_marked_published']} published]"
    return [
        f"{n:,}",
        f"{fill_s:.1f} (+{added:,})",
        f"{r['import_s']:.2f}",
        f"{r['startup_s']:.3f}",
        f"{r['rss_start_mb']:.0f} / {r['rss_idle_mb']:.0f} / {r['rss_after_due_mb']:.0f}",
        f"{r['first_tick_ms']:.1f}",
        f"{r['idle_median_ms']:.3f} / {r['idle_p95_ms']:.3f}",
        f"{r['housekeeping_ms']:.2f} / {r['wake_avg_ms']:.2f}",
        f"{r['edit_ms']:.2f}" + ("" if r["edit_seen"] else " (NOT SEEN)"),
        due,
    ]


HEADERS = (
    "N rows",
    "fill s",
    "import s",
    "startup s",
    "RSS MB start/idle/after due",
    "1st tick ms",
    "idle tick median/p95 ms",
    "housekeeping tick / avg idle wake ms",
    "edit ms",
    "due publish s",
)


def describe_environment(args: argparse.Namespace) -> str:
    import sqlite3

    import celery
    import sqlalchemy as sa

    parts = [
        f"Python {platform.python_version()}",
        f"celery {celery.__version__}",
        f"SQLAlchemy {sa.__version__}",
        f"SQLite {sqlite3.sqlite_version}",
        f"{os.cpu_count()} CPUs",
    ]
    if "postgresql" in args.backends:
        engine = sa.create_engine(args.pg_admin)
        with engine.connect() as conn:
            version = str(conn.exec_driver_sql("SHOW server_version").scalar_one())
        engine.dispose()
        parts.append(f"PostgreSQL {version.split()[0]}")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="row counts, ascending")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--redis", default=DEFAULT_REDIS, help="broker (its list 'celery')")
    parser.add_argument("--pg-admin", default=DEFAULT_PG, help="URL allowed to CREATE DATABASE")
    parser.add_argument("--ticks", type=int, default=200, help="idle ticks per measurement")
    parser.add_argument("--due", type=int, default=10_000, help="fires due at once")
    parser.add_argument("--timeout", type=float, default=600.0, help="limit for the due fires")
    parser.add_argument("--keep", action="store_true", help="keep the PostgreSQL database")
    parser.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        result = child(args.child, args.redis, args.ticks, args.due, args.timeout)
        print(json.dumps(result))
        return 0

    sys.path.insert(0, HERE)
    import redis
    from _common import table

    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()})
    broker = redis.Redis.from_url(args.redis)
    waiting = broker.llen(QUEUE)
    broker.close()
    if waiting:
        raise SystemExit(f"{args.redis} list {QUEUE!r} holds {waiting} messages: not ours")

    print(f"# celery-cronstore beat benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(describe_environment(args))
    print(f"{args.ticks} idle ticks per N; {args.due:,} due fires; broker {args.redis}")
    for backend in args.backends:
        t = time.perf_counter()
        rows = bench_backend(backend, sizes, args)
        print(f"\n## {backend} ({time.perf_counter() - t:.0f}s)\n")
        print(table(HEADERS, rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
