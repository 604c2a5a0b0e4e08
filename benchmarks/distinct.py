"""Distinct timers against shared ones: what 10,000 due fires cost beat's claim path.

    .venv/bin/python benchmarks/distinct.py [--due 10000] [--backend sqlite|postgresql]
                                            [--cache 4096]

Two sets of ``--due`` rows, each due now: *shared* (one timer, ``*/5 * * * *``) and
*distinct* (every row its own cron expression, all due at the same instant). For each,
beat's :class:`~celery_cronstore.store.Claimer` claims them all (claim transactions only:
no broker, so the figure is the part the timer caches affect), twice: *cold* (a fresh
process's first cycle: every distinct timer is parsed) and *warm* (the same rows due
again, as on the next cycle of a long-running beat). ``--cache N`` shrinks the timer
caches to N entries first (4096 was the old size: the warm distinct cycle then parses
everything again).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from celery_cronstore import timers  # noqa: E402
from celery_cronstore.policy import timing as policy_timing  # noqa: E402
from celery_cronstore.store import Claimer, Store  # noqa: E402
from celery_cronstore.store.schema import fire, periodic_task  # noqa: E402
from harness.scratch import scratch_database  # noqa: E402

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def rows(count: int, due: datetime, distinct: bool) -> list[dict[str, Any]]:
    """Rows due at ``due`` (a whole minute, UTC); distinct ones each get their own cron
    expression that fires at ``due`` (extra minutes and hours in lists: daily jobs)."""
    out = []
    for i in range(count):
        if distinct:
            w, x, y = i % 60, (i // 60) % 24, (i // 1440) % 24
            expr = f"{due.minute},{w} {due.hour},{x},{y} * * *"
        else:
            expr = "*/5 * * * *"
        out.append(
            {
                "name": f"d-{i:06d}",
                "task": "bench.noop",
                "timer_kind": "cron",
                "timer": expr,
                "tz": "UTC",
                "next_run": due,
                "created_at": due,
                "updated_at": due,
            }
        )
    return out


def cycle(store: Store, claimer: Claimer, due: datetime) -> tuple[float, int]:
    """Make every row due at ``due`` again and claim them all; return (seconds, fires)."""
    with store.begin() as conn:
        conn.execute(sa.delete(fire))
        conn.execute(sa.update(periodic_task).values(next_run=due, last_fire=None))
    start = time.perf_counter()
    fired = 0
    while True:
        result = claimer.claim_due()
        fired += len(result.claims)
        if not result.rows:
            return time.perf_counter() - start, fired


def run(url: str, count: int) -> dict[str, tuple[float, float]]:
    store = Store(url)
    store.upgrade()
    now = store.now()
    due = (now - timedelta(minutes=5)).replace(second=0, microsecond=0)
    due = due - timedelta(minutes=due.minute % 5)  # on the */5 grid too
    out: dict[str, tuple[float, float]] = {}
    for name, distinct in (("shared", False), ("distinct", True)):
        with store.begin() as conn:
            conn.execute(sa.delete(fire))
            conn.execute(sa.delete(periodic_task))
            conn.execute(sa.insert(periodic_task), rows(count, due, distinct))
        policy_timing._memo.cache_clear()
        timers._parse_cached.cache_clear()
        claimer = Claimer(store, "bench", batch_size=500, misfire_grace=3600)
        cold, fired = cycle(store, claimer, due)
        warm, fired_again = cycle(store, claimer, due)
        if fired != count or fired_again != count:
            raise SystemExit(f"{name}: {fired}/{fired_again} fires instead of {count}")
        out[name] = (cold, warm)
    store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--due", type=int, default=10_000)
    parser.add_argument("--backend", default="sqlite", choices=("sqlite", "postgresql"))
    parser.add_argument("--pg-admin", default=DEFAULT_PG)
    parser.add_argument("--cache", type=int, help="shrink the timer caches to this size")
    args = parser.parse_args(argv)
    if args.cache:
        policy_timing._memo = functools.lru_cache(maxsize=args.cache)(
            policy_timing._memo.__wrapped__
        )
        timers._parse_cached = functools.lru_cache(maxsize=args.cache)(
            timers._parse_cached.__wrapped__
        )
    size = policy_timing._memo.cache_info().maxsize
    print(f"# {args.due:,} due fires, {args.backend}, timer caches {size:,} entries")
    if args.backend == "postgresql":
        with scratch_database(args.pg_admin, prefix="bench_distinct") as scratch:
            figures = run(scratch.url, args.due)
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            figures = run(f"sqlite:///{tmp}/distinct.sqlite", args.due)
    print("| timers   | cold cycle s | warm cycle s |")
    print("|----------|--------------|--------------|")
    for name, (cold, warm) in figures.items():
        print(f"| {name:<8} | {cold:12.2f} | {warm:12.2f} |")
    shared, distinct = figures["shared"][1], figures["distinct"][1]
    print(f"warm distinct / shared: {distinct / shared:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
