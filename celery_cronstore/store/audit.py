"""The audit trail: who changed which periodic task, from which window, and when.

Every write of the :class:`~celery_cronstore.store.Store` API records one row of
``cronstore_audit`` **in the transaction of the write itself**: the entry commits with the
edit or not at all, so a refused or failed edit leaves none and an edit never goes
unrecorded. The writer is an :class:`Actor`: a name and the window it wrote from. A store
writes as :data:`API` unless a window asked for another one with
:meth:`Store.acting <celery_cronstore.store.Store.acting>`:

======== ============================================== ===============================
window   who writes                                     actor
======== ============================================== ===============================
api      ``Store.add/update/remove/...`` called in code  given by the caller, or ``api``
cli      ``celery -A app cronstore ...``                 the OS user (``getpass``)
web      the dashboard                                   the logged-in user, or ``token``
admin    the Django admin                                ``request.user``
import   ``cronstore import``                            the OS user
apply    a declarative apply of a plan                   the caller's
======== ============================================== ===============================

What is recorded never holds a task's arguments (they may carry secrets): an edit names
the fields it changed, with old and new values for the short ones (timer, zone, enabled,
policies), only the name for ``args``, ``kwargs``, ``options`` and ``description``.

The table grows with every edit; :class:`~celery_cronstore.store.retention.Pruner` deletes
entries older than the ledger's retention (``cronstore_history_days``) with the fire
history, a batch at a time (:func:`prune`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from celery_cronstore import fields
from celery_cronstore.records import PeriodicTask
from celery_cronstore.store.db import Database
from celery_cronstore.store.schema import audit, periodic_task

__all__ = [
    "API",
    "MAX_LIMIT",
    "WINDOWS",
    "Actor",
    "AuditEntry",
    "entries",
    "prune",
    "record",
    "record_many",
    "record_where",
    "update_entry",
]

#: The windows an edit may come from (the ``window`` column).
WINDOWS = ("api", "cli", "web", "admin", "import", "apply")
#: Most entries one read returns (:func:`entries`).
MAX_LIMIT = 10_000
#: Characters kept of an actor's name and a task's name (the columns' sizes).
_NAME_CHARS = 200
#: Characters kept of an entry's detail, and of one value shown in it.
_DETAIL_CHARS = 2000
_VALUE_CHARS = 120
#: Fields whose values an entry never shows (arguments may carry secrets; long texts).
_HIDDEN = frozenset({"args", "kwargs", "options", "description"})

_A = audit.c


@dataclass(frozen=True)
class Actor:
    """Who writes, and from which window (one of :data:`WINDOWS`)."""

    name: str
    window: str = "api"

    def __post_init__(self) -> None:
        if self.window not in WINDOWS:
            raise ValueError(
                f"unknown audit window {self.window!r}: give one of {', '.join(WINDOWS)}"
            )
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("an actor needs a name (the user who writes), got an empty one")
        # One column of 200 characters: a longer name is cut, never refused mid-edit.
        object.__setattr__(self, "name", self.name.strip()[:_NAME_CHARS])


#: What a store writes as unless told otherwise.
API = Actor("api", "api")


@dataclass(frozen=True)
class AuditEntry:
    """One recorded edit (newest first from :func:`entries`)."""

    id: int
    at: datetime
    actor: str
    window: str
    action: str
    task_name: str
    detail: str | None


def record(
    conn: sa.Connection,
    actor: Actor,
    action: str,
    task_name: str,
    *,
    at: datetime,
    detail: str | None = None,
) -> None:
    """Record one edit inside the caller's transaction ``conn`` (it commits with it)."""
    conn.execute(
        sa.insert(audit).values(
            at=at,
            actor=actor.name,
            window=actor.window,
            action=action,
            task_name=task_name[:_NAME_CHARS],
            detail=_bound(detail),
        )
    )


def record_many(
    conn: sa.Connection,
    actor: Actor,
    done: Sequence[tuple[str, str]],
    *,
    at: datetime,
    detail: str | None = None,
) -> None:
    """Record ``(action, task name)`` pairs in one multi-row ``INSERT`` (an import)."""
    if not done:
        return
    rows = [
        {
            "at": at,
            "actor": actor.name,
            "window": actor.window,
            "action": action,
            "task_name": name[:_NAME_CHARS],
            "detail": _bound(detail),
        }
        for action, name in done
    ]
    conn.execute(sa.insert(audit), rows)


def record_where(
    conn: sa.Connection,
    actor: Actor,
    action: str,
    where: Sequence[sa.ColumnElement[bool]],
    *,
    at: datetime,
    detail: str | None = None,
) -> int:
    """Record ``action`` for every task ``where`` selects, in one ``INSERT ... SELECT``
    (removing an owner's 100,000 tasks is one statement, not 100,000); return how many."""
    columns = ("at", "actor", "window", "action", "task_name", "detail")
    select = sa.select(
        sa.literal(at, audit.c.at.type),
        sa.literal(actor.name, audit.c.actor.type),
        sa.literal(actor.window, audit.c.window.type),
        sa.literal(action, audit.c.action.type),
        periodic_task.c.name,
        sa.literal(_bound(detail), audit.c.detail.type),
    ).where(*where)
    result = conn.execute(sa.insert(audit).from_select(columns, select))
    return max(result.rowcount or 0, 0)


def update_entry(
    before: PeriodicTask, after: PeriodicTask, asked: Mapping[str, Any]
) -> tuple[str, str | None]:
    """Return the ``(action, detail)`` of an update from ``before`` to ``after`` asked
    with ``asked`` (the keywords given to ``Store.update``): ``enable``/``disable`` when
    that is all it asked, else ``update`` naming each field of the table whose stored
    value changed (as stored: a timer in its canonical form)."""
    asked = {k: v for k, v in asked.items() if k not in ("force", "expected_version")}
    if set(asked) == {"enabled"}:
        return ("enable" if asked["enabled"] else "disable"), None
    changed: list[str] = []
    for spec in fields.table():
        attr = "owner" if spec.name == "owner" else spec.key
        old = _text(getattr(before, attr, None), spec.name == "owner")
        new = _text(getattr(after, attr, None), spec.name == "owner")
        if old == new:
            continue
        if spec.name in _HIDDEN:
            changed.append(f"{spec.name} changed")
        else:
            changed.append(f"{spec.name}: {_short(old)} -> {_short(new)}")
    return "update", "; ".join(changed) if changed else "no field changed"


def entries(
    db: Database, *, task: str | None = None, limit: int = 100, before: int | None = None
) -> list[AuditEntry]:
    """Return recorded edits, newest first: ``limit`` of them (at most :data:`MAX_LIMIT`),
    of one task if ``task`` is given, older than entry id ``before`` (paging)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
    # Newest first by id (the order entries were written, whatever the clock did): the
    # primary key read backwards, or one task's few rows through its index.
    query = sa.select(audit).order_by(_A.id.desc()).limit(limit)
    if task is not None:
        query = query.where(_A.task_name == task)
    if before is not None:
        query = query.where(_A.id < before)
    with db.engine.connect() as conn:
        return [AuditEntry(**row._mapping) for row in conn.execute(query)]


def prune(db: Database, cutoff: datetime, *, batch: int) -> int:
    """Delete up to ``batch`` entries recorded before ``cutoff``, oldest first, in one
    short transaction (a seek in the ``at`` index); return how many went."""
    with db.begin() as conn:
        ids = list(
            conn.execute(
                sa.select(_A.id).where(_A.at < cutoff).order_by(_A.at).limit(batch)
            ).scalars()
        )
        if not ids:
            return 0
        return max(conn.execute(sa.delete(audit).where(_A.id.in_(ids))).rowcount or 0, 0)


def _text(value: Any, owner: bool = False) -> str:
    """Return ``value`` as the text compared and shown (an owner as ``type:id``)."""
    if owner and value is not None:
        return f"{value[0]}:{value[1]}"
    if isinstance(value, tuple):
        value = list(value)
    return "-" if value is None else str(value)


def _short(text: str) -> str:
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1] + "…"


def _bound(detail: str | None) -> str | None:
    if detail is None or len(detail) <= _DETAIL_CHARS:
        return detail
    return detail[: _DETAIL_CHARS - 1] + "…"
