"""Exclusion calendars: named sets of days and time windows a task's fires skip.

Pure: no clock, no SQL. A calendar holds entries, each one of

- a day, ``2026-12-25``, or a span of days, ``2026-12-24..2026-12-26`` (both included),
  read in the *task's* zone: "Christmas" for a Berlin task is Berlin's 25 December;
- a window between two instants, ``2026-12-07T22:00:00Z..2026-12-08T02:00:00Z`` (start
  included, end excluded; each with its offset): a maintenance window is the same
  instants for every task;

and optionally the public holidays of a country or region (``US``, ``US-CA``, ``DE-BY``)
from the maintained ``holidays`` library (the ``holidays`` extra), never a table of ours.

A task names the calendars it skips (``exclude = "holidays,maintenance"``). Beat records
each excluded fire ``skipped`` with the reason "excluded by calendar NAME (...)"; it is
not sent and does not count towards ``max_runs``. The day of a fire is its *nominal*
fire time's date in the task's zone.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from celery_cronstore.errors import CronstoreError

__all__ = [
    "MAX_ENTRIES",
    "Calendar",
    "CalendarText",
    "ExclusionError",
    "calendar_names",
    "calendar_text",
    "excluded_by",
    "missing_calendars",
    "parse_calendar",
]

#: A calendar's or task's calendar name: letters, digits, ``_``, ``-``, ``.``.
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_HOLIDAYS = re.compile(r"([A-Z]{2,3})(?:-([A-Z0-9]{1,10}))?")
#: The most entries one calendar holds (each is checked for every fire of its tasks).
MAX_ENTRIES = 1000


class ExclusionError(CronstoreError, ValueError):
    """A calendar or a task's ``exclude`` that cannot be used, with the reason; ``field``
    names the part that is wrong (``name``, ``entries``, ``holidays``, ``exclude``), so
    that every window shows the message next to it."""

    def __init__(self, message: str, field: str = "entries") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Calendar:
    """One exclusion calendar, parsed."""

    name: str
    days: tuple[tuple[date, date], ...] = ()
    windows: tuple[tuple[datetime, datetime], ...] = ()
    holidays: str | None = None
    description: str = ""

    def why(self, when: datetime, zone: str) -> str | None:
        """Say why fire ``when`` of a task in ``zone`` is excluded (``None``: it is not)."""
        for start, end in self.windows:
            if start <= when < end:
                return f"in the window {start.isoformat()}..{end.isoformat()}"
        day = when.astimezone(ZoneInfo(zone)).date()
        for first, last in self.days:
            if first <= day <= last:
                return f"{day.isoformat()} is excluded"
        if self.holidays is not None:
            name = _holiday(self.holidays, day)
            if name is not None:
                return f"{day.isoformat()} is {name} ({self.holidays})"
        return None


@dataclass(frozen=True)
class CalendarText:
    """A calendar as the store keeps it and files carry it: its entries as text (each
    stripped), its holidays code (upper case; ``None`` for none) and its description.
    Two calendars are the same exactly when their texts are equal."""

    name: str
    entries: tuple[str, ...] = ()
    holidays: str | None = None
    description: str = ""


def calendar_text(
    name: str, entries: Iterable[str], holidays: str | None = None, description: str = ""
) -> CalendarText:
    """Return the canonical text of a calendar (what the store keeps of these parts);
    raise :class:`ExclusionError` as :func:`parse_calendar` does."""
    items = [str(entry).strip() for entry in entries]
    parsed = parse_calendar(name, items, holidays, description)
    return CalendarText(name, tuple(items), parsed.holidays, description)


def missing_calendars(missing: Iterable[str]) -> str:
    """Return the refusal of a task's ``exclude`` naming calendars that do not exist."""
    names = list(missing)
    return (
        f"exclude names no calendar {', '.join(repr(m) for m in names)}: create it "
        f"first (cronstore calendar add {names[0]} ...)"
    )


def calendar_names(text: str | None) -> tuple[str, ...]:
    """Return the calendar names of a task's ``exclude`` text (comma-separated); raise
    :class:`ExclusionError` naming a bad one."""
    if text is None or not text.strip():
        return ()
    names = tuple(part.strip() for part in text.split(","))
    for name in names:
        if not _NAME.fullmatch(name):
            raise ExclusionError(
                f"exclude: {name!r} is not a calendar name (letters, digits, '_', '-', '.'; "
                "names separated by commas)",
                field="exclude",
            )
    return tuple(dict.fromkeys(names))


def parse_calendar(
    name: str, entries: Iterable[str], holidays: str | None = None, description: str = ""
) -> Calendar:
    """Return the calendar of these parts; raise :class:`ExclusionError` naming the bad
    token and the fix."""
    if not _NAME.fullmatch(name):
        raise ExclusionError(
            f"calendar name {name!r} must be 1 to 100 letters, digits, '_', '-' or '.'",
            field="name",
        )
    days: list[tuple[date, date]] = []
    windows: list[tuple[datetime, datetime]] = []
    items = list(entries)
    if len(items) > MAX_ENTRIES:
        raise ExclusionError(f"calendar {name!r} has {len(items)} entries, more than {MAX_ENTRIES}")
    for entry in items:
        span = _entry(str(entry).strip())
        if isinstance(span[0], datetime):
            windows.append(span)
        else:
            days.append(span)
    code = None if holidays is None or not holidays.strip() else holidays.strip().upper()
    if code is not None:
        _check_holidays(code)
    if not days and not windows and code is None:
        raise ExclusionError(
            f"calendar {name!r} is empty: give days, spans, windows or --holidays COUNTRY"
        )
    return Calendar(name, tuple(days), tuple(windows), code, description)


def excluded_by(
    names: tuple[str, ...], calendars: Mapping[str, Calendar], when: datetime, zone: str
) -> str | None:
    """Return the reason fire ``when`` is excluded by the first of calendars ``names``
    that excludes it, or ``None``; raise :class:`ExclusionError` for a missing calendar."""
    for name in names:
        calendar = calendars.get(name)
        if calendar is None:
            raise ExclusionError(
                f"exclusion calendar {name!r} does not exist: create it "
                f"(cronstore calendar add {name} ...) or remove it from the task's exclude",
                field="exclude",
            )
        why = calendar.why(when, zone)
        if why is not None:
            return f"excluded by calendar {name!r} ({why})"
    return None


def _entry(text: str) -> tuple[Any, Any]:
    first, sep, last = text.partition("..")
    if "T" in first or "T" in last:
        if not sep:
            raise ExclusionError(
                f"calendar entry {text!r}: a window needs two instants, START..END "
                "(e.g. 2026-12-07T22:00:00Z..2026-12-08T02:00:00Z)"
            )
        start, end = _instant(first, text), _instant(last, text)
        if end <= start:
            raise ExclusionError(f"calendar entry {text!r}: the window ends before it starts")
        return start, end
    day_one = _day(first, text)
    day_last = _day(last, text) if sep else day_one
    if day_last < day_one:
        raise ExclusionError(f"calendar entry {text!r}: the span ends before it starts")
    return day_one, day_last


def _day(token: str, text: str) -> date:
    try:
        return date.fromisoformat(token.strip())
    except ValueError:
        raise ExclusionError(
            f"calendar entry {text!r}: {token.strip()!r} is not a day (YYYY-MM-DD), a span "
            "(DAY..DAY) or a window (INSTANT..INSTANT)"
        ) from None


def _instant(token: str, text: str) -> datetime:
    raw = token.strip()
    try:
        value = datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw)
    except ValueError:
        raise ExclusionError(
            f"calendar entry {text!r}: {raw!r} is not an ISO-8601 instant"
        ) from None
    if value.utcoffset() is None:
        raise ExclusionError(
            f"calendar entry {text!r}: {raw!r} has no offset: add one (e.g. Z for UTC)"
        )
    return value


def _check_holidays(code: str) -> None:
    match = _HOLIDAYS.fullmatch(code)
    if match is None:
        raise ExclusionError(
            f"holidays {code!r}: give a country code, optionally with a region (US, US-CA, DE-BY)",
            field="holidays",
        )
    try:
        _table(code, 2000)
    except ImportError:
        raise ExclusionError(
            "public holidays need the holidays library: pip install 'celery-cronstore[holidays]'",
            field="holidays",
        ) from None
    except NotImplementedError as exc:
        raise ExclusionError(f"holidays {code!r}: {exc}", field="holidays") from None


def _holiday(code: str, day: date) -> str | None:
    name = _table(code, day.year).get(day)
    return None if name is None else str(name)


@functools.lru_cache(maxsize=256)
def _table(code: str, year: int) -> Mapping[date, str]:
    """The public holidays of ``code`` (country, or country-region) in ``year``."""
    import holidays  # the holidays extra

    country, _, region = code.partition("-")
    return dict(holidays.country_holidays(country, subdiv=region or None, years=year))
