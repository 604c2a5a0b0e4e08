"""What happens to the fires of a due task: task ids, misfires, overlap, deadlines.

Pure: no SQL, no Celery, no clock. :func:`plan` takes the task as the store read it, its
timer, the database's now and (lazily) whether a previous fire is still running, and
returns what the store must write: ledger entries, the row's new state and the claims beat
must publish.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from celery_cronstore.policy import jitter
from celery_cronstore.policy.backlog import Backlog, backlog, choose
from celery_cronstore.policy.bounds import bounded, walk_until
from celery_cronstore.policy.exclusions import Calendar, calendar_names, excluded_by
from celery_cronstore.policy.timing import interval_after
from celery_cronstore.records import EPOCH, Claim, PeriodicTask
from celery_cronstore.states import OVERLAPPING, FireState
from celery_cronstore.timers import Timer

__all__ = [
    "Entry",
    "Plan",
    "RowUpdate",
    "Running",
    "fire_task_id",
    "make_claim",
    "missed_entry",
    "plan",
    "resume_point",
    "runs_left",
    "withheld",
]

#: Namespace of the deterministic Celery task ids (uuid5 of task identity + fire time).
_NAMESPACE = uuid.UUID("6f6b3d1e-4a43-4c8e-9d53-2f7d8a1c0b5e")
#: (fire time, state) of the newest fire of a task that is still in flight.
Running = tuple[datetime, str]


def fire_task_id(periodic_task_id: int, name: str, fire_time: datetime) -> str:
    """Return the Celery task id of one fire: the same for every publish of it."""
    instant = fire_time.astimezone(timezone.utc).isoformat()  # one id per instant
    return str(uuid.uuid5(_NAMESPACE, f"{periodic_task_id}/{name}/{instant}"))


@dataclass(frozen=True)
class Entry:
    """One ledger row to insert (its column values, by name)."""

    periodic_task_id: int
    fire_time: datetime
    task_id: str
    state: str
    reason: str | None = None
    fire_until: datetime | None = None
    fire_count: int = 1
    claimed_by: str | None = None
    lease_until: datetime | None = None
    attempts: int = 1
    claimed_at: datetime | None = None

    def row(self) -> dict[str, Any]:
        """Return the column values of the ledger row."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class RowUpdate:
    """The periodic task row's new scheduling state after a plan."""

    next_run: datetime | None
    error: str | None = None
    last_fire: datetime | None = None
    runs: int = 0


@dataclass(frozen=True)
class Plan:
    """What one due task comes to: ledger entries, the row update and the claims, and
    (overlap policy ``replace``) the fires in flight that a new one ends: (fire time,
    reason) each, recorded ``replaced`` and revoked."""

    update: RowUpdate
    entries: list[Entry] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    replaces: list[tuple[datetime, str]] = field(default_factory=list)


def missed_entry(
    task: PeriodicTask,
    first: datetime,
    last: datetime,
    count: int,
    why: str,
    *,
    node: str | None = None,
    exact: bool = True,
) -> Entry:
    """Return the one ledger entry that records ``count`` missed fires from first to last.

    ``exact``: whether ``count`` was counted (``False``: estimated, said "about").
    """
    about = "" if exact else "about "
    return Entry(
        periodic_task_id=task.id,
        fire_time=first,
        fire_until=last if last != first else None,
        fire_count=count,
        task_id=fire_task_id(task.id, task.name, first),
        state=FireState.MISSED,
        claimed_by=node,
        attempts=0,
        reason=(
            f"{about}{count} fire(s) from {first.isoformat()} to {last.isoformat()} not "
            f"published: {why}"
        ),
    )


#: The reason of a run-now fire's ledger row.
RUN_NOW_REASON = "run-now requested"


def make_claim(
    task: PeriodicTask,
    when: datetime,
    task_id: str,
    attempt: int,
    timer: Timer | None,
    *,
    sending: bool = False,
) -> Claim:
    """Return the claim to publish for fire ``when`` of ``task`` (attempt ``attempt``;
    ``sending``: its ledger row is written ``sending``, see :func:`plan`)."""
    send_at = when if timer is None else _due(task, timer, when) or when
    expires = None
    if task.start_deadline is not None:
        expires = send_at + timedelta(seconds=task.start_deadline)
    return Claim(
        periodic_task_id=task.id,
        name=task.name,
        task=task.task,
        args=task.args,
        kwargs=task.kwargs,
        options=task.options,
        fire_time=when,
        task_id=task_id,
        attempt=attempt,
        expires=expires,
        interval=interval_after(timer, when),
        due=send_at if send_at != when else None,
        sending=sending,
    )


def plan(
    task: PeriodicTask,
    timer: Timer,
    now: datetime,
    running: Callable[[], Running | None],
    *,
    node: str,
    lease: timedelta,
    grace: timedelta,
    taken: frozenset[datetime] = frozenset(),
    calendars: Mapping[str, Calendar] | None = None,
    sending: bool = False,
) -> Plan:
    """Decide what becomes of a due task at ``now``.

    A row without a plan (``next_run`` NULL or :data:`EPOCH`) is only planned. Otherwise
    the grid from ``next_run`` to ``now`` is walked, the misfire policy picks what to
    publish and the rest is recorded ``missed``; each picked fire is claimed, or recorded
    ``expired`` past its starting deadline, or ``skipped`` when the overlap policy is
    ``skip`` and ``running()`` (called only then) names a fire still in flight. The row's
    ``next_run`` moves to the first grid point after ``now``. Points at or before the
    row's ``last_fire`` and points in ``taken`` are already in the ledger: they are passed
    over, never claimed twice. A fire an exclusion calendar of the task covers
    (``calendars``, by name) is recorded ``skipped`` with the calendar's reason.

    ``sending``: ``now`` is the real now and the caller hands the claims to the broker as
    soon as its transaction commits; their entries are written ``sending`` instead of
    ``claimed`` (the step a fire sent at most once takes just before it goes), so no
    second write is needed before they go. Every claim's send time is at or before
    ``now`` (a fire whose jittered send is later is left for the next plan).
    """
    left = runs_left(task)
    excludes = calendar_names(task.exclude)
    if left == 0:  # max_runs reached: the schedule has ended (an edit raising it re-plans)
        return Plan(RowUpdate(next_run=None))
    if task.next_run is None or task.next_run == EPOCH:
        # Added or re-timed by raw SQL: plan only, nothing was due yet.
        first = _bounded(task, timer, timer.first_fire(now, task.last_fire))
        return Plan(RowUpdate(next_run=_due(task, timer, first)))
    at = jitter.nominal(task.name, task.jitter, timer, task.next_run, task.last_fire)
    start = _bounded(task, timer, resume_point(at, task.last_fire, timer))
    if start is None:  # past its end_at, or the timer fires no more
        return Plan(RowUpdate(next_run=None))
    limit = max(task.misfire_limit, 1)
    keep = limit + (2 if task.jitter else 1)  # one more: the newest may not be sent yet
    until = walk_until(now, task.end_at)
    walk = _sent_by(task, timer, backlog(timer, start, until, keep=keep, taken=taken), now)
    if walk.first is None:  # nothing due after all
        return Plan(RowUpdate(next_run=_due(task, timer, _bounded(task, timer, walk.following))))
    publish = choose(task.misfire_policy, walk.tail, now, grace, limit)
    if left is not None:  # the newest of them, up to the runs max_runs leaves
        publish = publish[-left:]
    entries: list[Entry] = []
    claims: list[Claim] = []
    missed = walk.count - len(publish)
    if missed > 0:
        why = f"beat was not running or fell behind (misfire policy {task.misfire_policy})"
        last_missed = walk.tail[-len(publish) - 1]
        entries.append(
            missed_entry(task, walk.first, last_missed, missed, why, node=node, exact=walk.exact)
        )
    # The in-flight read runs only when a fire could be published, and at most once.
    busy = _once(running) if task.overlap_policy in OVERLAPPING else _nothing
    if task.overlap_policy == "replace" and len(publish) > 1:  # only the newest is sent
        entries.extend(_superseded(task, publish[:-1], node))
        publish = publish[-1:]
    buffered = False
    replaces: list[tuple[datetime, str]] = []
    for when in publish:
        claimed = Entry(
            periodic_task_id=task.id,
            fire_time=when,
            task_id=fire_task_id(task.id, task.name, when),
            state=FireState.SENDING if sending else FireState.CLAIMED,
            claimed_by=node,
            lease_until=now + lease,
            claimed_at=now,
        )
        late = now - (_due(task, timer, when) or when)
        excluded = excluded_by(excludes, calendars or {}, when, task.tz) if excludes else None
        if excluded is not None:
            entries.append(_refused(claimed, FireState.SKIPPED, f"not published: {excluded}"))
        elif task.start_deadline is not None and late > timedelta(seconds=task.start_deadline):
            entries.append(
                _refused(
                    claimed,
                    FireState.EXPIRED,
                    f"not published: {late.total_seconds():.1f}s late, past the starting "
                    f"deadline of {task.start_deadline:g}s",
                )
            )
        elif (held := busy()) is not None and task.overlap_policy != "replace":
            if task.overlap_policy == "skip":
                why = f"fire {held[0].isoformat()} is still {held[1]} (overlap policy skip)"
                entries.append(_refused(claimed, FireState.SKIPPED, f"not published: {why}"))
            elif not buffered and held[1] != FireState.BUFFERED:
                buffered = True
                entries.append(_buffer(claimed, held))
            else:
                why = "a fire is already buffered (overlap policy buffer_one)"
                entries.append(_refused(claimed, FireState.SKIPPED, f"not published: {why}"))
        else:
            if held is not None:  # overlap policy replace: the new fire ends the old one
                why = f"replaced by fire {when.isoformat()} (overlap policy replace)"
                replaces.append((held[0], why))
            entries.append(claimed)
            claims.append(
                make_claim(task, when, claimed.task_id, claimed.attempts, timer, sending=sending)
            )
    ended = left is not None and len(claims) >= left
    following = None if ended else _due(task, timer, _bounded(task, timer, walk.following))
    update = RowUpdate(next_run=following, last_fire=walk.tail[-1], runs=len(claims))
    return Plan(update, entries, claims, replaces)


def _bounded(task: PeriodicTask, timer: Timer, when: datetime | None) -> datetime | None:
    """The first grid point from ``when`` on within the task's start_at and end_at."""
    return bounded(timer, when, task.start_at, task.end_at)


def _due(task: PeriodicTask, timer: Timer, when: datetime | None) -> datetime | None:
    """When the fire at nominal ``when`` is sent: later by its jitter, if the task has one."""
    return jitter.due(task.name, task.jitter, timer, when)


def _sent_by(task: PeriodicTask, timer: Timer, walk: Backlog, now: datetime) -> Backlog:
    """Return ``walk`` without its newest point if that one's jittered send is after
    ``now`` (only the newest can be: a delay never reaches the next grid point)."""
    if not task.jitter or not walk.tail:
        return walk
    newest = walk.tail[-1]
    send_at = _due(task, timer, newest)
    if send_at is None or send_at <= now:
        return walk
    if walk.count <= 1:
        return Backlog(None, [], 0, newest, walk.exact)
    return Backlog(walk.first, walk.tail[:-1], walk.count - 1, newest, walk.exact)


def runs_left(task: PeriodicTask) -> int | None:
    """Return how many scheduled fires ``task``'s ``max_runs`` still allows (``None``: no
    bound). Its run count (``total_run_count``) counts the fires beat claimed to send."""
    if task.max_runs is None:
        return None
    return max(0, task.max_runs - task.total_run_count)


def resume_point(next_run: datetime, last_fire: datetime | None, timer: Timer) -> datetime | None:
    """Return the first grid point from ``next_run`` on that is not in the ledger yet.

    ``next_run`` itself, unless it is at or before ``last_fire``: that point is accounted
    for already (``next_run`` moved back by hand, a one-off instant planned again), so go
    on from the newest recorded fire. ``None``: the timer fires no more.
    """
    if last_fire is not None and next_run <= last_fire:
        return timer.next_after(last_fire)
    return next_run


def _once(read: Callable[[], Running | None]) -> Callable[[], Running | None]:
    answers: list[Running | None] = []

    def cached() -> Running | None:
        if not answers:
            answers.append(read())
        return answers[0]

    return cached


def _nothing() -> Running | None:
    return None


def _buffer(claimed: Entry, held: Running) -> Entry:
    """The entry of a fire held back until ``held`` ends (overlap policy buffer_one)."""
    reason = (
        f"waiting for fire {held[0].isoformat()} ({held[1]}) to end (overlap policy buffer_one)"
    )
    return replace(claimed, state=FireState.BUFFERED, lease_until=None, reason=reason)


def _superseded(task: PeriodicTask, times: list[datetime], node: str) -> list[Entry]:
    """Entries of due fires a newer one due with them replaces before they are sent."""
    return [
        Entry(
            periodic_task_id=task.id,
            fire_time=when,
            task_id=fire_task_id(task.id, task.name, when),
            state=FireState.SKIPPED,
            claimed_by=node,
            attempts=0,
            reason="not published: a newer fire was due with it (overlap policy replace)",
        )
        for when in times
    ]


def _refused(entry: Entry, state: str, reason: str) -> Entry:
    return Entry(**{**entry.row(), "state": state, "reason": reason})


def withheld(plan: Plan, reason: str) -> Plan:
    """Return ``plan`` with every fire it would send recorded ``dropped`` for ``reason``.

    The task is planned as usual (its ``next_run`` moves on) but nothing is sent: what
    beat does while another scheduler still fires the task (:mod:`celery_cronstore.store.
    peers`). Once that one lets go, the next fire here is sent, with no edit needed.
    """
    entries = [
        replace(
            entry,
            state=FireState.DROPPED,
            reason=f"not published: {reason}",
            lease_until=None,
            attempts=0,
        )
        if entry.state == FireState.CLAIMED
        else entry
        for entry in plan.entries
    ]
    return Plan(replace(plan.update, runs=0), entries, [])
