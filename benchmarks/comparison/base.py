"""What every scheduler driver shares: the filled timetable, and the driver contract.

A driver is a class of static methods, one per scheduler under test. The fill runs in a
process of its own; the measuring process, a fresh one, calls ``load``, ``build`` and
``make_due``. ``target`` is a SQLAlchemy URL (the SQL schedulers) or a Redis URL (RedBeat).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

#: The filled tasks fire at minute (fill minute + MINUTE_GAP + i % MINUTE_SPREAD) of every
#: hour: nothing is due for MINUTE_GAP minutes after the fill, which bounds a measurement.
MINUTE_GAP = 15
MINUTE_SPREAD = 40
TASKS = ("bench.noop", "bench.report", "bench.cleanup", "bench.sync")
#: The K tasks of the dispatch measurement are made due by moving their last run back.
DUE_LAST_RUN = timedelta(hours=2)
#: The period (seconds) of the tasks of the lateness and edit measurements: each fires
#: once within a measurement.
HOUR = 3600


def task_name(i: int) -> str:
    return f"bench-{i:07d}"


def task_of(i: int) -> str:
    return TASKS[i % len(TASKS)]


def minute_of(i: int, fill_time: datetime) -> int:
    return (fill_time.minute + MINUTE_GAP + i % MINUTE_SPREAD) % 60


def format_instant(at: datetime) -> str:
    """Return ``at`` as an ISO-8601 UTC instant with microseconds (``...T09:00:05.250000Z``)."""
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def minutes_used(n: int, fill_time: datetime) -> set[int]:
    """Return the minutes the first ``n`` filled tasks fire at (one crontab row each)."""
    return {minute_of(i, fill_time) for i in range(min(n, MINUTE_SPREAD))}


class Driver:
    """Drive one scheduler: fill its store, build its beat scheduler, make tasks due."""

    #: The key on the command line (``--schedulers``) and in the results.
    key = ""

    @staticmethod
    def fill(target: str, n: int, now: datetime) -> None:
        """Replace whatever the store holds with ``n`` hourly tasks (run in its own process)."""
        raise NotImplementedError

    @staticmethod
    def load(app: Any, target: str) -> Any:
        """Configure ``app`` for the scheduler and return its ``celery.beat.Scheduler`` class."""
        raise NotImplementedError

    @staticmethod
    def build(app: Any, cls: Any) -> Any:
        """Return the scheduler as ``celery beat`` builds it."""
        return cls(app=app, lazy=False)

    @staticmethod
    def make_due(app: Any, target: str, names: list[str], last_run: datetime) -> None:
        """Store ``last_run`` as the last run of the tasks ``names``, the scheduler's way."""
        raise NotImplementedError

    @staticmethod
    def fill_spread(target: str, fires: list[datetime], now: datetime) -> None:
        """Replace the store's content with one hourly task per instant of ``fires``: task
        ``i`` is first due at ``fires[i]`` and carries the argument ``i``."""
        raise NotImplementedError

    @staticmethod
    def edit_due(target: str, name: str, when: datetime) -> tuple[float, float]:
        """Change the schedule of task ``name`` so that it falls due at ``when`` (about now),
        the way an admin process would, committed; return ``time.time()`` before the
        change started and after its commit returned."""
        raise NotImplementedError

    @staticmethod
    def block_in_tick(allowed: bool) -> None:
        """Whether ``tick()`` may wait for a change inside (only celery-cronstore does)."""

    @classmethod
    @contextmanager
    def target(cls, opts: argparse.Namespace) -> Iterator[str]:
        """Yield the store the series runs against: a scratch PostgreSQL database."""
        from _common import scratch_database  # benchmarks/ is on the path: compare.py runs

        with scratch_database("postgresql", opts.pg_admin, opts.keep) as scratch:
            yield scratch.url

    @staticmethod
    def settle(target: str) -> None:
        """Bring the store to the state a long-running one is in after the fill."""
        import sqlalchemy as sa

        engine = sa.create_engine(target, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")
        engine.dispose()
