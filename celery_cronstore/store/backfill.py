"""The SQL of a backfill: claim the fire times of a past range in one transaction.

:func:`claim_range` locks the periodic task's row (an edit and another backfill of the
task wait for it; beat skips it, or waits), reads the database's now and the ledger rows
the range meets, lets :func:`celery_cronstore.policy.backfill.plan_backfill` decide, and
writes what it decided: the missed rows it splits are deleted, and the claims and the
missed rows that replace them are inserted, with one audit entry. The ledger's unique key
(task, fire time) still refuses any fire recorded twice. The caller publishes the claims
and marks them published through the claimer (``actions.backfill``), as beat does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from celery_cronstore import policy
from celery_cronstore.errors import TaskNotFoundError, TimerError
from celery_cronstore.policy import backfill as rule
from celery_cronstore.records import PeriodicTask
from celery_cronstore.states import FireState
from celery_cronstore.store import audit, bulk
from celery_cronstore.store.claims import Claimer
from celery_cronstore.store.leases import IN_CHUNK
from celery_cronstore.store.rows import to_task
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.timers.once import format_instant

__all__ = ["Claimed", "claim_range"]

_PT = periodic_task.c
_F = fire.c
_COLUMNS = (_F.id, _F.fire_time, _F.state, _F.fire_until, _F.fire_count, _F.reason, _F.claimed_by)


@dataclass(frozen=True)
class Claimed:
    """What :func:`claim_range` found and (unless a dry run) wrote."""

    task: PeriodicTask
    #: The database's now when it was claimed.
    now: datetime
    start: datetime
    end: datetime
    plan: rule.Backfill


def claim_range(
    claimer: Claimer,
    name: str,
    start: datetime,
    end: datetime | None,
    *,
    rate: float | None = rule.DEFAULT_RATE,
    dry_run: bool = False,
) -> Claimed:
    """Claim the fire times of task ``name`` in ``[start, end]`` the ledger does not hold
    (or holds as missed), under ``claimer``'s node and lease; ``end=None``: the database's
    now. ``dry_run``: decide the same, write nothing.

    Refused before anything is written: no such task (:class:`TaskNotFoundError`); a
    task beat would refuse to send, a timer that cannot be read, a fire past the task's
    starting deadline (:class:`~celery_cronstore.policy.backfill.BackfillError`); a range
    that is backwards, reaches past now or holds too many fire times
    (:class:`~celery_cronstore.policy.backfill.RangeError`).
    """
    db = claimer.db
    with db.begin() as conn:
        query = sa.select(periodic_task).where(_PT.name == name)
        row = conn.execute(query if dry_run else db.locked(query)).first()
        if row is None:
            raise TaskNotFoundError(f"no periodic task named {name!r}")
        now = db.now(conn)
        task = to_task(row)
        refused = claimer.check.refusal(task, row)
        if refused is not None:
            raise rule.BackfillError(f"periodic task {name!r} cannot be sent: {refused}")
        try:
            timer = policy.timer_of(task)
        except (TimerError, ValueError) as exc:
            raise rule.BackfillError(
                f"periodic task {name!r} has a timer that cannot be read ({exc}): fix it "
                f"first (`cronstore edit {name} --timer ...`)"
            ) from None
        end = now if end is None else end
        rule.check_range(start, end, now)
        inside = rule.within_bounds(task, start, end)
        points = [] if inside is None else rule.grid(timer, *inside)
        recorded = _recorded(conn, task.id, start, end) if points else []
        plan = rule.plan_backfill(
            task, timer, points, recorded, now, node=claimer.node, lease=claimer.lease, rate=rate
        )
        if not dry_run and plan.claims:
            _write(conn, claimer, task, plan, now)
    return Claimed(task, now, start, end, plan)


def _recorded(
    conn: sa.Connection, task_id: int, start: datetime, end: datetime
) -> list[rule.Recorded]:
    """Read the task's ledger rows the range meets, and every row inside a missed row
    that reaches out of it (what splitting that row must not count)."""
    mine = _F.periodic_task_id == task_id
    # A missed run that began before the range and reaches into it (ranges never overlap).
    straddling = conn.execute(
        sa.select(*_COLUMNS).where(
            mine, _F.state == FireState.MISSED, _F.fire_time < start, _F.fire_until >= start
        )
    ).all()
    low = min([start, *(r.fire_time for r in straddling)])
    rows = [*conn.execute(sa.select(*_COLUMNS).where(mine, _F.fire_time.between(low, end)))]
    high = max([end, *(r.fire_until for r in [*straddling, *rows] if _missed_run(r))])
    if high > end:
        rows += conn.execute(
            sa.select(*_COLUMNS).where(mine, _F.fire_time > end, _F.fire_time <= high)
        ).all()
    seen = {r.id for r in rows}
    rows += [r for r in straddling if r.id not in seen]
    return [
        rule.Recorded(
            id=int(r.id),
            fire_time=r.fire_time,
            state=str(r.state),
            fire_until=r.fire_until,
            fire_count=int(r.fire_count),
            reason=r.reason,
            claimed_by=r.claimed_by,
        )
        for r in rows
    ]


def _missed_run(row: sa.Row[Any]) -> bool:
    return bool(row.state == FireState.MISSED and row.fire_until is not None)


def _write(
    conn: sa.Connection, claimer: Claimer, task: PeriodicTask, plan: rule.Backfill, now: datetime
) -> None:
    """Replace the split missed rows, insert the claims; one audit entry."""
    ids = plan.replaced
    for start in range(0, len(ids), IN_CHUNK):
        chunk = ids[start : start + IN_CHUNK]
        deleted = conn.execute(
            sa.delete(fire).where(_F.id.in_(chunk), _F.state == FireState.MISSED)
        ).rowcount
        if deleted != len(chunk):
            raise rule.BackfillError(_CHANGED.format(name=task.name))
    try:
        bulk.insert(conn, fire, [entry.row() for entry in plan.entries])
    except IntegrityError:  # a writer that does not lock the task's row (run-now) won
        raise rule.BackfillError(_CHANGED.format(name=task.name)) from None
    times = plan.fire_times
    detail = (
        f"{len(times)} fire(s) from {format_instant(times[0])} to {format_instant(times[-1])}"
        f" ({len(plan.from_missed)} recorded missed before)"
    )
    audit.record(conn, claimer.store.actor, "backfill", task.name, at=now, detail=detail)


_CHANGED = (
    "the ledger of {name!r} changed while the range was being claimed; nothing was "
    "claimed: run the backfill again"
)
