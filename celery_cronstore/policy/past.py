"""A task whose timer failed to answer near now: claim the fire that was due, plan past it.

Pure: no SQL, no Celery, no clock (the store calls :func:`plan_past` when
:func:`~celery_cronstore.policy.fires.plan` raised a timer search error).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from celery_cronstore.errors import TimerError
from celery_cronstore.policy.fires import Entry, Plan, RowUpdate, fire_task_id, make_claim
from celery_cronstore.records import EPOCH, PeriodicTask
from celery_cronstore.states import FireState
from celery_cronstore.timers import Timer

__all__ = ["PAST_STEPS", "plan_past"]

#: How far past ``now`` a timer that failed to answer is asked again (first answer wins).
PAST_STEPS = tuple(
    timedelta(**unit)
    for unit in (
        {"minutes": 1},
        {"hours": 1},
        {"days": 1},
        {"days": 7},
        {"days": 31},
        {"days": 366},
    )
)


def plan_past(
    task: PeriodicTask,
    timer: Timer,
    now: datetime,
    error: Exception,
    *,
    node: str,
    lease: timedelta,
) -> Plan | None:
    """Plan a task whose timer failed to answer near ``now``: ask it again further on.

    A timer error must not kill a task that still has future fires: the fire that was
    due (a grid point computed earlier) is still claimed, and the next plan is the timer's
    first answer after ``now`` plus one of :data:`PAST_STEPS`. Return ``None`` when no
    step gives an answer (the caller puts the row in error).
    """
    for step in PAST_STEPS:
        try:
            following = timer.next_after(now + step)
        except TimerError:
            continue
        if following is None:
            return None
        due = task.next_run if task.next_run not in (None, EPOCH) else None
        if due is None or due > now:
            return Plan(RowUpdate(next_run=following))
        task_id = fire_task_id(task.id, task.name, due)
        entry = Entry(
            periodic_task_id=task.id,
            fire_time=due,
            task_id=task_id,
            state=FireState.CLAIMED,
            reason=f"the timer could not answer after this fire ({error}); next plan "
            f"{following.isoformat()}",
            claimed_by=node,
            lease_until=now + lease,
            claimed_at=now,
        )
        try:
            claim = make_claim(task, due, task_id, 1, timer)
        except TimerError:
            claim = make_claim(task, due, task_id, 1, None)
        return Plan(RowUpdate(next_run=following, last_fire=due, runs=1), [entry], [claim])
    return None
