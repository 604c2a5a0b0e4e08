"""Bounds on a task's schedule: ``start_at``, ``end_at`` (and ``max_runs``, counted in
:mod:`~celery_cronstore.policy.fires`). Pure: no clock, no SQL.

A task with ``start_at`` fires nothing before that instant: its first fire is the timer's
first grid point at or after it. A task with ``end_at`` fires nothing after it: the last
grid point at or before it is its last fire, and then it plans no further fire
(``next_run`` empty). The bounds are on *nominal* fire times: a jittered fire of a grid
point before ``end_at`` may be sent just after it (:mod:`~celery_cronstore.policy.jitter`).

An ended task stays enabled, as one that reached ``max_runs`` does: disabling it would make
the worker's guard drop its last fire if that one starts after the disable. Every window
shows it as ended, with :func:`ended` as the reason.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from celery_cronstore.records import PeriodicTask
from celery_cronstore.timers import Timer

__all__ = ["bounded", "bounds_problem", "ended", "walk_until"]

_TICK = timedelta(microseconds=1)


def bounds_problem(start_at: datetime | None, end_at: datetime | None) -> str | None:
    """Return why ``start_at`` and ``end_at`` cannot go together, or ``None``."""
    if start_at is not None and end_at is not None and end_at <= start_at:
        return (
            f"end_at {end_at.isoformat()} is not after start_at {start_at.isoformat()}: "
            "give an end after the start, or clear one of them"
        )
    return None


def bounded(
    timer: Timer, when: datetime | None, start_at: datetime | None, end_at: datetime | None
) -> datetime | None:
    """Return the first grid point from ``when`` (a grid point) on inside the bounds, or
    ``None`` if there is none (past ``end_at``, or the timer fires no more)."""
    if when is None:
        return None
    if start_at is not None and when < start_at:
        when = timer.next_after(start_at - _TICK)
        if when is None:
            return None
    if end_at is not None and when > end_at:
        return None
    return when


def walk_until(now: datetime, end_at: datetime | None) -> datetime:
    """Return how far a backlog may be walked at ``now``: not past ``end_at``."""
    return now if end_at is None or end_at > now else end_at


def ended(task: PeriodicTask, now: datetime) -> str | None:
    """Say why ``task``'s schedule has ended at ``now`` (``None``: it has not)."""
    if task.max_runs is not None and task.total_run_count >= task.max_runs:
        return f"ended: it ran its max_runs ({task.max_runs}) scheduled fires"
    if task.end_at is not None and task.next_run is None and task.end_at <= now:
        return f"ended: its end_at {task.end_at.isoformat()} has passed"
    return None
