"""What changed in each task's newest fire since the last look: the part Sentry Crons
check-ins (:mod:`celery_cronstore.beat.sentry`) and ping URLs
(:mod:`celery_cronstore.beat.pings`) share.

Every look gets each enabled task's newest fire (one read for all tasks) and returns the
tasks whose fire moved to a new *progress*: ``start`` when it started, ``ok`` when it
succeeded, ``fail`` when it ended badly (failed, timed out, abandoned, lost, dropped,
expired, missed). A fire that started and ended between two looks gets its end alone.
Each reporter keeps its own :class:`Changes`, so one that reports a subset of the tasks
(ping URLs) does not hide a change from another (Sentry).

Right after a start, a beat reports only the changes made within :data:`CATCH_UP` (those
the beat before it may not have reported); older ones are taken as already reported. The
memory is one entry per enabled task: tasks removed or disabled are forgotten.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from celery_cronstore.policy.alerts import BAD_ENDS
from celery_cronstore.records import Fire
from celery_cronstore.states import WORKER_RUNNING, FireState
from celery_cronstore.store.alerts import NewestFire

__all__ = ["CATCH_UP", "FAIL", "OK", "START", "Change", "Changes", "progress", "run_id"]

#: After a start, how far back a fire's change is still reported.
CATCH_UP = timedelta(minutes=10)
START = "start"
OK = "ok"
FAIL = "fail"


def progress(state: str) -> str | None:
    """Return what a fire in ``state`` reports (``None``: nothing yet, or nothing at all)."""
    if state in WORKER_RUNNING:
        return START
    if state == FireState.SUCCEEDED:
        return OK
    if state in BAD_ENDS:
        return FAIL
    return None  # claimed, sending, published (not running yet), skipped (on purpose)


def run_id(task_id: str) -> uuid.UUID:
    """Return the fire's task id as a UUID, the id of its run for the monitor (a non-UUID
    one, as written by raw SQL, is hashed to one, the same every time)."""
    try:
        return uuid.UUID(task_id)
    except ValueError:
        return uuid.uuid5(uuid.NAMESPACE_URL, task_id)


def _changed_at(fire: Fire) -> datetime:
    return fire.finished_at or fire.started_at or fire.fire_time


class Change(NamedTuple):
    """A task whose newest fire reached ``progress`` since the last look."""

    row: NewestFire
    progress: str


class Changes:
    """Per task, the newest fire and progress reported (see the module docstring)."""

    def __init__(self) -> None:
        #: ``task name -> (fire task id, progress)`` last reported.
        self._reported: dict[str, tuple[str, str]] = {}
        self._primed = False

    def look(self, newest: Sequence[NewestFire], now: datetime) -> list[Change]:
        """Return the changes of ``newest`` to report, and take them as reported (the
        reporters send once, without retries: the next change is the next report)."""
        reported: dict[str, tuple[str, str]] = {}
        found: list[Change] = []
        for row in newest:
            fire = row.fire
            step = progress(fire.state)
            previous = self._reported.get(row.name)
            if step is None:
                if previous is not None:
                    reported[row.name] = previous
                continue
            key = (fire.task_id, step)
            reported[row.name] = key
            if previous == key or (not self._primed and now - _changed_at(fire) > CATCH_UP):
                continue
            found.append(Change(row, step))
        self._reported = reported
        self._primed = True
        return found
