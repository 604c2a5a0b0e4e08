"""The SQL of the overlap policies (the rules: :func:`celery_cronstore.policy.plan`).

- :func:`running`: the newest fire of a task still in flight, which ``skip``,
  ``buffer_one`` and ``replace`` ask about: a buffered or claimed one, or one whose
  lease is ahead of now (a started fire while its worker's heartbeats renew it; for
  ``buffer_one`` and ``replace`` also a published one waiting for its watched start).
- :func:`mark_replaced`: the fires a plan under ``replace`` ends are recorded ``replaced``
  (if still in flight) in the claim's transaction; beat then revokes their task ids.
- :func:`release_buffered`: a ``buffered`` fire whose task has nothing else in flight is
  claimed (as any claim, with beat's lease) and returned to be published; one whose task
  was disabled, paused or removed meanwhile is recorded ``dropped``, one past its starting
  deadline ``expired``. Buffered rows are locked ``SKIP LOCKED``: each is released by one
  beat only, and its ``claimed`` state keeps claim-once as for any other fire.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from celery_cronstore import policy
from celery_cronstore.records import Claim
from celery_cronstore.states import IN_FLIGHT, FireState
from celery_cronstore.store.db import Database
from celery_cronstore.store.rows import to_task
from celery_cronstore.store.schema import fire, periodic_task

__all__ = ["mark_replaced", "release_buffered", "running"]

_F = fire.c
_PT = periodic_task.c
#: At most this many buffered fires are looked at per claim transaction.
RELEASE_BATCH = 100
_UNLEASED = (FireState.BUFFERED, FireState.CLAIMED)
_WATCHED = (*IN_FLIGHT, FireState.PUBLISHED)


def running(
    conn: sa.Connection,
    task_id: int,
    now: datetime,
    *,
    published: bool = False,
    besides: int | None = None,
) -> policy.Running | None:
    """Return (fire time, state) of the newest fire of task ``task_id`` in flight at
    ``now`` (``published``: a published one waiting for its start counts; ``besides``: a
    fire id left out), or ``None``."""
    query = sa.select(_F.fire_time, _F.state).where(
        _F.periodic_task_id == task_id,
        _F.state.in_(_WATCHED if published else IN_FLIGHT),
        sa.or_(_F.state.in_(_UNLEASED), _F.lease_until > now),
    )
    if besides is not None:
        query = query.where(_F.id != besides)
    # No ORDER BY ... LIMIT 1: to skip the sort, planners walk the task's whole history
    # in the (periodic_task_id, fire_time) key. A task has few fires in flight: read
    # them all from ix_cronstore_fire_task_state and keep the newest.
    rows = conn.execute(query).all()
    return max(((r.fire_time, r.state) for r in rows), default=None)


def mark_replaced(
    conn: sa.Connection, replaced: list[tuple[int, str, datetime, str]], now: datetime
) -> list[tuple[str, str]]:
    """Record each (task id, name, fire time, reason) ``replaced`` if it is still in
    flight; return (Celery task id to revoke, task name) of each recorded."""
    revoke: list[tuple[str, str]] = []
    for task_id, name, when, reason in replaced:
        done = conn.execute(
            sa.update(fire)
            .where(
                _F.periodic_task_id == task_id,
                _F.fire_time == when,
                _F.state.in_(_WATCHED),
            )
            .values(state=FireState.REPLACED, reason=reason, finished_at=now, lease_until=None)
        )
        if done.rowcount:
            revoke.append((policy.fire_task_id(task_id, name, when), name))
    return revoke


def release_buffered(
    db: Database, conn: sa.Connection, now: datetime, *, node: str, lease: timedelta
) -> tuple[list[Claim], int]:
    """Claim the buffered fires whose task has nothing else in flight; return their
    claims and how many buffered fires still wait."""
    query = (
        sa.select(
            _F.id.label("f_id"),
            _F.fire_time.label("f_time"),
            _F.task_id.label("f_task_id"),
            _F.attempts.label("f_attempts"),
            periodic_task,
        )
        .join_from(fire, periodic_task, _F.periodic_task_id == _PT.id)
        .where(_F.state == FireState.BUFFERED)
        .order_by(_F.fire_time)
        .limit(RELEASE_BATCH)
    )
    rows = conn.execute(db.locked(query, skip_locked=True, of=fire)).all()
    claims: list[Claim] = []
    waiting = 0
    for row in rows:
        task = to_task(row)
        if running(conn, task.id, now, published=True, besides=row.f_id) is not None:
            waiting += 1
            continue
        state, reason = _verdict(task, row.f_time, now)
        values: dict[str, Any] = {"state": state, "reason": reason}
        if state == FireState.CLAIMED:
            values.update(lease_until=now + lease, claimed_at=now, claimed_by=node)
            timer = policy.readable_timer(task)
            claims.append(policy.make_claim(task, row.f_time, row.f_task_id, row.f_attempts, timer))
            conn.execute(
                sa.update(periodic_task)
                .where(_PT.id == task.id)
                .values(total_run_count=_PT.total_run_count + 1)
            )
        conn.execute(sa.update(fire).where(_F.id == row.f_id).values(**values))
    return claims, waiting


def _verdict(task: Any, when: datetime, now: datetime) -> tuple[str, str | None]:
    """What becomes of a buffered fire whose predecessor ended: claimed, or why not."""
    if not task.enabled:
        return FireState.DROPPED, "not published: the task was disabled while it was buffered"
    if task.paused_at is not None:
        return FireState.DROPPED, "not published: the task was paused while it was buffered"
    if task.start_deadline is not None:
        late = (now - when).total_seconds()
        if late > task.start_deadline:
            return (
                FireState.EXPIRED,
                f"not published: {late:.1f}s late when the fire before it ended, past the "
                f"starting deadline of {task.start_deadline:g}s",
            )
    return FireState.CLAIMED, None
