"""Timers: pure code that turns schedule expressions into fire times.

Nothing in this package reads the clock or imports SQLAlchemy or Celery.

Kind detection, when ``kind`` is not given (first rule that matches wins):

1. starts with ``every `` -> ``interval`` (``every 5m``, ``every 1h30m``)
2. starts with ``@`` -> ``cron`` macro (``@hourly``, ``@daily``, ...)
3. an ISO-8601 instant with a ``T`` between date and time -> ``once``
4. five or six whitespace-separated fields -> ``cron``
5. anything else -> ``calendar`` (systemd ``OnCalendar=`` syntax)
"""

from __future__ import annotations

import functools
import re

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers.base import KINDS, Timer, fires
from celery_cronstore.timers.calendar import CalendarTimer
from celery_cronstore.timers.cron import CronTimer
from celery_cronstore.timers.interval import IntervalTimer
from celery_cronstore.timers.once import OnceTimer

__all__ = [
    "KINDS",
    "CalendarTimer",
    "CronTimer",
    "IntervalTimer",
    "OnceTimer",
    "Timer",
    "detect_kind",
    "fires",
    "is_valid",
    "parse_timer",
]

_ISO_INSTANT = re.compile(r"^\s*\d{4}-\d{2}-\d{2}T\d")
_PARSERS: dict[str, type[CalendarTimer] | type[CronTimer] | type[IntervalTimer] | type[OnceTimer]]
_PARSERS = {
    "calendar": CalendarTimer,
    "cron": CronTimer,
    "interval": IntervalTimer,
    "once": OnceTimer,
}


def detect_kind(expression: str) -> str:
    """Return the timer kind an expression is written in (see the module docstring)."""
    text = expression.strip()
    if text.lower().startswith("every ") or text.lower() == "every":
        return "interval"
    if text.startswith("@"):
        return "cron"
    if _ISO_INSTANT.match(text):
        return "once"
    if len(text.split()) in (5, 6):
        return "cron"
    return "calendar"


def parse_timer(expression: str, *, kind: str | None = None, tz: str | None = None) -> Timer:
    """Parse ``expression`` into a timer of ``kind`` (detected when ``None``) in zone ``tz``.

    Raise :class:`~celery_cronstore.errors.TimerSyntaxError` (a ``ValueError``) naming
    the offending token and its position when the expression is invalid. Timers are
    immutable: the same arguments return the same (cached) timer.
    """
    if not isinstance(expression, str):
        raise TimerSyntaxError(f"expression must be a string, not {type(expression).__name__}")
    if not isinstance(kind, (str, type(None))) or not isinstance(tz, (str, type(None))):
        raise TimerSyntaxError("timer kind and zone must be strings", expression=expression)
    return _parse_cached(expression, kind, tz)


#: Distinct (expression, kind, zone) triples kept parsed; as large as beat's timer memo
#: (``policy.timing.TIMER_CACHE``), whose entries wrap these, so one never evicts the other's.
_PARSE_CACHE = 16_384


@functools.lru_cache(maxsize=_PARSE_CACHE)
def _parse_cached(expression: str, kind: str | None, tz: str | None) -> Timer:
    if not expression.strip():
        raise TimerSyntaxError("empty timer expression", expression=expression)
    detected = kind is None
    if kind is None:
        kind = detect_kind(expression)
    parser = _PARSERS.get(kind)
    if parser is None:
        raise TimerSyntaxError(
            f"unknown timer kind (expected one of {', '.join(KINDS)})", token=kind
        )
    try:
        return parser.parse(expression, tz=tz)
    except TimerSyntaxError:
        if detected and kind == "calendar" and _looks_like_cron(expression):
            fields = len(expression.split())
            raise TimerSyntaxError(
                "cron needs 5 or 6 fields (minute hour day-of-month month day-of-week "
                f"[seconds]), got {fields}",
                expression=expression,
            ) from None
        raise


#: One crontab field: numbers, ``*``, steps, ranges, lists, or a month/weekday name.
_CRON_FIELD = re.compile(r"^(?:[0-9*/,\-]+|[A-Za-z]{3}(?:-[A-Za-z]{3})?)$")


def _looks_like_cron(expression: str) -> bool:
    """Whether a failed calendar expression was meant as a crontab line of the wrong size."""
    fields = expression.split()
    return ":" not in expression and len(fields) >= 3 and all(_CRON_FIELD.match(f) for f in fields)


def is_valid(expression: str, *, kind: str | None = None, tz: str | None = None) -> bool:
    """Return whether ``expression`` parses as a timer, without raising."""
    try:
        parse_timer(expression, kind=kind, tz=tz)
    except TimerSyntaxError:
        return False
    return True
