"""The exclusion calendars of an export/apply file: written, read and planned (pure).

A document may carry, besides its tasks, the calendars they exclude::

    calendars:
    - name: xmas
      entries: ['2026-12-24..2026-12-26', '2026-12-31T22:00:00Z..2027-01-01T02:00:00Z']
      holidays: DE-BY                 # a country or region's public holidays, or null
      description: Christmas

* each calendar is as stored (:class:`~celery_cronstore.policy.exclusions.CalendarText`:
  entries as text, the holidays code upper case), sorted by name with sorted keys, so
  that an export stays byte-stable;
* the key is optional: a file without it leaves the store's calendars alone, and a task
  it gives must name calendars the store has. A file with it (``calendars: []`` too) says
  which calendars there are: ``apply --prune`` removes the stored ones it does not list
  that no task names once the file is applied;
* a shape that is wrong (``calendars`` not a list, a calendar not a mapping, without a
  name, or with an unknown key) refuses the whole document (:class:`DocumentError`); a
  calendar whose values are wrong (an entry that does not parse, a holidays code) is
  refused alone, naming the calendar and the bad token, and so is every task of the file
  that names it; the rest is still planned and reported.

:func:`plan_calendars` compares a file's calendars with the stored ones: **create**,
**update** (the stored one replaced), **unchanged**, **remove** (``--prune``) or
**refuse**; :func:`exclude_problem` says why a task's ``exclude`` cannot be written.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from celery_cronstore.adopt.records import (
    DocumentError,
    change_json,
    change_line,
    count_actions,
    kind_of,
)
from celery_cronstore.fields import check_text
from celery_cronstore.policy.exclusions import (
    CalendarText,
    ExclusionError,
    calendar_names,
    calendar_text,
    missing_calendars,
)

__all__ = [
    "ACTIONS",
    "KEYS",
    "CalendarChange",
    "FileCalendar",
    "counts",
    "exclude_problem",
    "export_calendars",
    "names_in",
    "plan_calendars",
    "read_calendars",
]

#: The keys of a calendar in a file.
KEYS = ("name", "entries", "holidays", "description")
#: Every action a calendar change can have, in the order a report lists their counts.
ACTIONS = ("create", "update", "unchanged", "remove", "refuse")

_PARTS = ("entries", "holidays", "description")


@dataclass(frozen=True)
class FileCalendar:
    """One calendar of a file: its canonical text, or (``text`` ``None``) why it is refused."""

    name: str
    origin: str
    text: CalendarText | None = None
    reason: str = ""


@dataclass(frozen=True)
class CalendarChange:
    """What happens to one calendar."""

    action: str
    name: str
    origin: str = ""
    #: Part -> (stored value, new value); for a create, every part (old ``None``).
    fields: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    reason: str = ""
    #: The calendar to write (create and update).
    text: CalendarText | None = None

    @property
    def writes(self) -> bool:
        """Whether carrying it out writes the store."""
        return self.action in ("create", "update", "remove")

    @property
    def label(self) -> str:
        """Return how reports name it (as the audit trail does): ``calendar:NAME``."""
        return f"calendar:{self.name}"

    def line(self) -> str:
        """Return the one line a report prints for it."""
        created = None if self.text is None else _summary(self.text)
        return change_line(self.action, self.label, self.fields, self.reason, created)

    def as_json(self) -> dict[str, Any]:
        """Return it as plain JSON data (``--json``)."""
        return change_json(self.action, self.name, self.origin, self.fields, self.reason)


def counts(changes: Iterable[CalendarChange]) -> dict[str, int]:
    """Return how many changes have each action (every action, zeros included)."""
    return count_actions((c.action for c in changes), ACTIONS)


# -- writing --------------------------------------------------------------------------------


def export_calendars(texts: Iterable[CalendarText]) -> list[dict[str, Any]]:
    """Return the ``calendars`` of a document: each calendar as stored, sorted by name."""
    return [
        {
            "name": text.name,
            "entries": list(text.entries),
            "holidays": text.holidays,
            "description": text.description,
        }
        for text in sorted(texts, key=lambda t: t.name)
    ]


# -- reading --------------------------------------------------------------------------------


def read_calendars(data: Any, origin: str) -> list[FileCalendar]:
    """Return each calendar of a document's ``calendars`` value, checked.

    Raise :class:`DocumentError` for a shape that is wrong (nothing of it can be trusted,
    and ``--prune`` would remove a calendar a missing name meant); a calendar whose values
    are wrong is a :class:`FileCalendar` without ``text``, with the reason.
    """
    if not isinstance(data, list):
        raise DocumentError(
            f"{origin}: 'calendars' must be a list of calendars, got {kind_of(data)}: give "
            "'calendars: []' for none, or leave the key out to keep the stored ones as they are"
        )
    out: list[FileCalendar] = []
    seen: set[str] = set()
    for i, entry in enumerate(data):
        where = f"{origin}: calendars[{i}]"
        if not isinstance(entry, Mapping):
            raise DocumentError(
                f"{where} must be a mapping of {', '.join(KEYS)}, got {kind_of(entry)}: see "
                "`cronstore export` for the format"
            )
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise DocumentError(
                f"{where} has no name (got {name!r}): give every calendar a 'name' (text)"
            )
        unknown = sorted(str(k) for k in entry if k not in KEYS)
        if unknown:
            raise DocumentError(
                f"{where} ({name}): unknown key(s) {', '.join(unknown)}: a calendar has only "
                f"{', '.join(KEYS)}"
            )
        if name in seen:
            out.append(FileCalendar(name, where, reason="read twice: the first one is kept"))
            continue
        seen.add(name)
        out.append(_read_one(name, entry, where))
    return out


def _read_one(name: str, entry: Mapping[str, Any], origin: str) -> FileCalendar:
    entries = entry.get("entries")
    holidays = entry.get("holidays")
    description = entry.get("description")
    try:
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            raise ExclusionError(
                f"entries must be a list of days, spans and windows, got {kind_of(entries)}"
            )
        texts = [_entry_text(e) for e in entries]
        if holidays is not None and not isinstance(holidays, str):
            raise ExclusionError(
                f"holidays must be a country code (US, US-CA, DE-BY) or null, got {holidays!r}"
            )
        if description is None:
            description = ""
        if not isinstance(description, str):
            raise ExclusionError(f"description must be text, got {kind_of(description)}")
        check_text("description", description, max_chars=2000)
        text = calendar_text(name, texts, holidays, description)
    except ValueError as exc:
        reason = str(exc)
        if repr(name) not in reason:
            reason = f"calendar {name!r}: {reason}"
        return FileCalendar(name, origin, reason=reason)
    return FileCalendar(name, origin, text)


def _entry_text(value: Any) -> str:
    if isinstance(value, date) and not isinstance(value, datetime):
        return value.isoformat()  # YAML reads an unquoted day as a date: it meant the day
    if not isinstance(value, str):
        raise ExclusionError(
            f"calendar entry {value!r} is not text: give a day (2026-12-25), a span "
            "(DAY..DAY) or a window (INSTANT..INSTANT)"
        )
    return value


# -- planning -------------------------------------------------------------------------------


def plan_calendars(
    read: Sequence[FileCalendar] | None,
    stored: Mapping[str, CalendarText],
    *,
    prune: bool = False,
    named: Collection[str] = (),
) -> tuple[CalendarChange, ...]:
    """Compare a file's calendars (``None``: it has no ``calendars`` key) with the stored
    ones; return one change per calendar read, in the order read, removals last.

    With ``prune`` and a ``calendars`` key, a stored calendar the file does not list is
    removed unless a task names it once the file is applied (``named``).
    """
    changes: list[CalendarChange] = []
    listed: set[str] = set()
    for calendar in read or ():
        listed.add(calendar.name)
        if calendar.text is None:
            changes.append(
                CalendarChange("refuse", calendar.name, calendar.origin, reason=calendar.reason)
            )
            continue
        new = calendar.text
        old = stored.get(calendar.name)
        if old is None:
            created = {k: (None, _part(new, k)) for k in _PARTS}
            changes.append(CalendarChange("create", new.name, calendar.origin, created, text=new))
        elif old == new:
            changes.append(CalendarChange("unchanged", new.name, calendar.origin))
        else:
            differ = {
                k: (_part(old, k), _part(new, k)) for k in _PARTS if _part(old, k) != _part(new, k)
            }
            changes.append(CalendarChange("update", new.name, calendar.origin, differ, text=new))
    if prune and read is not None:
        for name in stored:
            if name not in listed and name not in named:
                changes.append(
                    CalendarChange("remove", name, reason="not in the file and no task names it")
                )
    return tuple(changes)


def exclude_problem(
    exclude: str | None, refused: Collection[str], known: Collection[str] | None
) -> str | None:
    """Return why a task whose ``exclude`` is this cannot be written, or ``None``.

    ``refused`` are the file's refused calendars (a task naming one is refused with it);
    ``known`` the calendars that will exist (the file's and the stored ones), or ``None``
    not to check that they exist (a task that keeps its stored ``exclude``).
    """
    names = names_in(exclude)
    bad = [name for name in names if name in refused]
    if bad:
        return (
            f"exclude names calendar {bad[0]!r}, which is refused (see calendar:{bad[0]}): "
            "fix that calendar in the file"
        )
    missing = [name for name in names if known is not None and name not in known]
    if missing:
        return f"{missing_calendars(missing)} or add it to the file's calendars"
    return None


def names_in(exclude: str | None) -> tuple[str, ...]:
    """Return the calendar names of an ``exclude`` (a stored one beat cannot read too)."""
    try:
        return calendar_names(exclude)
    except ExclusionError:
        return tuple(part.strip() for part in (exclude or "").split(",") if part.strip())


def _part(text: CalendarText, key: str) -> Any:
    value = getattr(text, key)
    return list(value) if isinstance(value, tuple) else value


def _summary(text: CalendarText) -> str:
    parts = [f"{len(text.entries)} entr{'y' if len(text.entries) == 1 else 'ies'}"]
    if text.holidays:
        parts.append(f"holidays {text.holidays}")
    return ", ".join(parts)
