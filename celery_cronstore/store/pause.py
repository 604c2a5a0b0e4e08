"""The SQL of pausing and resuming a periodic task (the rules: :mod:`celery_cronstore.policy.
pause`).

Each is one transaction on the task's locked row, recorded in the audit trail as the
store's actor. Pausing records the fires that were due and not yet claimed as ``missed``
(as a disable does), keeps who, when, why and until when on the row, and plans the row
for its resume (``next_run`` = ``paused_until``, or none). Resuming, by hand or by beat at
``paused_until`` (:func:`resume_in`, called from the claim's own transaction), records the
fires the pause held back and plans the row again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from celery_cronstore import policy
from celery_cronstore.errors import CronstoreError
from celery_cronstore.fields import FieldValueError, check_text
from celery_cronstore.fields.values import INSTANT_WANTS, instant
from celery_cronstore.policy import pause as rule
from celery_cronstore.records import EPOCH, PeriodicTask
from celery_cronstore.states import FireState
from celery_cronstore.store import audit
from celery_cronstore.store.db import Database
from celery_cronstore.store.rows import insert_entry, to_task
from celery_cronstore.store.schema import periodic_task

__all__ = ["NotPausedError", "StorePause", "resume_in"]

_PT = periodic_task.c
_CLEARED = {
    "paused_at": None,
    "paused_by": None,
    "paused_note": None,
    "paused_until": None,
    "paused_resume": "skip",
}


class NotPausedError(CronstoreError, ValueError):
    """Resume was asked of a task that is not paused."""


class StorePause:
    """Pause and resume periodic tasks (recorded as :attr:`actor`)."""

    db: Database
    actor: audit.Actor

    #: The task's row, locked if asked (:class:`~celery_cronstore.store.state.StoreReads`).
    _row: Callable[..., sa.Row[Any]]

    def pause(
        self,
        name: str,
        *,
        note: str = "",
        until: datetime | str | None = None,
        resume: str = "skip",
    ) -> PeriodicTask:
        """Pause task ``name``: nothing is claimed for it until ``until`` (``None``: until
        :meth:`resume`), when beat resumes it and does ``resume`` (``skip`` or ``newest``)
        with the fires it held back. ``note`` says why; the store's actor is who.

        Pausing a paused task replaces its note, end and resume choice (it stays paused
        since the first pause). Raise ``ValueError`` naming the problem for a note too
        long, an end not in the future or an unknown resume choice.
        """
        text = check_text("note", note, max_chars=rule.NOTE_CHARS).strip()
        end = None if until is None or until == "" else instant("until", until, INSTANT_WANTS)
        with self.db.begin() as conn:
            task = to_task(self._row(conn, name, lock=True))
            now = self.db.now(conn)
            problem = rule.pause_problem(end, resume, now)
            if problem is not None:
                raise FieldValueError("until" if resume in rule.RESUMES else "resume", problem)
            missed = (
                _skipped(policy.unclaimed(task, now, "paused")) if task.paused_at is None else None
            )
            values: dict[str, Any] = {
                "paused_at": task.paused_at or now,
                "paused_by": self.actor.name,
                "paused_note": text or None,
                "paused_until": end,
                "paused_resume": resume,
                "next_run": end if task.enabled else None,
            }
            if missed is not None:
                insert_entry(conn, missed)
                values["last_fire"] = missed.fire_until or missed.fire_time
            _write(conn, task, values, now)
            until_text = "until resumed" if end is None else f"until {end.isoformat()}"
            detail = f"{until_text}, then {resume}" + (f": {text}" if text else "")
            audit.record(conn, self.actor, "pause", name, at=now, detail=detail)
            return to_task(self._row(conn, name))

    def resume(self, name: str, *, mode: str | None = None) -> PeriodicTask:
        """Resume paused task ``name`` now; ``mode`` (``skip`` or ``newest``; ``None``: the
        choice made when pausing) says what becomes of the fires it held back.
        :class:`NotPausedError` if it is not paused."""
        with self.db.begin() as conn:
            task = to_task(self._row(conn, name, lock=True))
            if task.paused_at is None:
                raise NotPausedError(f"periodic task {name!r} is not paused: nothing to resume")
            if mode is not None and mode not in rule.RESUMES:
                raise FieldValueError(
                    "resume", f"resume must be one of {', '.join(rule.RESUMES)}, got {mode!r}"
                )
            now = self.db.now(conn)
            after = to_task(resume_in(conn, task, now, mode=mode))
            audit.record(
                conn, self.actor, "resume", name, at=now, detail=mode or task.paused_resume
            )
            return after


def resume_in(
    conn: sa.Connection, task: PeriodicTask, now: datetime, *, mode: str | None = None
) -> sa.Row[Any]:
    """Resume paused ``task`` (its row locked by the caller) at ``now`` inside ``conn``;
    return the row as written. Beat calls it when a due row's ``paused_until`` has come."""
    timer = policy.readable_timer(task)
    values: dict[str, Any] = dict(_CLEARED)
    if timer is None:  # beat puts it in error with the reason on its next look
        values["next_run"] = EPOCH if task.enabled else None
    else:
        resumed = rule.resume_plan(task, timer, now, mode or task.paused_resume)
        if resumed.missed is not None:
            insert_entry(conn, resumed.missed)
        values["next_run"] = resumed.next_run if task.enabled else None
        values["last_fire"] = resumed.last_fire
    _write(conn, task, values, now)
    return conn.execute(sa.select(periodic_task).where(_PT.id == task.id)).one()


def _skipped(entry: policy.Entry | None) -> policy.Entry | None:
    """The fires due and unclaimed when a task is paused: held back on purpose, so
    ``skipped`` (not ``missed``, which alerts count as bad ends)."""
    return None if entry is None else replace(entry, state=FireState.SKIPPED)


def _write(conn: sa.Connection, task: PeriodicTask, values: dict[str, Any], now: datetime) -> None:
    conn.execute(
        sa.update(periodic_task)
        .where(_PT.id == task.id)
        .values(**values, updated_at=now, version=_PT.version + 1)
    )
