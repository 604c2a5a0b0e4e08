"""Whether beat may send a fire of a periodic task row: the one check every send path asks.

A claim (``store.claims``), a take-over of a lapsed claim (``store.takeover``) and a
run-now all refuse the same rows for the same reasons: stored values that do not read
back (JSON columns, options), a name outside the allowlist, and what the
:class:`~celery_cronstore.store.seam.TaskSeam` says about the name and the call.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from celery_cronstore import policy
from celery_cronstore.errors import TimerError
from celery_cronstore.records import PeriodicTask
from celery_cronstore.store.rows import json_problems
from celery_cronstore.store.seam import TaskSeam
from celery_cronstore.timers import Timer

__all__ = ["SendCheck", "timer_or_none"]


class SendCheck:
    """Say why a fire of a row must not be sent, from the allowlist and the task seam."""

    def __init__(self, allowlist: tuple[str, ...], seam: TaskSeam) -> None:
        self.allowlist = allowlist
        self.seam = seam

    def refusal(
        self, task: PeriodicTask, row: sa.Row[Any], problems: list[str] | None = None
    ) -> str | None:
        """Return why a fire of ``task`` (read as ``row``) must not be sent, or ``None``.

        ``problems``: the row's JSON problems if the caller read them with the task
        (:func:`~celery_cronstore.store.rows.read_task`), else they are read here."""
        if problems is None:
            problems = json_problems(row)
        refused = policy.send_refusal(task.task, problems, self.allowlist, self.seam.registered)
        if refused is None:
            refused = self.seam.call_problem(task.task, task.args, task.kwargs)
        return refused


def timer_or_none(task: PeriodicTask) -> Timer | None:
    """Return the task's timer, or ``None`` when it is bad (a fire already claimed still
    goes)."""
    try:
        return policy.timer_of(task)
    except (TimerError, ValueError):
        return None
