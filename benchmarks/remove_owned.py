"""``Store.remove_owned_by`` of many tasks against the floor, a raw DELETE (issue 30).

    .venv/bin/python benchmarks/remove_owned.py URL [--tasks 100000] [--fires 3]
        [--others 1000] [--batch 5000] [--repeat 1]

``URL`` is a PostgreSQL or MariaDB admin URL (a scratch database is made, and dropped at
the end) or ``sqlite`` (a temporary file). Two scratch databases are filled alike:
``--tasks`` tasks of one owner, each with ``--fires`` ledger rows, and ``--others`` tasks
of another owner with as many rows each (what a removal must not touch). Then, each on
its own database:

* **ours**: ``Store.remove_owned_by`` (disable in one statement, the ledger in batches of
  ``--batch`` rows per transaction, each task's oldest first, then the task rows in
  batches);
* **floor**: one transaction of two raw statements, ``DELETE FROM cronstore_fire WHERE
  periodic_task_id IN (the owner's tasks)`` and ``DELETE FROM cronstore_periodic_task
  WHERE owner ...`` (no disable first, no bound on the transaction).

Both are checked (the owner's tasks and history gone, the other owner's all there) and
printed side by side, ours also split into its three steps (from the time of each
commit: the disable, the ledger batches, the task-row batches). The rows are written in
bulk (``COPY`` on PostgreSQL, the driver's ``executemany`` elsewhere) and, on
PostgreSQL and MariaDB, analyzed before timing.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from _common import table  # noqa: E402

from celery_cronstore.store import Store, bulk  # noqa: E402
from celery_cronstore.store.retention import REMOVE_BATCH  # noqa: E402
from celery_cronstore.store.schema import fire, periodic_task  # noqa: E402
from celery_cronstore.timers import parse_timer  # noqa: E402
from harness.scratch import scratch_database  # noqa: E402

UTC = timezone.utc
OWNER = ("bench_owner", "1")
OTHER = ("bench_owner", "2")
#: Rows per insert statement (or COPY) of the fill.
CHUNK = 20_000


@contextmanager
def database(url: str) -> Iterator[str]:
    """Yield the URL of an empty scratch database on ``url``'s server (or a SQLite file)."""
    if url == "sqlite" or url.startswith("sqlite"):
        with tempfile.TemporaryDirectory(prefix="cronstore-remove-") as folder:
            yield f"sqlite:///{os.path.join(folder, 'bench.sqlite')}"
        return
    with scratch_database(url, prefix="bench_remove") as made:
        yield made.url


def fill(store: Store, owner: tuple[str, str], tasks: int, fires: int, now: datetime) -> None:
    """Insert ``tasks`` enabled tasks of ``owner``, each with ``fires`` ended ledger rows."""
    timer = parse_timer("every 1h")
    later = now + timedelta(hours=1)
    for start in range(0, tasks, CHUNK):
        names = [f"{owner[0]}-{owner[1]}-{n:07d}" for n in range(start, min(tasks, start + CHUNK))]
        rows = [
            {
                "name": name,
                "task": "bench.noop",
                "timer_kind": timer.kind,
                "timer": str(timer),
                "tz": "UTC",
                "owner_type": owner[0],
                "owner_id": owner[1],
                "next_run": later,
                "created_at": now,
                "updated_at": now,
            }
            for name in names
        ]
        with store.begin() as conn:
            bulk.insert(conn, periodic_task, rows)
            ids = conn.execute(
                sa.select(periodic_task.c.id).where(periodic_task.c.name.in_(names))
            ).scalars()
            ledger = [
                {
                    "periodic_task_id": task_id,
                    "fire_time": now - timedelta(hours=h),
                    "task_id": uuid.uuid4().hex,
                    "state": "succeeded",
                }
                for task_id in ids
                for h in range(1, fires + 1)
            ]
            bulk.insert(conn, fire, ledger)


def analyze(store: Store) -> None:
    """Refresh the planner's statistics after the fill (autovacuum would, a bit later)."""
    name = store.engine.dialect.name
    if name == "postgresql":
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE cronstore_periodic_task")
            conn.exec_driver_sql("VACUUM ANALYZE cronstore_fire")
    elif name in ("mysql", "mariadb"):
        with store.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE TABLE cronstore_periodic_task, cronstore_fire").all()


def counts(store: Store, owner: tuple[str, str]) -> tuple[int, int]:
    """Return (tasks, ledger rows) of ``owner``."""
    pt = periodic_task.c
    where = (pt.owner_type == owner[0], pt.owner_id == owner[1])
    with store.engine.connect() as conn:
        tasks = conn.execute(sa.select(sa.func.count()).where(*where)).scalar_one()
        rows = conn.execute(
            sa.select(sa.func.count())
            .select_from(fire.join(periodic_task, fire.c.periodic_task_id == pt.id))
            .where(*where)
        ).scalar_one()
    return int(tasks), int(rows)


def floor(store: Store) -> None:
    """The raw DELETE: one transaction, no disable, no batches."""
    pt = periodic_task.c
    where = (pt.owner_type == OWNER[0], pt.owner_id == OWNER[1])
    with store.begin() as conn:
        owned = sa.select(pt.id).where(*where).scalar_subquery()
        conn.execute(sa.delete(fire).where(fire.c.periodic_task_id.in_(owned)))
        conn.execute(sa.delete(periodic_task).where(*where))


class Steps:
    """Time each commit of a removal and what its transaction deleted or updated."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.current = ""
        self.commits: list[tuple[float, str]] = []

    def __enter__(self) -> Steps:
        sa.event.listen(self.engine, "after_cursor_execute", self._statement)
        sa.event.listen(self.engine, "commit", self._commit)
        return self

    def __exit__(self, *exc: object) -> None:
        sa.event.remove(self.engine, "after_cursor_execute", self._statement)
        sa.event.remove(self.engine, "commit", self._commit)

    def _statement(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        words = statement.split()
        head = " ".join(words[:3]).upper()
        if head.startswith("UPDATE CRONSTORE_PERIODIC_TASK"):
            self.current = "disable"
        elif head.startswith("DELETE FROM CRONSTORE_PERIODIC_TASK"):
            self.current = "task rows"
        elif head.startswith("DELETE FROM CRONSTORE_FIRE") and self.current != "task rows":
            self.current = "ledger"

    def _commit(self, conn: Any) -> None:
        self.commits.append((time.perf_counter(), self.current))

    def split(self, started: float) -> dict[str, tuple[float, int]]:
        """Return seconds and transactions per step (a step ends at its last commit)."""
        out: dict[str, tuple[float, int]] = {}
        last = started
        for when, step in self.commits:
            seconds, count = out.get(step, (0.0, 0))
            out[step] = (seconds + when - last, count + 1)
            last = when
        return out


def measure(
    url: str, args: argparse.Namespace, which: str
) -> tuple[float, str, dict[str, tuple[float, int]]]:
    """Fill a scratch database, run ``which`` on it, check the result; return seconds."""
    with database(url) as scratch:
        store = Store(scratch)
        try:
            store.upgrade()
            now = datetime.now(UTC).replace(microsecond=0)
            fill(store, OWNER, args.tasks, args.fires, now)
            fill(store, OTHER, args.others, args.fires, now)
            analyze(store)
            assert counts(store, OWNER) == (args.tasks, args.tasks * args.fires)
            with Steps(store.engine) as steps:
                started = time.perf_counter()
                if which == "ours":
                    removed = store.remove_owned_by(*OWNER, batch=args.batch)
                    assert removed == args.tasks, removed
                else:
                    floor(store)
                seconds = time.perf_counter() - started
            assert counts(store, OWNER) == (0, 0), counts(store, OWNER)
            assert counts(store, OTHER) == (args.others, args.others * args.fires)
            return seconds, store.url, steps.split(started)
        finally:
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="PostgreSQL/MariaDB admin URL, or `sqlite`")
    parser.add_argument("--tasks", type=int, default=100_000, help="tasks of the owner removed")
    parser.add_argument("--fires", type=int, default=3, help="ledger rows per task")
    parser.add_argument("--others", type=int, default=1000, help="tasks of another owner")
    parser.add_argument("--batch", type=int, default=REMOVE_BATCH, help="rows per transaction")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (best is shown)")
    args = parser.parse_args()
    for name in ("tasks", "fires", "batch", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.others < 0:
        parser.error("--others must be at least 0")

    ours = [measure(args.url, args, "ours") for _ in range(args.repeat)]
    raw = [measure(args.url, args, "floor") for _ in range(args.repeat)]
    best, where, split = min(ours, key=lambda run: run[0])
    base = min(run[0] for run in raw)
    print(
        f"remove_owned_by: {args.tasks:,} tasks x {args.fires} ledger rows "
        f"({args.tasks * args.fires:,} rows), {args.others:,} tasks of another owner kept, "
        f"batch {args.batch:,}; best of {args.repeat}; {where.split('/')[0]}//... "
        f"on {platform.node()}, Python {platform.python_version()}, "
        f"SQLAlchemy {sa.__version__}"
    )
    print(
        table(
            ["what", "seconds", "vs floor"],
            [
                ["Store.remove_owned_by", f"{best:.2f}", f"{best / base:.1f}x"],
                *(
                    [f"of which {step} ({count} transactions)", f"{spent:.2f}", ""]
                    for step, (spent, count) in split.items()
                ),
                ["floor: raw DELETE, one transaction", f"{base:.2f}", "1.0x"],
            ],
        )
    )


if __name__ == "__main__":
    main()
