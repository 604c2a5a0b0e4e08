"""Interval timers: fire every fixed period of elapsed time.

Syntax: ``every <duration> [from <instant>]``, case-insensitive.

* ``<duration>`` is one or more ``<whole number><unit>`` parts, largest or smallest
  first, blanks optional: ``every 30s``, ``every 5m``, ``every 1h30m``,
  ``every 1h 30m``, ``every 2d``. Units are ``w d h m s``, or the English words
  ``week(s) day(s) hour(s) minute(s) second(s)`` (``every 5 minutes``,
  ``every 1 hour 30 minutes``). Each unit may appear once. The total must be
  positive and at most 366 days.
* ``<instant>`` is an ISO-8601 instant or date (``2026-01-05``, ``2026-01-05T09:00``,
  ``2026-01-05T09:00:00+01:00``); a naive one is read in the timer's zone.

The fire times are the fixed grid ``origin + k * period`` for k = 0, 1, 2, ... The
period is *elapsed* time, not wall-clock time: ``every 1d`` keeps firing 24 real
hours apart across a DST change, so its local time of day moves by an hour. The
origin defaults to the Unix epoch (1970-01-01T00:00:00Z), so grids never drift and
``every 5m`` fires at :00, :05, ... of every hour. Before the origin the first fire is
the origin itself.

The canonical form writes the period with the largest units first
(``every 90m`` -> ``every 1h30m``, ``every 14d`` -> ``every 2w``), followed by
`` from <UTC instant>`` only when the origin is not the epoch.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers.base import Timer, require_aware, resolve_zone
from celery_cronstore.timers.once import format_instant, format_local, parse_instant

__all__ = ["IntervalTimer"]

_UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)
MAX_PERIOD = timedelta(days=366)

# (letter, seconds, singular word)
_UNITS = (
    ("w", 7 * 86400, "week"),
    ("d", 86400, "day"),
    ("h", 3600, "hour"),
    ("m", 60, "minute"),
    ("s", 1, "second"),
)
_UNIT_BY_NAME = {}
for _letter, _seconds, _word in _UNITS:
    for _name in (_letter, _word, _word + "s"):
        _UNIT_BY_NAME[_name] = (_letter, _seconds)

_HEAD = re.compile(r"\s*every(?=\s|$)", re.IGNORECASE)
_PART = re.compile(r"\s*(?P<number>\d[\d.,]*)\s*(?P<unit>[a-z]*)", re.IGNORECASE | re.ASCII)


def _split_from(rest: str) -> tuple[str, str, int] | None:
    """Return (duration text, instant, offset of the instant) when ``rest`` ends with
    ``<blank>from<blank><instant>``, else ``None``.

    A scan from the end, not a regex search: a search for blanks, ``from``, blanks retries at
    every blank of a long run and took quadratic time on ``every`` + 16,000 blanks.
    """
    end = len(rest.rstrip())
    start = end
    while start > 0 and not rest[start - 1].isspace():
        start -= 1
    if start == end:
        return None
    before = rest[:start].rstrip()
    if len(before) < 5 or before[-4:].lower() != "from" or not before[-5].isspace():
        return None
    return before[:-4], rest[start:end], start


def _parse_duration(text: str, expression: str, start: int) -> timedelta:
    total = 0
    seen: set[str] = set()
    at = 0
    while at < len(text):
        if not text[at:].strip():
            break
        match = _PART.match(text, at)
        if match is None:
            token = text[at:].split()[0]
            position = start + text.index(token, at)
            raise TimerSyntaxError(
                "expected a duration part like 5m or 1h",
                expression=expression,
                token=token,
                position=position,
            )
        number, unit = match["number"], match["unit"]
        position = start + match.start("number")
        if not (number.isdigit() and number.isascii()):
            raise TimerSyntaxError(
                "a duration takes whole numbers (1h30m, not 1.5h)",
                expression=expression,
                token=number,
                position=position,
            )
        if unit.lower() not in _UNIT_BY_NAME:
            raise TimerSyntaxError(
                "unknown duration unit (use w, d, h, m, s or week, day, hour, minute, second)",
                expression=expression,
                token=unit or number,
                position=start + match.start("unit") if unit else position,
            )
        letter, seconds = _UNIT_BY_NAME[unit.lower()]
        if letter in seen:
            raise TimerSyntaxError(
                "a duration unit appears twice",
                expression=expression,
                token=unit,
                position=start + match.start("unit"),
            )
        seen.add(letter)
        # Bound the digits before int() (it raises a plain ValueError past 4,300 of them):
        # the total is checked against 366 days anyway.
        significant = number.lstrip("0") or "0"
        if len(significant) > 12:
            raise TimerSyntaxError(
                f"interval is longer than the maximum of {MAX_PERIOD.days} days",
                expression=expression,
                token=number,
                position=position,
            )
        total += int(significant) * seconds
        at = match.end()
    if not seen:
        raise TimerSyntaxError(
            "an interval needs a duration, e.g. 'every 5m'",
            expression=expression,
            position=start,
        )
    if total <= 0:
        raise TimerSyntaxError(
            "an interval must be longer than zero",
            expression=expression,
            token=text.strip(),
            position=start + len(text) - len(text.lstrip()),
        )
    if total > MAX_PERIOD.total_seconds():
        raise TimerSyntaxError(
            f"interval is longer than the maximum of {MAX_PERIOD.days} days",
            expression=expression,
            token=text.strip(),
            position=start + len(text) - len(text.lstrip()),
        )
    return timedelta(seconds=total)


def _split_period(period: timedelta) -> list[tuple[int, str, str]]:
    """Return [(count, letter, word)] for ``period``, largest units first."""
    remaining = int(period.total_seconds())
    parts = []
    for letter, seconds, word in _UNITS:
        count, remaining = divmod(remaining, seconds)
        if count:
            parts.append((count, letter, word))
    return parts


class IntervalTimer(Timer):
    """A timer firing at ``origin + k * period`` (elapsed time; see the module doc)."""

    kind = "interval"

    def __init__(self, period: timedelta, origin: datetime, zone: tzinfo, tz_name: str) -> None:
        self._period = period
        self._origin = origin
        self._zone = zone
        self.tz_name = tz_name

    @classmethod
    def parse(cls, expression: str, tz: str | None = None) -> IntervalTimer:
        """Parse ``every <duration> [from <instant>]`` in zone ``tz`` (UTC when None)."""
        if not isinstance(expression, str):
            raise TimerSyntaxError(f"expression must be a string, not {type(expression).__name__}")
        if not expression.strip():
            raise TimerSyntaxError("empty interval expression", expression=expression)
        zone = resolve_zone(tz, expression=expression)
        tz_name = "UTC" if zone is _UTC else str(tz)
        head = _HEAD.match(expression)
        if head is None:
            token = expression.split()[0]
            raise TimerSyntaxError(
                "an interval starts with 'every'",
                expression=expression,
                token=token,
                position=expression.index(token),
            )
        rest_start = head.end()
        rest = expression[rest_start:]
        origin = EPOCH
        tail = _split_from(rest)
        if tail is not None:
            rest, instant, instant_at = tail
            origin = parse_instant(
                instant,
                zone,
                expression=expression,
                position=rest_start + instant_at,
                date_only=True,
            )
        period = _parse_duration(rest, expression, rest_start)
        return cls(period, origin, zone, tz_name)

    @property
    def period(self) -> timedelta:
        """The time between two fires."""
        return self._period

    @property
    def origin(self) -> datetime:
        """The first fire time of the grid (aware, UTC); the Unix epoch by default."""
        return self._origin

    def next_after(self, after: datetime) -> datetime | None:
        """Return the first ``origin + k * period`` (k >= 0) strictly after ``after``."""
        instant = require_aware(after)
        if instant < self._origin:
            return self._origin
        steps = (instant - self._origin) // self._period + 1
        try:
            return self._origin + steps * self._period
        except OverflowError:  # past datetime.max: no representable future fire
            return None

    def last_at_or_before(self, instant: datetime) -> datetime | None:
        """Return the newest ``origin + k * period`` at or before ``instant`` (arithmetic)."""
        moment = require_aware(instant)
        if moment < self._origin:
            return None
        return self._origin + ((moment - self._origin) // self._period) * self._period

    def count_between(self, after: datetime, until: datetime, *, limit: int) -> int | None:
        """Return how many grid points lie in ``(after, until]``, exactly (``limit`` unused)."""
        start, end = require_aware(after), require_aware(until)
        if end <= start or end < self._origin:
            return 0
        first = self.next_after(start)
        if first is None or first > end:
            return 0
        return int((end - first) // self._period) + 1

    def matches(self, instant: datetime) -> bool:
        """Return whether ``instant`` lies on the grid, at or after the origin."""
        moment = require_aware(instant)
        return moment >= self._origin and (moment - self._origin) % self._period == timedelta(0)

    def __str__(self) -> str:
        text = "every " + "".join(f"{n}{letter}" for n, letter, _ in _split_period(self._period))
        if self._origin != EPOCH:
            text += f" from {format_instant(self._origin)}"
        return text

    def describe(self) -> str:
        """Return e.g. "every 5 minutes", "every 1 hour 30 minutes", "every hour"."""
        parts = _split_period(self._period)
        if len(parts) == 1 and parts[0][0] == 1:
            text = f"every {parts[0][2]}"
        else:
            words = [f"{n} {word}{'s' if n != 1 else ''}" for n, _, word in parts]
            text = "every " + " ".join(words)
        if self._origin != EPOCH:
            text += f" from {format_local(self._origin, self._zone, self.tz_name)}"
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (str(self), self.tz_name))


def _rebuild(expression: str, tz_name: str) -> IntervalTimer:
    return IntervalTimer.parse(expression, tz=tz_name)
