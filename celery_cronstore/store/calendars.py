"""The SQL of exclusion calendars (the rules: :mod:`celery_cronstore.policy.exclusions`).

:class:`Calendars` is the store's part that owns the ``cronstore_calendar`` table: add
or replace, read, list and remove calendars (each write in the audit trail, under the
name ``calendar:NAME``; the ``*_in`` forms write inside the caller's transaction, as
``apply`` writes a file's calendars with its tasks), check that the calendars a task
names exist, and load them all for beat's planning (:meth:`Calendars.load`, once per
claim batch that needs them).
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from celery_cronstore.errors import CronstoreError
from celery_cronstore.fields import FieldValueError, check_text
from celery_cronstore.policy.exclusions import (
    Calendar,
    CalendarText,
    calendar_names,
    missing_calendars,
    parse_calendar,
)
from celery_cronstore.store import audit
from celery_cronstore.store.db import Database
from celery_cronstore.store.schema import calendar, periodic_task

__all__ = [
    "CalendarExistsError",
    "CalendarInUseError",
    "CalendarNotFoundError",
    "Calendars",
    "check_names",
    "entries_of",
]

_C = calendar.c
_PT = periodic_task.c


class CalendarNotFoundError(CronstoreError, LookupError):
    """No exclusion calendar has that name."""


class CalendarExistsError(CronstoreError):
    """A calendar of that name exists and ``replace`` was not given."""

    #: The form field the refusal is about (as :class:`ExclusionError`'s ``field``).
    field = "name"


class CalendarInUseError(CronstoreError, ValueError):
    """A calendar some tasks still exclude cannot be removed (without ``force``)."""


class Calendars:
    """The store's exclusion calendars, written as ``actor``."""

    def __init__(self, db: Database, actor: audit.Actor) -> None:
        self.db = db
        self.actor = actor

    def add(
        self,
        name: str,
        *,
        entries: list[str] | tuple[str, ...] = (),
        holidays: str | None = None,
        description: str = "",
        replace: bool = False,
    ) -> Calendar:
        """Add calendar ``name`` (or, with ``replace``, replace it); return it parsed.
        Raise ``ValueError`` naming the bad entry, and :class:`CronstoreError` if the name
        is taken and ``replace`` is not given."""
        with self.db.begin() as conn:
            return self.add_in(
                conn,
                name,
                entries=entries,
                holidays=holidays,
                description=description,
                replace=replace,
            )

    def add_in(
        self,
        conn: sa.Connection,
        name: str,
        *,
        entries: list[str] | tuple[str, ...] = (),
        holidays: str | None = None,
        description: str = "",
        replace: bool = False,
    ) -> Calendar:
        """:meth:`add` inside the caller's transaction ``conn`` (recorded there too)."""
        check_text("description", description, max_chars=2000)
        parsed = parse_calendar(name, entries, holidays, description)
        row = {
            "entries": json.dumps([str(e).strip() for e in entries]),
            "holidays": parsed.holidays,
            "description": description,
        }
        now = self.db.now(conn)
        exists = conn.execute(sa.select(_C.id).where(_C.name == name)).first() is not None
        if exists and not replace:
            raise CalendarExistsError(
                f"a calendar named {name!r} already exists: give --replace to replace it"
            )
        if exists:
            conn.execute(sa.update(calendar).where(_C.name == name).values(**row, updated_at=now))
        else:
            conn.execute(sa.insert(calendar).values(name=name, **row, updated_at=now))
        detail = f"{len(parsed.days) + len(parsed.windows)} entries" + (
            f", holidays {parsed.holidays}" if parsed.holidays else ""
        )
        action = "calendar-replace" if exists else "calendar-add"
        audit.record(conn, self.actor, action, f"calendar:{name}", at=now, detail=detail)
        return parsed

    def get(self, name: str) -> Calendar:
        """Return calendar ``name`` (:class:`CalendarNotFoundError` if there is none)."""
        with self.db.engine.connect() as conn:
            row = conn.execute(sa.select(calendar).where(_C.name == name)).first()
        if row is None:
            raise CalendarNotFoundError(f"no calendar named {name!r}")
        return _parsed(row)

    def all(self) -> dict[str, Calendar]:
        """Return every calendar, by name."""
        with self.db.engine.connect() as conn:
            return self.load(conn)

    def texts(self) -> dict[str, CalendarText]:
        """Return every calendar as stored (its canonical text), by name in name order;
        a calendar that no longer parses too (``export`` writes what is stored)."""
        with self.db.engine.connect() as conn:
            rows = conn.execute(sa.select(calendar).order_by(_C.name)).all()
        return {
            row.name: CalendarText(
                row.name, tuple(entries_of(row)), row.holidays, row.description or ""
            )
            for row in rows
        }

    def remove(self, name: str, *, force: bool = False) -> list[str]:
        """Remove calendar ``name``; return the tasks that excluded it. Without ``force``
        a calendar that tasks exclude is refused (:class:`CalendarInUseError` names them):
        beat would put those tasks in error."""
        with self.db.begin() as conn:
            return self.remove_in(conn, name, force=force)

    def remove_in(self, conn: sa.Connection, name: str, *, force: bool = False) -> list[str]:
        """:meth:`remove` inside the caller's transaction ``conn`` (recorded there too)."""
        if conn.execute(sa.select(_C.id).where(_C.name == name)).first() is None:
            raise CalendarNotFoundError(f"no calendar named {name!r}")
        users = self.users(conn, name)
        if users and not force:
            shown = ", ".join(users[:10]) + (" ..." if len(users) > 10 else "")
            raise CalendarInUseError(
                f"calendar {name!r} is excluded by {len(users)} task(s) ({shown}): remove "
                "it from their exclude first, or give --force (beat then puts them in error)"
            )
        conn.execute(sa.delete(calendar).where(_C.name == name))
        now = self.db.now(conn)
        audit.record(conn, self.actor, "calendar-remove", f"calendar:{name}", at=now)
        return users

    def users(self, conn: sa.Connection, name: str) -> list[str]:
        """Return the names of the tasks whose ``exclude`` names calendar ``name``."""
        rows = conn.execute(
            sa.select(_PT.name, _PT.exclude).where(_PT.exclude.contains(name)).order_by(_PT.name)
        )
        return [r.name for r in rows if name in calendar_names(r.exclude)]

    def check_names(self, conn: sa.Connection, exclude: str | None) -> None:
        """Refuse (``FieldValueError`` on ``exclude``) calendar names that do not exist."""
        check_names(conn, exclude)

    def load(self, conn: sa.Connection) -> dict[str, Calendar]:
        """Return every calendar by name (a calendar that no longer parses is left out:
        the tasks that exclude it go in error, naming it)."""
        out: dict[str, Calendar] = {}
        for row in conn.execute(sa.select(calendar).order_by(_C.name)):
            try:
                out[row.name] = _parsed(row)
            except ValueError:
                continue
        return out


def entries_of(row: Any) -> list[str]:
    """Return the entries a calendar row holds."""
    loaded = json.loads(row.entries or "[]")
    return [str(e) for e in loaded] if isinstance(loaded, list) else []


def _parsed(row: Any) -> Calendar:
    return parse_calendar(row.name, entries_of(row), row.holidays, row.description or "")


def check_names(conn: sa.Connection, exclude: str | None) -> None:
    """Refuse (``FieldValueError`` on ``exclude``) calendar names that do not exist."""
    names = calendar_names(exclude)
    if not names:
        return
    found = set(conn.execute(sa.select(_C.name).where(_C.name.in_(names))).scalars())
    missing = [n for n in names if n not in found]
    if missing:
        raise FieldValueError("exclude", missing_calendars(missing))
