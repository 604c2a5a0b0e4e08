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
from celery_cronstore.timers.solar import SolarTimer

__all__ = [
    "KINDS",
    "TIMERS",
    "TIMER_KINDS",
    "CalendarTimer",
    "CronTimer",
    "IntervalTimer",
    "OnceTimer",
    "SolarTimer",
    "Timer",
    "TimerKind",
    "detect_kind",
    "edit_kind",
    "fires",
    "is_valid",
    "parse_timer",
    "shown_zone",
]

#: The kind names; an alias of :data:`TIMER_KINDS` kept for code written before it.
KINDS = TIMER_KINDS


def detect_kind(expression: str) -> str:
    """Return the timer kind an expression is written in (the rules of ``DETECTION``)."""
    text = expression.strip()
    return next(rule.kind for rule in DETECTION if rule.matches(text))


def edit_kind(
    given: str | None, *, stored: str, timer_changed: bool, shown: str | None = None
) -> str | None:
    """Return the kind an edited timer is parsed as (``None``: detect it from the expression).

    The one rule of every window. ``given`` is the kind the edit names (``None`` or blank:
    none); ``shown`` the kind a form displayed and posts back untouched (its stored kind;
    ``None`` for the command line and the API, where a kind is only ever given on
    purpose). A kind other than ``shown`` was chosen: it is honoured, and an expression of
    another kind is refused naming both (:func:`parse_timer`). Otherwise a changed
    expression is detected afresh, as when adding (``*/5 * * * *`` -> ``every 5m`` is an
    interval now), and an unchanged one keeps ``stored`` (an edit of the zone alone).
    """
    if given and given != shown:
        return given
    return None if timer_changed else stored


def shown_zone(kind: str, tz: str) -> str | None:
    """Return the zone to show beside a timer of ``kind``, or ``None`` when it has no
    effect on the fire times (an interval: see :attr:`TimerKind.zoned`)."""
    registered = TIMERS.get(kind)
    return tz if registered is None or registered.zoned else None


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
    except TimerSyntaxError as exc:
        hint = registered.misread(expression) if detected and registered.misread else None
        if hint is not None:
            raise TimerSyntaxError(hint, expression=expression) from None
        reads_as = None if detected else detect_kind(expression)
        if reads_as is not None and reads_as != kind:
            # The kind was named and the expression is of another one: say both, or the
            # grammar's complaint ("a cron expression has 5 fields") reads like a typo.
            raise TimerSyntaxError(
                f"the timer kind is {kind} but the expression reads as {reads_as} (choose "
                f"{reads_as}, or leave the kind blank to detect it); as {kind}: {exc.reason}",
                expression=exc.expression,
                token=exc.token,
                position=exc.position,
            ) from None
        raise


def is_valid(expression: str, *, kind: str | None = None, tz: str | None = None) -> bool:
    """Return whether ``expression`` parses as a timer, without raising."""
    try:
        parse_timer(expression, kind=kind, tz=tz)
    except TimerSyntaxError:
        return False
    return True
