"""The true next fire of a calendar event: a plain forward search over real instants.

:mod:`.search` reproduces systemd's walk, quirks included, because a timer must fire
when systemd says it fires. Where systemd has no answer (its walk loops until it gives
up with "Infinite loop in calendar calculation", or steps back before the start) this
module answers instead, with the meaning systemd.time(7) gives a calendar event:

* the event matches local wall-clock readings in the timer's zone;
* a wall-clock time inside a DST gap never happens, so it does not fire;
* a wall-clock time inside a DST fold fires once, at its first occurrence.

The search walks the zone's offset segments forward from the start. Inside one segment
the wall clock is UTC plus a constant, so the first matching wall time at or after the
segment's lowest uncovered wall time (:func:`next_wall`, field by field like cron) is
the answer if it falls before the segment ends. Wall times a fold repeats are skipped
by remembering the highest wall time already passed. Every loop is bounded and raises
:class:`~celery_cronstore.errors.TimerSearchError` when it is exceeded.
"""

from __future__ import annotations

from datetime import date

from celery_cronstore.errors import TimerSearchError
from celery_cronstore.timers.calendar.clock import EPOCH_ORDINAL, LocalClock, days_from_civil
from celery_cronstore.timers.calendar.fields import USEC, Chain, chain_contains, next_in_chain
from celery_cronstore.timers.calendar.spec import CalendarSpec
from celery_cronstore.timers.calendar.transitions import INDEXED, changes

__all__ = ["day_bounds", "next_real", "next_wall", "wall_matches"]

MAX_YEAR = 2199
_DAY_US = 86400 * USEC
_MAX_STEPS = 300_000  # next_wall: one step per day over 2026..2199 is ~63,000
_MAX_SEGMENTS = 2_000  # next_real: two offset changes a year over 230 years is ~460
_PROBE = 6 * 3600  # seconds between offset probes; no zone changes twice in six hours
_LOOK_BACK = 2 * 86400  # no fold is longer than two days


def _triples(chain: Chain | None) -> list[tuple[int, int, int]] | None:
    return None if chain is None else [(c.start, c.stop, c.repeat) for c in chain]


def _month_length(year: int, month: int) -> int:
    return days_from_civil(year, month + 1, 1) - days_from_civil(year, month, 1)


def day_bounds(spec: CalendarSpec, year: int, month: int) -> list[tuple[int, int, int]] | None:
    """Return the day-of-month triples of ``spec`` for one month (``~`` resolved)."""
    if spec.day is None or not spec.last_day:
        return _triples(spec.day)
    length = _month_length(year, month)
    out = []
    for c in spec.day:
        first = length + 1 - c.start
        last = -1 if c.stop < 0 else length + 1 - c.stop
        out.append((last, first, c.repeat) if last > 0 else (first, -1, c.repeat))
    return out


def _next(bounds: list[tuple[int, int, int]] | None, value: int, hi: int) -> int | None:
    """Return the smallest matching value in ``value..hi``, or None."""
    if bounds is None:
        return value if value <= hi else None
    found = next_in_chain(bounds, value)
    return found if found is not None and found <= hi else None


def _civil(days: int) -> tuple[int, int, int]:
    d = date.fromordinal(days + EPOCH_ORDINAL)
    return d.year, d.month, d.day


def next_wall(spec: CalendarSpec, wall_us: int) -> int | None:
    """Return the smallest wall time (µs, local clock read as UTC) >= ``wall_us`` that
    matches every field of ``spec``, or None when there is none before 2200."""
    years, months = _triples(spec.year), _triples(spec.month)
    hours, minutes, seconds = _triples(spec.hour), _triples(spec.minute), _triples(spec.second)
    days, rest = divmod(wall_us, _DAY_US)
    year, month, day = _civil(days)
    hour, rest = divmod(rest, 3600 * USEC)
    minute, second = divmod(rest, 60 * USEC)
    for _ in range(_MAX_STEPS):
        found = _next(years, year, MAX_YEAR)
        if found is None:
            return None
        if found != year:
            year, month, day, hour, minute, second = found, 1, 1, 0, 0, 0
        found = _next(months, month, 12)
        if found is None:
            year, month, day, hour, minute, second = year + 1, 1, 1, 0, 0, 0
            continue
        if found != month:
            month, day, hour, minute, second = found, 1, 0, 0, 0
        found = _next(day_bounds(spec, year, month), day, _month_length(year, month))
        if found is None:
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
            day, hour, minute, second = 1, 0, 0, 0
            continue
        if found != day:
            day, hour, minute, second = found, 0, 0, 0
        ordinal = days_from_civil(year, month, day)
        if spec.weekdays is not None and not spec.weekdays & (1 << ((ordinal + 3) % 7)):
            year, month, day = _civil(ordinal + 1)
            hour = minute = second = 0
            continue
        found = _next(hours, hour, 23)
        if found is None:
            year, month, day = _civil(ordinal + 1)
            hour = minute = second = 0
            continue
        if found != hour:
            hour, minute, second = found, 0, 0
        found = _next(minutes, minute, 59)
        if found is None:
            hour, minute, second = hour + 1, 0, 0
            if hour > 23:
                year, month, day = _civil(ordinal + 1)
                hour = 0
            continue
        if found != minute:
            minute, second = found, 0
        found = _next(seconds, second, 60 * USEC - 1)
        if found is None:
            minute, second = minute + 1, 0
            if minute > 59:
                hour, minute = hour + 1, 0
            if hour > 23:
                year, month, day = _civil(ordinal + 1)
                hour = 0
            continue
        return ordinal * _DAY_US + (hour * 3600 + minute * 60) * USEC + found
    raise TimerSearchError(f"no wall time matching {spec} found within {_MAX_STEPS} steps")


class _Offsets:
    """UTC offsets of one zone, in microseconds, with the instants where they change."""

    def __init__(self, clock: LocalClock) -> None:
        self.clock = clock

    def at(self, t_us: int) -> int:
        return self.clock.offset(t_us // USEC)[0] * USEC

    def change_after(self, t_us: int, limit_us: int) -> int | None:
        """Return the first instant in (t_us, limit_us] with another offset than t_us."""
        start = t_us // USEC
        limit = limit_us // USEC + 1
        here = self.clock.offset(start)[0]
        if INDEXED[0] <= start and limit <= INDEXED[1]:  # the zone's changes, kept
            for instant, offset, _ in changes(self.clock.zone, start, limit):
                if offset != here:
                    return instant * USEC
            return None
        low = start
        while low < limit:
            high = min(low + _PROBE, limit)
            if self.clock.offset(high)[0] != here:
                while high - low > 1:  # offsets change on whole seconds
                    mid = (low + high) // 2
                    if self.clock.offset(mid)[0] == here:
                        low = mid
                    else:
                        high = mid
                return high * USEC if high * USEC > t_us else None
            low = high
        return None


def next_real(spec: CalendarSpec, clock: LocalClock, after_us: int) -> int | None:
    """Return the first real instant (POSIX µs) after ``after_us`` at which ``spec``
    fires, counting a wall time once, at its first occurrence; None if there is none."""
    offsets = _Offsets(clock)
    here = after_us + 1
    # Wall times below ``covered`` were passed before ``here`` (a fold repeats them).
    covered = here + offsets.at(here)
    back = here - _LOOK_BACK * USEC
    while True:
        change = offsets.change_after(back, here)
        if change is None:
            break
        covered = max(covered, change + offsets.at(change - 1))
        back = change
    for _ in range(_MAX_SEGMENTS):
        offset = offsets.at(here)
        wall = next_wall(spec, max(here + offset, covered))
        if wall is None:
            return None
        candidate = wall - offset
        change = offsets.change_after(here, candidate)
        if change is None or candidate < change:
            return candidate
        covered = max(covered, change + offset)
        here = change
    raise TimerSearchError(f"no fire of {spec} found within {_MAX_SEGMENTS} offset changes")


def wall_matches(spec: CalendarSpec, wall_us: int) -> bool:
    """Return whether the wall time ``wall_us`` satisfies every field of ``spec``."""
    days, rest = divmod(wall_us, _DAY_US)
    year, month, day = _civil(days)
    if spec.weekdays is not None and not spec.weekdays & (1 << ((days + 3) % 7)):
        return False
    hour, rest = divmod(rest, 3600 * USEC)
    minute, second = divmod(rest, 60 * USEC)
    checks = (
        (_triples(spec.year), year),
        (_triples(spec.month), month),
        (day_bounds(spec, year, month), day),
        (_triples(spec.hour), hour),
        (_triples(spec.minute), minute),
        (_triples(spec.second), second),
    )
    return all(bounds is None or chain_contains(bounds, value) for bounds, value in checks)
