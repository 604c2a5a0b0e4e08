"""Overhead of the CronTask guard per run: start_fire + finish_fire round trips.

    .venv/bin/python benchmarks/guard.py [--runs 500] [--postgres URL] [--no-postgres]

Each run is one claimed fire: the guard's start transaction (read the database clock,
lock the periodic task, read the fire, decide, write started + last_run) and its finish
transaction, through the worker's own engine. The claim itself (beat's work) is not timed.
SQLite is a file in a temporary directory; PostgreSQL gets a scratch database of its
own, dropped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa

from celery_cronstore.store import Claimer, Store
from celery_cronstore.store import runs as guard_runs
from celery_cronstore.testing import FrozenClock
from harness.scratch import scratch_database

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
#: Beat's frozen clock starts here (a Monday noon, UTC); fire i falls i minutes later.
BEAT_START = datetime(2026, 1, 5, 12, 0, 0, tzinfo=timezone.utc)


def measure(url: str, runs: int) -> dict[str, float]:
    """Time ``runs`` guarded runs; return per-run start, finish and total in ms."""
    clock = FrozenClock(BEAT_START)
    store = Store(url, clock=clock)  # beat's side: a frozen clock makes one fire due per step
    store.upgrade()
    worker = Store(url)  # the guard's side: the real database clock, as in a worker
    try:
        # Some unrelated rows so the look-ups are not on empty tables.
        for i in range(50):
            store.add(f"other-{i}", task="bench.other", timer="every 1m")
        store.add("bench", task="bench.run", timer="every 1m")
        claimer = Claimer(store, "bench-beat")
        start_ms: list[float] = []
        finish_ms: list[float] = []
        for i in range(runs + 20):
            clock.set(BEAT_START + timedelta(minutes=i + 1))
            claims = [c for c in claimer.claim_due().claims if c.name == "bench"]
            claimer.mark_published(claims)
            (claim,) = claims
            t0 = time.perf_counter()
            # (a huge tolerance: the real clock is not the frozen one the fires came from)
            decision = guard_runs.start_fire(
                worker.db, claim.task_id, node="bench", interval=60.0, tolerance=1e9
            )
            t1 = time.perf_counter()
            guard_runs.finish_fire(worker.db, claim.task_id, "succeeded", result={"n": i})
            t2 = time.perf_counter()
            assert decision.started, decision.reason
            if i >= 20:  # warm-up: pool, statement cache
                start_ms.append((t1 - t0) * 1000)
                finish_ms.append((t2 - t1) * 1000)
        total = [a + b for a, b in zip(start_ms, finish_ms, strict=True)]
        return {
            "start_median": statistics.median(start_ms),
            "finish_median": statistics.median(finish_ms),
            "median": statistics.median(total),
            "p95": statistics.quantiles(total, n=20)[-1],
        }
    finally:
        worker.close()
        store.drop_all()
        store.close()


def report(label: str, figures: dict[str, float], runs: int) -> None:
    print(
        f"{label:<11} runs={runs}  per run: median {figures['median']:.2f} ms, "
        f"p95 {figures['p95']:.2f} ms  (start {figures['start_median']:.2f} ms, "
        f"finish {figures['finish_median']:.2f} ms median)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--postgres", default=POSTGRES, help="admin URL (a scratch db is made)")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.sqlite'}"
        report("sqlite", measure(url, args.runs), args.runs)
    if not args.no_postgres:
        try:
            with scratch_database(args.postgres, prefix="cronstore_bench") as scratch:
                report("postgresql", measure(scratch.url, args.runs), args.runs)
        except sa.exc.OperationalError as exc:
            print(f"postgresql  skipped: {str(exc).splitlines()[0]}")


if __name__ == "__main__":
    main()
