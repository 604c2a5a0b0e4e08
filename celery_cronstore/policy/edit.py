"""What an edit does to a task's planned fires. Pure: no SQL, no Celery, no clock.

An edit that changes *when* a task fires (its timer, kind or zone) or *whether* it fires
(the enabled flag), or that touches a task in error, re-plans it: the due fires no beat
has claimed yet are recorded ``missed`` (the edit skips past them; without a record they
would be lost without a trace, e.g. a task disabled during a database outage), and the
row gets its first plan after the edit. Any other edit (arguments, policies, the
description) leaves the plan as it is. :func:`edit_plan` says what to write;
:class:`~celery_cronstore.store.Store` reads, asks and writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery_cronstore.errors import TimerError, TimerSearchError
from celery_cronstore.policy.backlog import backlog
from celery_cronstore.policy.bounds import bounded, walk_until
from celery_cronstore.policy.fires import Entry, missed_entry, resume_point
from celery_cronstore.policy.jitter import due as jitter_due
from celery_cronstore.policy.jitter import nominal as jitter_nominal
from celery_cronstore.policy.timing import timer_of
from celery_cronstore.records import EPOCH, PeriodicTask
from celery_cronstore.timers import Timer

__all__ = [
    "REPLAN_FIELDS",
    "EditPlan",
    "edit_plan",
    "first_plan",
    "readable_timer",
    "replans",
    "unclaimed",
]

#: The columns whose change re-plans a task: when it fires, and whether.
REPLAN_FIELDS = (
    "timer",
    "timer_kind",
    "tz",
    "enabled",
    "max_runs",
    "jitter",
    "start_at",
    "end_at",
)


@dataclass(frozen=True)
class EditPlan:
    """What an edit writes besides the edited fields themselves.

    ``replan``: whether the row gets a new ``next_run`` (``None``: no further fire, or
    disabled; :data:`EPOCH`: "beat, plan it", for a timer only beat can judge).
    ``missed``: the one ledger entry recording the due fires no beat claimed, and
    ``last_fire`` the newest of them (the row's new ``last_fire``; ``None``: unchanged).
    ``clear_error``: the task was in error and the edit is its fix.
    """

    replan: bool
    next_run: datetime | None = None
    missed: Entry | None = None
    last_fire: datetime | None = None
    clear_error: bool = False

    def values(self) -> dict[str, Any]:
        """Return the row's column values this plan sets (none when nothing is re-planned)."""
        out: dict[str, Any] = {}
        if self.clear_error:
            out["error"] = None
        if self.replan:
            out["next_run"] = self.next_run
        if self.last_fire is not None:
            out["last_fire"] = self.last_fire
        return out


def replans(task: PeriodicTask, values: Mapping[str, Any]) -> bool:
    """Return whether writing column ``values`` to ``task`` re-plans it.

    It does when a field of :data:`REPLAN_FIELDS` takes a new value, and always for a task
    in error: the edit is its fix, so the error is cleared and the task planned again (beat
    puts it back in error, with the reason, if it is still wrong).
    """
    if task.error is not None:
        return True
    return any(k in values and values[k] != getattr(task, k) for k in REPLAN_FIELDS)


def readable_timer(task: PeriodicTask) -> Timer | None:
    """Return the stored task's timer, or ``None`` if it cannot be read (raw SQL wrote it)."""
    try:
        return timer_of(task)
    except (TimerError, ValueError):
        return None


def first_plan(
    timer: Timer | None,
    now: datetime,
    last_fire: datetime | None,
    enabled: bool,
    *,
    name: str = "",
    jitter: float | None = None,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
) -> datetime | None:
    """Return ``next_run`` for a task added or re-planned at ``now``.

    Not before ``start_at``; ``None`` past ``end_at`` (:mod:`~celery_cronstore.policy.
    bounds`). With a ``jitter`` it is the first fire's jittered send instant (task
    ``name``'s delay, :mod:`~celery_cronstore.policy.jitter`).

    ``None`` when disabled or when the timer fires no more (a one-off instant that already
    fired); :data:`EPOCH` ("beat, check it") when the timer cannot be read or cannot answer
    near ``now``, so that beat puts the task in error with the reason, or plans past it.
    """
    if not enabled:
        return None
    if timer is None:
        return EPOCH
    try:
        first = bounded(timer, timer.first_fire(now, last_fire), start_at, end_at)
        return jitter_due(name, jitter, timer, first)
    except TimerSearchError:  # beat plans past the instant the timer cannot answer at
        return EPOCH


def adopted_plan(
    timer: Timer | None,
    now: datetime,
    *,
    last_run_at: datetime | None,
    start_at: datetime | None,
    enabled: bool,
) -> datetime | None:
    """Return ``next_run`` for a task brought over from another scheduler at ``now``.

    The first fire is the timer's next one after the old scheduler's last run (so that
    nothing fires again that already fired), and not before ``start_at``. It may be in
    the past (fires due while switching): beat then applies the task's misfire policy,
    as the old scheduler would have caught up. Without a last run it is the first fire
    after ``now``. ``None`` when disabled or when the timer fires no more (a one-off
    instant that already ran); :data:`EPOCH` when the timer cannot answer.
    """
    if not enabled:
        return None
    if timer is None:
        return EPOCH
    try:
        planned = (
            timer.first_fire(now, None) if last_run_at is None else timer.next_after(last_run_at)
        )
        if planned is not None and start_at is not None and planned < start_at:
            planned = timer.next_after(start_at - timedelta(microseconds=1))
    except TimerSearchError:
        return EPOCH
    return planned


def edit_plan(
    task: PeriodicTask, values: Mapping[str, Any], now: datetime, *, timer: Timer | None
) -> EditPlan:
    """Decide what writing column ``values`` to ``task`` at ``now`` does to its fires.

    ``task`` is the row as read (locked) before the edit; ``timer`` the task's timer after
    it (``None``: it cannot be read). An edit that does not re-plan (:func:`replans`)
    changes nothing else. One that does records the due fires no beat claimed as missed
    (walking the *old* timer, the one they were due by) and plans the first fire after
    ``now`` and after the newest fire recorded.
    """
    if not replans(task, values):
        return EditPlan(replan=False)
    enabled = bool(values.get("enabled", task.enabled))
    missed = unclaimed(task, now, "re-planned" if enabled else "disabled")
    last = None if missed is None else (missed.fire_until or missed.fire_time)
    # A task that has run its max_runs plans nothing; raising the bound plans it again.
    bound = values.get("max_runs", task.max_runs)
    ended = bound is not None and task.total_run_count >= bound
    if task.paused_at is not None and enabled:  # it stays paused: planned for its resume
        return EditPlan(
            replan=True,
            next_run=task.paused_until,
            missed=missed,
            last_fire=last,
            clear_error=task.error is not None,
        )
    return EditPlan(
        replan=True,
        next_run=first_plan(
            timer,
            now,
            last or task.last_fire,
            enabled and not ended,
            name=values.get("name", task.name),
            jitter=values.get("jitter", task.jitter),
            start_at=values.get("start_at", task.start_at),
            end_at=values.get("end_at", task.end_at),
        ),
        missed=missed,
        last_fire=last,
        clear_error=task.error is not None,
    )


def unclaimed(task: PeriodicTask, now: datetime, why: str) -> Entry | None:
    """Return the entry recording ``task``'s due fires no beat has claimed, or ``None``.

    Only an enabled task whose plan is sound has such fires: none for a disabled task, one
    in error, one never planned (``next_run`` NULL or :data:`EPOCH`), one whose timer
    cannot be read, or one whose next fire is still ahead of ``now``. Points at or before
    the row's ``last_fire`` are in the ledger already and are not counted again.
    """
    first = task.next_run
    if not task.enabled or task.error is not None or first is None or first == EPOCH:
        return None
    if first > now:
        return None
    timer = readable_timer(task)
    if timer is None:
        return None
    at = jitter_nominal(task.name, task.jitter, timer, first, task.last_fire)
    start = resume_point(at, task.last_fire, timer)
    if start is None or start > now:
        return None
    walk = backlog(timer, start, walk_until(now, task.end_at), keep=1)
    if walk.first is None:
        return None
    reason = f"the task was {why} before beat claimed them"
    return missed_entry(task, walk.first, walk.tail[-1], walk.count, reason, exact=walk.exact)
