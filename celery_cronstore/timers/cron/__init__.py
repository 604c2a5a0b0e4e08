"""Cron timers: the classic five-field crontab line, evaluated on local wall-clock time.

Syntax
------
``minute hour day-of-month month day-of-week [second]``, separated by blanks:

* each field is a comma list of ``*``, ``N``, ``A-B`` (wrapping ranges such as
  ``fri-mon`` or ``22-2`` are allowed), each optionally followed by ``/STEP``
  (``*/15``, ``1-30/5``, ``5/15`` meaning ``5-59/15``); a list holding a bare ``*``
  means every value, as croniter reads it, and is written ``*`` (``*,0`` -> ``*``);
* months and weekdays may be written as English three-letter names (``jan``,
  ``mon``), in any case; day-of-week ``7`` is Sunday, like ``0``;
* an optional **sixth field holds the seconds**, as croniter reads it
  (``0 9 * * * 30`` fires at 09:00:30). Without it a timer fires at second 0;
* when both day-of-month and day-of-week are restricted, a day matching either
  one fires (POSIX cron);
* macros: ``@yearly`` / ``@annually`` (``0 0 1 1 *``), ``@monthly`` (``0 0 1 * *``),
  ``@weekly`` (``0 0 * * 0``), ``@daily`` / ``@midnight`` (``0 0 * * *``) and
  ``@hourly`` (``0 * * * *``). ``@reboot`` has no meaning for a scheduler and is
  refused.

croniter's extensions (``L``, ``W``, ``#``, ``?``, hashed ``H`` and random ``R``
values, a seventh year field) are refused: use a calendar timer (``*-*~1``) for
"last day of the month" and friends.

The canonical form (``str(timer)``) is the expression with blanks collapsed to one
space and letters in lower case; macros stay macros (``@Daily`` -> ``@daily``).

Time zones and daylight-saving time
-----------------------------------
An expression matches *wall-clock* time in the timer's zone (UTC by default). When
the clock jumps, Vixie cron's rule applies, keyed on whether the hour field covers
every hour (``*``, ``*/1`` or ``0-23``; Vixie cron also counts ``*/N`` and a ``*``
minute field, this module does not):

* **Spring gap** (wall times that never occur): a job whose hour field is
  restricted fires *once*, at the first instant after the gap, if any of its wall
  times falls in the gap (``30 2 * * *`` fires at 03:00 local on the spring-forward
  day in Europe/Berlin; ``*/15 2 * * *`` fires once, at 03:00). A job whose hour
  field covers every hour simply has no fire in the missing hour.
* **Autumn fold** (wall times that occur twice): a job whose hour field is
  restricted fires only at the first occurrence. A job whose hour field covers
  every hour fires at both occurrences, so ``*/15 * * * *`` keeps firing every 15
  real minutes.

croniter only ever iterates naive wall-clock times here; this module maps them to
instants with the rule above.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from croniter import croniter

from celery_cronstore.errors import TimerSearchError, TimerSyntaxError
from celery_cronstore.timers.base import Timer, require_aware, resolve_zone
from celery_cronstore.timers.cron.grammar import MACRO_TEXT, MACROS, field_at, normalize, syntax
from celery_cronstore.timers.cron.text import describe

__all__ = ["MACROS", "CronTimer"]

_UTC = timezone.utc
_ONE_US = timedelta(microseconds=1)
_ONE_S = timedelta(seconds=1)
# Naive on purpose: croniter walks naive wall-clock time, and _transition counts seconds.
_NAIVE_EPOCH = datetime(1970, 1, 1, tzinfo=_UTC).replace(tzinfo=None)
_PROBE_START = datetime(2000, 1, 1, tzinfo=_UTC).replace(tzinfo=None)

# Upper bound on wall-clock candidates examined by one search. Each candidate is a
# real match of the expression, so a handful suffices; the bound guards bugs only.
_SEARCH_LIMIT = 10_000


class CronTimer(Timer):
    """A crontab expression evaluated on wall-clock time in one zone (see the module doc)."""

    kind = "cron"

    def __init__(self, canonical: str, macro: str | None, zone: tzinfo, tz_name: str) -> None:
        self._canonical = canonical
        self._macro = macro
        self._zone = zone
        self.tz_name = tz_name
        self._cron_text = MACROS[macro] if macro else canonical
        # croniter keeps its position in the object, so one search at a time.
        self._lock = threading.Lock()
        self._iter: croniter[datetime] = croniter(self._cron_text, _PROBE_START, ret_type=datetime)
        expanded: list[list[Any]] = self._iter.expanded
        self._sets: tuple[frozenset[int] | None, ...] = tuple(
            None if values == ["*"] else frozenset(int(v) for v in values) for values in expanded
        )
        self._fields = self._cron_text.split()
        self._has_seconds = len(self._sets) == 6
        # Vixie's "wildcard" job, reduced to the hour field (module docstring).
        self._every_hour = self._sets[1] is None

    # -- construction --------------------------------------------------------------

    @classmethod
    def parse(cls, expression: str, tz: str | None = None) -> CronTimer:
        """Parse a crontab line (or macro) read in zone ``tz`` (UTC when ``None``).

        Raise TimerSyntaxError naming the bad field, token and position.
        """
        if not isinstance(expression, str):
            raise TimerSyntaxError(f"expression must be a string, not {type(expression).__name__}")
        if not expression.strip():
            raise TimerSyntaxError("empty cron expression", expression=expression)
        zone = resolve_zone(tz, expression=expression)
        tz_name = "UTC" if zone is _UTC else str(tz)
        canonical, macro = normalize(expression)
        try:
            timer = cls(canonical, macro, zone, tz_name)
        except Exception as exc:  # croniter's errors are ValueError, TypeError, KeyError...
            raise TimerSyntaxError(
                f"croniter rejects the expression ({exc})", expression=expression
            ) from exc
        # An expression such as "0 0 30 2 *" parses but names no real date.
        if timer._next_wall(_PROBE_START) is None:
            token, position = field_at(expression, 2)
            syntax(
                "the day-of-month and month fields never name a real date",
                expression,
                token,
                position,
            )
        return timer

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (str(self), self.tz_name))

    # -- the Timer contract ----------------------------------------------------------

    def __str__(self) -> str:
        return self._canonical

    def next_after(self, after: datetime) -> datetime | None:
        """Return the first fire time strictly after ``after`` (aware, UTC) or ``None``."""
        instant = require_aware(after)
        try:
            if self._zone is _UTC:
                wall = self._next_wall(instant.replace(tzinfo=None))
                return None if wall is None else wall.replace(tzinfo=_UTC)
            return self._next_in_zone(instant)
        except OverflowError:  # at the ends of datetime's range
            return None

    def matches(self, instant: datetime) -> bool:
        """Return whether the timer fires at ``instant`` (an aware datetime)."""
        moment = require_aware(instant)
        try:
            local = moment.astimezone(self._zone)
        except OverflowError:
            return False
        wall = local.replace(tzinfo=None, fold=0)
        if self._wall_matches(wall):
            first, second = _offsets(wall, self._zone)
            if first > second and local.fold == 1:  # second occurrence in a fold
                return self._every_hour
            return True
        if self._every_hour or moment.microsecond:
            return False
        # A gap fire: ``moment`` is the first instant after a gap that holds a match.
        before = (moment - _ONE_US).astimezone(self._zone).utcoffset()
        now = local.utcoffset()
        if before is None or now is None or now <= before:
            return False
        gap_start, gap_end = moment.replace(tzinfo=None) + before, wall
        return any(self._wall_matches(w) for w in self._grid(gap_start, gap_end))

    def describe(self) -> str:
        """Return a short English description, e.g. "at 09:30 on Monday-Friday"."""
        text = MACRO_TEXT[self._macro] if self._macro else describe(self._fields, self._sets)
        if self.tz_name != "UTC":
            text = f"{text} ({self.tz_name})"
        return text

    # -- wall-clock search -----------------------------------------------------------

    def _next_wall(self, wall: datetime) -> datetime | None:
        """Return the first matching naive wall time strictly after ``wall``."""
        # Whole seconds: croniter goes through float timestamps, which could round
        # 59.9999995 up; flooring keeps "strictly after" exact on the second grid.
        start = wall.replace(microsecond=0)
        with self._lock:
            try:
                found = self._iter.get_next(datetime, start_time=start)
            except (ValueError, OverflowError):  # CroniterBadDateError: no match in 50 years
                return None
        return found.replace(tzinfo=None)

    def _next_in_zone(self, instant: datetime) -> datetime | None:
        zone = self._zone
        local = instant.astimezone(zone)
        wall = local.replace(tzinfo=None, fold=0)
        first, second = _offsets(wall, zone)
        start = wall
        secondary: datetime | None = None
        if first > second:  # ``wall`` lies in a fold
            transition = _transition(zone, wall - first, wall - second)
            fold_start, fold_end = transition + second, transition + first
            if local.fold == 1:
                # Every first occurrence of this fold is already past.
                start = fold_end - _ONE_US
            if self._every_hour:
                # Second occurrences of fold walls come after every first occurrence.
                begin = wall if local.fold == 1 else fold_start - _ONE_US
                found = self._next_wall(begin)
                if found is not None and found < fold_end:
                    secondary = (found - second).replace(tzinfo=_UTC)
        primary = self._first_primary(start, instant)
        if primary is None or (secondary is not None and secondary < primary):
            return secondary
        return primary

    def _first_primary(self, start: datetime, instant: datetime) -> datetime | None:
        """Return the first first-occurrence (or gap) fire strictly after ``instant``."""
        naive_instant = instant.replace(tzinfo=None)
        wall = start
        for _ in range(_SEARCH_LIMIT):
            found = self._next_wall(wall)
            if found is None:
                return None
            wall = found
            first, second = _offsets(wall, self._zone)
            if first < second:  # ``wall`` lies in a gap
                transition = _transition(self._zone, wall - second, wall - first)
                if self._every_hour:
                    wall = transition + second - _ONE_US  # skip the rest of the gap
                    continue
                fire = transition
            else:
                fire = wall - first
            if fire > naive_instant:
                return fire.replace(tzinfo=_UTC)
        raise TimerSearchError(f"no fire time found for {self._canonical!r} after {instant}")

    def _wall_matches(self, wall: datetime) -> bool:
        sets = self._sets
        if wall.microsecond:
            return False
        if self._has_seconds:
            if sets[5] is not None and wall.second not in sets[5]:
                return False
        elif wall.second:
            return False
        for value, allowed in ((wall.minute, sets[0]), (wall.hour, sets[1]), (wall.month, sets[3])):
            if allowed is not None and value not in allowed:
                return False
        dom, dow = sets[2], sets[4]
        dom_ok = dom is None or wall.day in dom
        dow_ok = dow is None or wall.isoweekday() % 7 in dow
        if dom is not None and dow is not None:
            return dom_ok or dow_ok
        return dom_ok and dow_ok

    def _grid(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """Yield the wall times on this timer's grid (minutes or seconds) in [start, end)."""
        step = _ONE_S if self._has_seconds else timedelta(minutes=1)
        wall = start.replace(microsecond=0) if self._has_seconds else start.replace(second=0)
        wall = wall.replace(microsecond=0)
        if wall < start:
            wall += step
        while wall < end:
            yield wall
            wall += step


def _offsets(wall: datetime, zone: tzinfo) -> tuple[timedelta, timedelta]:
    """Return the UTC offsets of naive ``wall`` read with fold=0 and fold=1.

    Equal: an ordinary time. first > second: a fold. first < second: a gap.
    """
    first = wall.replace(tzinfo=zone, fold=0).utcoffset()
    second = wall.replace(tzinfo=zone, fold=1).utcoffset()
    if first is None or second is None:  # pragma: no cover - a zone always has an offset
        raise TimerSearchError(f"zone {zone} gives no UTC offset for {wall}")
    return first, second


def _transition(zone: tzinfo, low: datetime, high: datetime) -> datetime:
    """Return the naive UTC instant in (low, high] where the zone's offset changes.

    zoneinfo does not expose its transitions; bisecting whole seconds takes ~12 steps.
    """
    epoch = _NAIVE_EPOCH
    lo = math.floor((low - epoch).total_seconds())
    hi = math.ceil((high - epoch).total_seconds())
    target = datetime.fromtimestamp(hi, zone).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, zone).utcoffset() == target:
            hi = mid
        else:
            lo = mid
    return epoch + timedelta(seconds=hi)


def _rebuild(expression: str, tz_name: str) -> CronTimer:
    return CronTimer.parse(expression, tz=tz_name)
