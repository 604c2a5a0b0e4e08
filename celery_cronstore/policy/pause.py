"""Pause with a note, and pause until: what pausing and resuming do to a task's fires.

Pure: no clock, no SQL. A paused task (``paused_at`` set) is claimed nothing: its row's
``next_run`` is its ``paused_until`` (``None``: until someone resumes it), so beat's due
query passes it over, and at ``paused_until`` beat resumes it itself. Who paused it, when,
why and until when are kept on the row and shown in every window.

Resuming chooses what becomes of the fires the pause held back (``resume``, chosen when
pausing and changeable when resuming):

- ``skip`` (the default): none is sent; they are recorded ``skipped`` (on purpose: not
  a bad end, so no alert counts them) with the pause's note, and the task fires from its
  next grid point after now;
- ``newest``: the newest of them is planned as due now, and the older ones are recorded
  ``skipped``. Beat then sends it under the task's own policies, like a fire late after
  downtime: misfire policy ``skip`` or a passed ``start_deadline`` still refuse it.

A fire already published when the pause commits still runs (unlike ``disable``, whose
guard drops it): pausing stops what is claimed, as Kubernetes' ``suspend`` and Temporal's
pause do. Hand-written: the rules are the scheduler's own; there is nothing to reuse.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from celery_cronstore.policy.backlog import backlog
from celery_cronstore.policy.bounds import bounded, walk_until
from celery_cronstore.policy.edit import first_plan
from celery_cronstore.policy.fires import Entry, missed_entry
from celery_cronstore.records import PeriodicTask
from celery_cronstore.states import FireState
from celery_cronstore.timers import Timer

__all__ = [
    "NOTE_CHARS",
    "RESUMES",
    "Resumed",
    "held_back",
    "pause_problem",
    "paused_text",
    "resume_plan",
]

#: What resuming does with the fires the pause held back (see the module docstring).
RESUMES = ("skip", "newest")
#: The longest note a pause may carry.
NOTE_CHARS = 1000


def pause_problem(until: datetime | None, resume: str, now: datetime) -> str | None:
    """Return why a pause until ``until`` resuming with ``resume`` is refused at ``now``."""
    if resume not in RESUMES:
        return f"resume must be one of {', '.join(RESUMES)}, got {resume!r}"
    if until is not None and until <= now:
        return (
            f"until {until.isoformat()} is not in the future (now {now.isoformat()}): give a "
            "later instant, or none to pause until it is resumed"
        )
    return None


def paused_text(task: PeriodicTask) -> str | None:
    """Say that ``task`` is paused, by whom, since and until when, and why (``None``: it
    is not paused)."""
    if task.paused_at is None:
        return None
    who = f" by {task.paused_by}" if task.paused_by else ""
    until = (
        f" until {task.paused_until.isoformat()}"
        if task.paused_until is not None
        else " until resumed"
    )
    note = f": {task.paused_note}" if task.paused_note else ""
    return f"paused{who} at {task.paused_at.isoformat()}{until} (then {task.paused_resume}){note}"


@dataclass(frozen=True)
class Resumed:
    """What resuming a paused task writes: the fires it held back recorded ``missed``,
    and the row's new plan."""

    missed: Entry | None
    next_run: datetime | None
    last_fire: datetime | None


def resume_plan(task: PeriodicTask, timer: Timer, now: datetime, mode: str) -> Resumed:
    """Decide what resuming paused ``task`` at ``now`` does (``mode``: one of
    :data:`RESUMES`). The fires held back are the grid points after the pause began (and
    after the task's last recorded fire) up to ``now``, within its bounds."""
    if task.paused_at is None:
        raise ValueError(f"periodic task {task.name!r} is not paused")
    after = task.paused_at if task.last_fire is None else max(task.last_fire, task.paused_at)
    start = bounded(timer, timer.next_after(after), task.start_at, task.end_at)
    walk = None
    if start is not None and start <= now:
        walk = backlog(timer, start, walk_until(now, task.end_at), keep=2)
    if walk is None or walk.first is None:
        return Resumed(None, _plan(task, timer, now, task.last_fire), task.last_fire)
    why = _held(task)
    if mode == "newest":
        newest = walk.tail[-1]
        if walk.count == 1:
            return Resumed(None, newest, task.last_fire)
        older = walk.tail[-2]
        entry = held_back(task, walk.first, older, walk.count - 1, why, exact=walk.exact)
        return Resumed(entry, newest, older)
    last = walk.tail[-1]
    entry = held_back(task, walk.first, last, walk.count, why, exact=walk.exact)
    return Resumed(entry, _plan(task, timer, now, last), last)


def held_back(
    task: PeriodicTask, first: datetime, last: datetime, count: int, why: str, *, exact: bool
) -> Entry:
    """The one ledger entry of ``count`` fires a pause held back: ``skipped`` (on purpose,
    as the overlap policy's), one row for the run from ``first`` to ``last``."""
    entry = missed_entry(task, first, last, count, why, exact=exact)
    return replace(entry, state=FireState.SKIPPED)


def _plan(
    task: PeriodicTask, timer: Timer, now: datetime, last: datetime | None
) -> datetime | None:
    return first_plan(
        timer,
        now,
        last,
        task.enabled,
        name=task.name,
        jitter=task.jitter,
        start_at=task.start_at,
        end_at=task.end_at,
    )


def _held(task: PeriodicTask) -> str:
    who = f" by {task.paused_by}" if task.paused_by else ""
    note = f" ({task.paused_note})" if task.paused_note else ""
    return f"the task was paused{who}{note}"
