"""Claim and start cost with an empty fire ledger and with a big one (issue 12, item 6).

    .venv/bin/python benchmarks/ledger.py [--rows 3000000] [--runs 200]
        [--postgres URL | --no-postgres] [--mysql URL] [--no-sqlite]

One periodic task, ``every 1s`` with overlap policy ``skip``, is measured on each backend
twice: with no history, and with ``--rows`` ended fires of its own in the ledger (the
worst case: every row belongs to the task being claimed and started). Each run is one
fire: beat's claim (``claim_due``, which asks "is a fire of this task still in flight?"),
the publish mark, the CronTask guard's start (``start_fire``: the same question for a
running predecessor, plus its previous fire and any later fire that started) and the
finish. Claim and start are timed. Before migration 0004 both questions walked the
task's whole history; now each reads a few entries of ``ix_cronstore_fire_task_state``.
Last, one prune batch of the pruner is timed on the big ledger.

The history is written in bulk (``executemany`` on SQLite, ``COPY`` on PostgreSQL,
multi-row inserts on MariaDB), not through the store. PostgreSQL and MariaDB tables are
analyzed after the fill (autovacuum would do it soon: migration 0004 tunes it); SQLite
is left as beat leaves it. Scratch databases are dropped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa

from celery_cronstore.store import Claimer, Store
from celery_cronstore.store import runs as guard_runs
from celery_cronstore.store.retention import Pruner
from celery_cronstore.testing import FrozenClock
from harness.scratch import scratch_database

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
MYSQL = "mysql+pymysql://root@127.0.0.1:3306/test"
#: The frozen clock starts here; the filled history ends one second before it.
BEAT_START = datetime(2026, 1, 5, 12, 0, 0, tzinfo=timezone.utc)
COLUMNS = ("periodic_task_id", "fire_time", "task_id", "state", "started_at", "finished_at")
CHUNK = 20_000


def history(task_id: int, rows: int) -> Iterator[tuple[object, ...]]:
    """Yield ``rows`` ended fires of the task, one a second, ending before BEAT_START."""
    start = BEAT_START.replace(tzinfo=None) - timedelta(seconds=rows)
    for i in range(rows):
        at = start + timedelta(seconds=i)
        state = "succeeded" if i % 10 else "skipped"
        yield (task_id, at, f"hist-{i}", state, at, at + timedelta(milliseconds=50))


def fill(store: Store, task_id: int, rows: int) -> float:
    """Write the history in bulk; return the seconds it took."""
    t0 = time.perf_counter()
    names = ", ".join(COLUMNS)
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        if store.dialect.name == "postgresql":
            with cursor.copy(f"COPY cronstore_fire ({names}) FROM STDIN") as copy:
                for row in history(task_id, rows):
                    copy.write_row(row)
        else:
            mark = "?" if store.dialect.name == "sqlite" else "%s"
            sql = f"INSERT INTO cronstore_fire ({names}) VALUES ({', '.join([mark] * 6)})"
            batch: list[tuple[object, ...]] = []
            if store.dialect.name == "sqlite":  # the store's connections autocommit
                cursor.execute("BEGIN")
            for row in history(task_id, rows):
                if store.dialect.name == "sqlite":  # SQLAlchemy's SQLite datetime text
                    row = tuple(
                        f"{v:%Y-%m-%d %H:%M:%S.%f}" if isinstance(v, datetime) else v for v in row
                    )
                batch.append(row)
                if len(batch) == CHUNK:
                    cursor.executemany(sql, batch)
                    batch.clear()
            if batch:
                cursor.executemany(sql, batch)
        raw.commit()
        if store.dialect.name == "postgresql":
            cursor.execute("ANALYZE cronstore_fire")
        elif store.dialect.name != "sqlite":
            cursor.execute("ANALYZE TABLE cronstore_fire")
            cursor.fetchall()
        raw.commit()
    finally:
        raw.close()
    return time.perf_counter() - t0


def measure(url: str, rows: int, runs: int) -> dict[str, float]:
    """Time ``runs`` claims and starts of the task with ``rows`` of history."""
    clock = FrozenClock(BEAT_START - timedelta(milliseconds=500))
    store = Store(url, clock=clock)
    store.upgrade()
    try:
        task = store.add("hot", task="bench.hot", timer="every 1s", overlap_policy="skip")
        filled = fill(store, task.id, rows) if rows else 0.0
        claimer = Claimer(store, "bench-beat")
        claim_ms: list[float] = []
        start_ms: list[float] = []
        for i in range(runs + 10):
            clock.set(BEAT_START + timedelta(seconds=i))
            t0 = time.perf_counter()
            result = claimer.claim_due()
            t1 = time.perf_counter()
            (claim,) = result.claims
            claimer.mark_published([claim])
            t2 = time.perf_counter()
            start = guard_runs.start_fire(
                store.db, claim.task_id, node="bench", interval=1.0, tolerance=1e9
            )
            t3 = time.perf_counter()
            assert start.started, start.reason
            guard_runs.finish_fire(store.db, claim.task_id, "succeeded")
            if i >= 10:  # warm-up: pool, statement caches, prepared statements
                claim_ms.append((t1 - t0) * 1000)
                start_ms.append((t3 - t2) * 1000)
        figures = {
            "fill_s": filled,
            "claim": statistics.median(claim_ms),
            "claim_p95": statistics.quantiles(claim_ms, n=20)[-1],
            "start": statistics.median(start_ms),
            "start_p95": statistics.quantiles(start_ms, n=20)[-1],
        }
        if rows:
            pruner = Pruner(store.db)
            t0 = time.perf_counter()
            step = pruner.step(timedelta(seconds=rows / 2))  # half the history is old
            figures["prune_ms"] = (time.perf_counter() - t0) * 1000
            figures["pruned"] = step.deleted
        return figures
    finally:
        store.drop_all()
        store.close()


def report(backend: str, rows: int, f: dict[str, float]) -> None:
    line = (
        f"{backend:<11} {rows:>11,} rows  claim {f['claim']:7.2f} ms (p95 {f['claim_p95']:7.2f})"
        f"  start {f['start']:7.2f} ms (p95 {f['start_p95']:7.2f})"
    )
    if rows:
        line += f"  fill {f['fill_s']:.0f}s"
        line += f"  prune batch {f['prune_ms']:.0f} ms ({f['pruned']:.0f} rows)"
    print(line, flush=True)


def run(backend: str, url: str, sizes: list[int], runs: int) -> None:
    for rows in sizes:
        report(backend, rows, measure(url, rows, runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3_000_000, help="history of the big case")
    parser.add_argument("--runs", type=int, default=200, help="fires timed per case")
    parser.add_argument("--postgres", default=POSTGRES, help="admin URL (a scratch db is made)")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--mysql", help="MariaDB admin URL (e.g. " + MYSQL + "); off unless given")
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    sizes = [0, args.rows]
    print(f"one task, every 1s, overlap skip; {args.runs} fires timed per case (median, p95)")
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            run("sqlite", f"sqlite:///{Path(tmp) / 'bench.sqlite'}", sizes, args.runs)
    for backend, admin in (
        ("postgresql", None if args.no_postgres else args.postgres),
        ("mariadb", args.mysql),
    ):
        if admin is None:
            continue
        try:
            with scratch_database(admin, prefix="cronstore_bench") as scratch:
                run(backend, scratch.url, sizes, args.runs)
        except sa.exc.OperationalError as exc:
            print(f"{backend:<11} skipped: {str(exc).splitlines()[0]}")


if __name__ == "__main__":
    main()
