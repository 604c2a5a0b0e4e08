"""The registry of timer kinds: the one place that lists them.

Each kind has a name (stored in ``timer_kind``), a parser, a one-line description and an
example expression. :data:`TIMER_KINDS` is the ordered names, for choice lists in the
command lines and windows; :func:`~celery_cronstore.timers.parse_timer` and
:func:`~celery_cronstore.timers.detect_kind` read :data:`TIMERS` and :data:`DETECTION`.

Kind detection, when ``kind`` is not given (the first rule of :data:`DETECTION` that
matches wins; the last matches anything):

1. starts with ``every `` -> ``interval`` (``every 5m``, ``every 1h30m``)
2. starts with ``@`` -> ``cron`` macro (``@hourly``, ``@daily``, ...)
3. starts with a solar event -> ``solar`` (``sunrise 52.52 13.405``)
4. an ISO-8601 instant with a ``T`` between date and time -> ``once``
5. five or six whitespace-separated fields -> ``cron``
6. anything else -> ``calendar`` (systemd ``OnCalendar=`` syntax)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from celery_cronstore.timers.base import Timer
from celery_cronstore.timers.calendar import CalendarTimer
from celery_cronstore.timers.cron import CronTimer
from celery_cronstore.timers.interval import IntervalTimer
from celery_cronstore.timers.once import OnceTimer
from celery_cronstore.timers.solar import SolarTimer, is_solar

__all__ = ["DETECTION", "TIMERS", "TIMER_KINDS", "DetectRule", "Parser", "TimerKind"]


class Parser(Protocol):
    """The parser of one kind: an expression read in zone ``tz`` (UTC when ``None``)."""

    def __call__(self, expression: str, tz: str | None = None) -> Timer:
        """Return the timer; raise TimerSyntaxError naming the bad token."""
        ...


@dataclass(frozen=True)
class TimerKind:
    """One kind of timer, as the command lines and windows present it."""

    name: str
    parse: Parser
    #: What the kind's expressions say, in one line.
    summary: str
    #: An expression of the kind, which detection recognizes as it.
    example: str
    #: When an expression *detected* as this kind fails to parse: the message to raise
    #: instead (it was probably meant as another kind), or ``None`` to keep the error.
    misread: Callable[[str], str | None] | None = None
    #: Whether the zone decides when it fires. An interval's grid is elapsed time from a
    #: UTC origin (a naive ``from`` is read in the zone once, then stored in UTC), so its
    #: zone changes nothing and the windows show none for it.
    zoned: bool = True


@dataclass(frozen=True)
class DetectRule:
    """One rule of kind detection: a stripped expression it matches is of ``kind``."""

    kind: str
    matches: Callable[[str], bool]


#: One crontab field: numbers, ``*``, steps, ranges, lists, or a month/weekday name.
_CRON_FIELD = re.compile(r"^(?:[0-9*/,\-]+|[A-Za-z]{3}(?:-[A-Za-z]{3})?)$")
_ISO_INSTANT = re.compile(r"^\s*\d{4}-\d{2}-\d{2}T\d")


def _cron_of_wrong_size(expression: str) -> str | None:
    """Name the cron mistake when a failed calendar expression is a crontab line of the
    wrong size (``0 9 * *``): the calendar parser's error would mislead."""
    fields = expression.split()
    if ":" in expression or len(fields) < 3 or not all(_CRON_FIELD.match(f) for f in fields):
        return None
    return (
        "cron needs 5 or 6 fields (minute hour day-of-month month day-of-week [seconds]), "
        f"got {len(fields)}"
    )


#: The kinds by name, in the order choice lists show them.
TIMERS: Mapping[str, TimerKind] = MappingProxyType(
    {
        kind.name: kind
        for kind in (
            TimerKind(
                "calendar",
                CalendarTimer.parse,
                "systemd OnCalendar= events: weekdays, dates and wall-clock times",
                "Mon..Fri *-*-* 09:30",
                misread=_cron_of_wrong_size,
            ),
            TimerKind(
                "cron",
                CronTimer.parse,
                "a crontab line of 5 fields (6 with seconds) or an @ macro",
                "*/5 * * * *",
            ),
            TimerKind(
                "interval",
                IntervalTimer.parse,
                "a fixed period of elapsed time, optionally from an origin",
                "every 5m",
                zoned=False,
            ),
            TimerKind(
                "once",
                OnceTimer.parse,
                "one ISO-8601 instant, fired once",
                "2026-05-01T09:00:00Z",
            ),
            TimerKind(
                "solar",
                SolarTimer.parse,
                "a solar event at a place: sunrise, sunset, dawn, dusk or solar noon"
                " (the solar extra)",
                "sunrise 52.52 13.405",
                zoned=False,
            ),
        )
    }
)

#: The kind names, in the order choice lists show them.
TIMER_KINDS: tuple[str, ...] = tuple(TIMERS)

#: Kind detection, in order (see the module docstring); the last rule matches anything.
DETECTION: tuple[DetectRule, ...] = (
    DetectRule(
        "interval", lambda text: text.lower() == "every" or text.lower().startswith("every ")
    ),
    DetectRule("cron", lambda text: text.startswith("@")),
    DetectRule("solar", is_solar),
    DetectRule("once", lambda text: _ISO_INSTANT.match(text) is not None),
    DetectRule("cron", lambda text: len(text.split()) in (5, 6)),
    DetectRule("calendar", lambda text: True),
)
