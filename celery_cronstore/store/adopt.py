"""Carry out an import or apply plan (:mod:`celery_cronstore.adopt.plan`) in one transaction.

Everything the plan creates and updates is written in one transaction: all of it, or,
if any statement fails (a name taken meanwhile, the database gone), none of it. A task
brought in with the old scheduler's last run gets ``last_fire`` = that run (beat never
fires at or before it) and its first ``next_run`` from
:func:`celery_cronstore.policy.adopted_plan`. Removals (``--prune``) are disabled in the
same transaction, so no fire of theirs is claimed after it commits; their ledgers and rows
are then deleted as :meth:`~celery_cronstore.store.Store.remove` deletes them, in short
batches (interrupted, the tasks stay disabled: pruning again finishes the job).

An ``apply`` plan's calendars (:mod:`celery_cronstore.adopt.calendars`) are written in the
same transaction, through :class:`~celery_cronstore.store.calendars.Calendars` (each write
in the audit trail): created and replaced **before** the tasks, so that a task's
``exclude`` finds them, and removed (``--prune``) after, once no task names them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from celery_cronstore import policy
from celery_cronstore.errors import DuplicateTaskError
from celery_cronstore.store import audit, removal
from celery_cronstore.store.calendars import (
    CalendarExistsError,
    CalendarInUseError,
    CalendarNotFoundError,
    Calendars,
    check_names,
)
from celery_cronstore.store.retention import REMOVE_BATCH
from celery_cronstore.store.rows import check_values, owner_values, timer_values
from celery_cronstore.store.schema import periodic_task
from celery_cronstore.timers import parse_timer

if TYPE_CHECKING:
    from celery_cronstore.adopt.calendars import CalendarChange
    from celery_cronstore.adopt.plan import Change, Plan
    from celery_cronstore.store.db import Database

#: ``Store.update_in``: an edit inside the caller's transaction.
UpdateIn = Callable[..., Any]

__all__ = ["Adopted", "carry_out"]

_PT = periodic_task.c
_TIMER = ("timer", "kind", "tz")


@dataclass(frozen=True)
class Adopted:
    """What a plan did: the names created, updated and removed, and the calendars
    created, replaced or removed."""

    created: tuple[str, ...]
    updated: tuple[str, ...]
    removed: tuple[str, ...]
    calendars: tuple[str, ...] = ()


def carry_out(
    db: Database, update_in: UpdateIn, plan: Plan, *, source: str, actor: audit.Actor = audit.API
) -> Adopted:
    """Write ``plan``'s creates, updates and removals; return the names written.

    ``update_in`` is :meth:`Store.update_in <celery_cronstore.store.Store.update_in>`: an
    update goes through the same checks and re-planning as every other edit (and records
    itself). Creates and removals, and the calendars' writes, are recorded as ``actor``'s
    in the same transaction.
    """
    created: list[str] = []
    updated: list[str] = []
    removed: list[str] = []
    calendars = Calendars(db, actor)
    written = [c for c in plan.calendar_writes if c.action != "remove"]
    gone = [c.name for c in plan.calendar_writes if c.action == "remove"]
    with db.begin() as conn:
        now = db.now(conn)
        for calendar_change in written:
            _write_calendar(calendars, conn, calendar_change)
        for change in plan.writes:
            if change.action == "create":
                _create(conn, change, source, now)
                created.append(change.name)
            elif change.action == "update":
                _update(update_in, conn, change)
                updated.append(change.name)
            else:
                removed.append(change.name)
        if removed:
            conn.execute(
                sa.update(periodic_task)
                .where(_PT.name.in_(removed))
                .values(enabled=False, next_run=None, updated_at=now, version=_PT.version + 1)
            )
        for name in gone:
            _prune_calendar(calendars, conn, name, removed)
        audit.record_many(
            conn,
            actor,
            [*(("add", n) for n in created), *(("remove", n) for n in removed)],
            at=now,
            detail=f"from {source}",
        )
    if removed:
        removal.remove_tasks(db, (_PT.name.in_(removed),), batch=REMOVE_BATCH)
    names = tuple(c.name for c in written) + tuple(gone)
    return Adopted(tuple(created), tuple(updated), tuple(removed), names)


def _write_calendar(calendars: Calendars, conn: sa.Connection, change: CalendarChange) -> None:
    text = change.text
    assert text is not None  # a create or update always carries its calendar
    try:
        calendars.add_in(
            conn,
            text.name,
            entries=text.entries,
            holidays=text.holidays,
            description=text.description,
            replace=change.action == "update",
        )
    except CalendarExistsError:
        raise CalendarExistsError(
            f"a calendar named {text.name!r} was added meanwhile; nothing was applied: apply again"
        ) from None


def _prune_calendar(
    calendars: Calendars, conn: sa.Connection, name: str, removed: list[str]
) -> None:
    """Remove calendar ``name``, which the plan found no task names once it is carried out
    (the tasks it removes are still rows, disabled, until their removal finishes)."""
    users = set(calendars.users(conn, name)) - set(removed)
    if users:
        raise CalendarInUseError(
            f"calendar {name!r} is excluded by {', '.join(sorted(users))} since the plan was "
            "made; nothing was applied: apply again"
        )
    with contextlib.suppress(CalendarNotFoundError):  # removed meanwhile: as the file says
        calendars.remove_in(conn, name, force=True)


def _create(conn: sa.Connection, change: Change, source: str, now: Any) -> None:
    incoming = change.incoming
    assert incoming is not None  # a create always carries its checked task
    given = dict(incoming.values)
    timer = parse_timer(given["timer"], kind=given["kind"], tz=given["tz"])
    owner = given.pop("owner", None)
    enabled = bool(given.get("enabled", True))
    given["name"] = change.name
    values = check_values({k: v for k, v in given.items() if k not in _TIMER})
    # The plan checked them (the file's calendars are written first); one removed since
    # refuses the whole plan.
    check_names(conn, values.get("exclude"))
    values.update(owner_values(owner))
    values.update(timer_values(timer))
    values["source"] = source
    values.update(created_at=now, updated_at=now)
    values["next_run"] = policy.adopted_plan(
        timer,
        now,
        last_run_at=incoming.last_run_at,
        start_at=incoming.start_at,
        enabled=enabled,
    )
    if incoming.last_run_at is not None:
        values["last_fire"] = incoming.last_run_at
    if incoming.total_run_count:
        values["total_run_count"] = incoming.total_run_count
    try:
        with conn.begin_nested():
            conn.execute(sa.insert(periodic_task).values(**values))
    except IntegrityError:
        raise DuplicateTaskError(
            f"a periodic task named {change.name!r} was added meanwhile; nothing was "
            "imported: run the import again"
        ) from None


def _update(update_in: UpdateIn, conn: sa.Connection, change: Change) -> None:
    from celery_cronstore.adopt.plan import LAST_FIRE

    incoming = change.incoming
    assert incoming is not None
    changed = {k: incoming.values[k] for k in change.fields if k != LAST_FIRE}
    if LAST_FIRE in change.fields:
        _move_last_fire(conn, change.name, change.fields[LAST_FIRE][1])
    if not changed:
        return
    if set(_TIMER) & set(changed):  # a timer is checked as a whole
        changed.update({k: incoming.values[k] for k in _TIMER if k in incoming.values})
    update_in(conn, change.name, **changed)


def _move_last_fire(conn: sa.Connection, name: str, ran: datetime) -> None:
    """Record the old scheduler's newer run as the task's last fire; a ``next_run`` at or
    before it moves to the timer's next fire after it (that one was sent by the old one)."""
    row = conn.execute(
        sa.select(_PT.id, _PT.next_run, _PT.timer, _PT.timer_kind, _PT.tz).where(_PT.name == name)
    ).one()
    values: dict[str, Any] = {"last_fire": ran, "version": _PT.version + 1}
    if row.next_run is not None and row.next_run <= ran:
        timer = parse_timer(row.timer, kind=row.timer_kind, tz=row.tz)
        values["next_run"] = timer.next_after(ran)
    conn.execute(sa.update(periodic_task).where(_PT.id == row.id).values(**values))
