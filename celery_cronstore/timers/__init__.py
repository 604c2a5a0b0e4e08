"""Timers: pure code that turns schedule expressions into fire times.

Nothing in this package reads the clock or imports SQLAlchemy or Celery.

Kinds (their names, parsers, descriptions, examples and the detection rules) are
registered in :mod:`celery_cronstore.timers.kinds`; :data:`TIMER_KINDS` is their names.
"""

from __future__ import annotations

import functools

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers.base import Timer, fires
from celery_cronstore.timers.calendar import CalendarTimer
from celery_cronstore.timers.cron import CronTimer
from celery_cronstore.timers.interval import IntervalTimer
from celery_cronstore.timers.kinds import DETECTION, TIMER_KINDS, TIMERS, TimerKind
from celery_cronstore.timers.once import OnceTimer

__all__ = [
    "KINDS",
    "TIMERS",
    "TIMER_KINDS",
    "CalendarTimer",
    "CronTimer",
    "IntervalTimer",
    "OnceTimer",
    "Timer",
    "TimerKind",
    "detect_kind",
    "fires",
    "is_valid",
    "parse_timer",
]

#: The kind names; an alias of :data:`TIMER_KINDS` kept for code written before it.
KINDS = TIMER_KINDS


def detect_kind(expression: str) -> str:
    """Return the timer kind an expression is written in (the rules of ``DETECTION``)."""
    text = expression.strip()
    return next(rule.kind for rule in DETECTION if rule.matches(text))


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
    registered = TIMERS.get(kind)
    if registered is None:
        raise TimerSyntaxError(
            f"unknown timer kind (expected one of {', '.join(TIMER_KINDS)})", token=kind
        )
    try:
        return registered.parse(expression, tz=tz)
    except TimerSyntaxError:
        hint = registered.misread(expression) if detected and registered.misread else None
        if hint is not None:
            raise TimerSyntaxError(hint, expression=expression) from None
        raise


def is_valid(expression: str, *, kind: str | None = None, tz: str | None = None) -> bool:
    """Return whether ``expression`` parses as a timer, without raising."""
    try:
        parse_timer(expression, kind=kind, tz=tz)
    except TimerSyntaxError:
        return False
    return True
