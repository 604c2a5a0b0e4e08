"""What the CronTask guard reads about one delivery before it decides: the snapshot of
the fire and its task, with the reads only some decisions need (a running predecessor, a
later fire that started, the previous fire) as callables, run only when asked."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from celery_cronstore import policy
from celery_cronstore.errors import TimerError
from celery_cronstore.records import PeriodicTask
from celery_cronstore.states import WORKER_RUNNING
from celery_cronstore.store.db import Database
from celery_cronstore.store.schema import fire

__all__ = ["fire_interval", "snapshot"]

_F = fire.c


def fire_interval(task: PeriodicTask, fire_time: datetime) -> float | None:
    """Seconds from ``fire_time`` to the task's next fire (``None``: none, or a timer
    that cannot be read): the CronTask time box is half of it."""
    try:
        return policy.interval_after(policy.timer_of(task), fire_time)
    except (TimerError, ValueError):
        return None


def snapshot(
    db: Database,
    conn: sa.Connection,
    task: PeriodicTask,
    row: sa.Row[Any],
    now: datetime,
    retries: int,
    interval: float | None,
    tolerance: float,
    task_id: str,
    *,
    requested: bool = False,
) -> policy.StartSnapshot:
    """Build the guard's snapshot; the extra reads run only if the decision asks for them."""

    def running() -> tuple[datetime, str] | None:
        query = sa.select(_F.fire_time, _F.state).where(
            _F.periodic_task_id == task.id,
            _F.id != row.id,
            _F.state.in_(WORKER_RUNNING),
            _F.lease_until > now,  # its worker still heartbeats
        )
        # No ORDER BY ... LIMIT 1: to skip the sort, planners walk the task's whole history
        # in the (periodic_task_id, fire_time) key. A task has few fires in flight: read
        # them all from ix_cronstore_fire_task_state and keep the newest.
        found = conn.execute(db.locked(query, read=True)).all()
        return max(((r.fire_time, r.state) for r in found), default=None)

    def later_started() -> datetime | None:
        return conn.execute(
            sa.select(_F.fire_time)
            .where(
                _F.periodic_task_id == task.id,
                _F.fire_time > row.fire_time,
                _F.started_at.is_not(None),
            )
            .limit(1)
        ).scalar_one_or_none()

    def previous_fire() -> datetime | None:
        return conn.execute(
            sa.select(sa.func.max(_F.fire_time)).where(
                _F.periodic_task_id == task.id, _F.fire_time < row.fire_time
            )
        ).scalar_one_or_none()

    return policy.StartSnapshot(
        task_id=task_id,
        now=now,
        retries=retries,
        state=row.state,
        fire_time=row.fire_time,
        enabled=task.enabled,
        start_deadline=task.start_deadline,
        overlap_policy=task.overlap_policy,
        misfire_policy=task.misfire_policy,
        last_run=task.last_run,
        interval=interval,
        tolerance=float(task.tolerance) if task.tolerance is not None else float(tolerance),
        running=running,
        later_started=later_started,
        previous_fire=previous_fire,
        reruns=int(row.reruns),
        jitter=float(task.jitter or 0.0),
        delay=_delay(task, row.fire_time, interval),
        requested=requested,
    )


def _delay(task: PeriodicTask, fire_time: datetime, interval: float | None) -> float:
    """Seconds the task's jitter delayed this fire's send (0 without jitter)."""
    if not task.jitter:
        return 0.0
    following = None if interval is None else fire_time + timedelta(seconds=interval)
    return policy.jitter_delay(task.name, task.jitter, fire_time, following).total_seconds()
