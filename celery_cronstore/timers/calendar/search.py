"""Find the next elapse of a calendar event, field by field, exactly as systemd does.

The walk goes year -> month -> day (-> weekday) -> hour -> minute -> second over local
wall-clock fields. When a field must move, the fields below it restart from their
minimum; values past a field's end (``*-*-20/15`` -> day 35) are normalized by
``mktime`` and the walk restarts from the normalized date, with every field below the
one that moved at its minimum. systemd (v252) keeps the lower fields of the overflow
instead and so skips wall times (``*-*-* 0/5:00`` after 22:00 on 31 December: 05:00 on
1 January, not 00:00); we do not copy that (docs/timers.md, "Deliberate differences").
Kept as systemd does them:

* a wall-clock time that falls in a DST gap is skipped;
* in a DST fold each wall-clock time fires once (in the pass the search reaches first).

The walk gives up after :data:`MAX_ITERATIONS` restarts, like systemd, raising
:class:`~celery_cronstore.errors.TimerSearchError`.
"""

from __future__ import annotations

from celery_cronstore.errors import TimerSearchError
from celery_cronstore.timers.calendar.clock import LocalClock, Tm, days_from_civil, wall_seconds
from celery_cronstore.timers.calendar.fields import USEC, Chain, next_in_chain
from celery_cronstore.timers.calendar.spec import CalendarSpec

__all__ = ["MAX_ITERATIONS", "MAX_YEAR", "next_elapse"]

MAX_ITERATIONS = 1000
MAX_YEAR = 2199
_INF = -1  # "no such day" marker of the last-day lookup


def _triples(chain: Chain) -> list[tuple[int, int, int]]:
    return [(c.start, c.stop, c.repeat) for c in chain]


class _Walk:
    """State of one search: the cursor ``tm``, its microseconds, DST flag, and the clock."""

    def __init__(self, spec: CalendarSpec, clock: LocalClock, start: int) -> None:
        self.spec = spec
        self.clock = clock
        self.start = start
        self.year = None if spec.year is None else _triples(spec.year)
        self.month = None if spec.month is None else _triples(spec.month)
        self.day = None if spec.day is None else _triples(spec.day)
        self.hour = None if spec.hour is None else _triples(spec.hour)
        self.minute = None if spec.minute is None else _triples(spec.minute)
        self.second = _triples(spec.second)

    def within_bounds(self, tm: Tm) -> tuple[int, int]:
        """Return (1, _) if ``tm`` is a real local time, (0, isdst) after moving it forward
        to the normalized time, or (-1, _) if it is out of range or would move backwards."""
        if tm[0] > MAX_YEAR:
            return -1, -1
        result = self.clock.mktime(tm, -1)
        if result is None:
            return -1, -1
        _, norm, dst = result
        # Whatever overflowed resets every field below it: the normalized time's lower
        # fields are a leftover of the overflow, not a choice of the spec. (systemd 252
        # resets only the field just below, so a repeat that overflows across a day or a
        # year skips wall times: ``*:0/50`` from 23:51 answers 00:50, not 00:00; see
        # docs/timers.md, "Deliberate differences from systemd".)
        for index in range(6):
            if norm[index] != tm[index]:
                cmp = 1 if norm[index] > tm[index] else -1
                for lower in range(index + 1, 6):
                    norm[lower] = 1 if lower < 3 else 0
                break
        else:
            return 1, -1
        if cmp < 0:
            return -1, -1
        tm[:] = norm
        if index < 5 and not self.clock.exists(norm) and not self._lands_after(norm, int(dst)):
            # The reset landed in a DST gap. Carrying the DST flag over would make the
            # next mktime() step back before the search start; systemd 252 is observed
            # (tested against systemd-analyze) to step forward past the gap instead. When
            # the flag still lands after the start (a gap that is not a whole hour, as in
            # Pacific/Chatham), systemd keeps it and fires before the gap.
            return 0, -1
        return 0, int(dst)

    def _lands_after(self, tm: Tm, isdst: int) -> bool:
        # A probe systemd does not make: keep glibc's remembered offset untouched.
        guess = self.clock.guess
        probe = self.clock.mktime(tm, isdst)
        self.clock.guess = guess
        return probe is not None and probe[0] > self.start

    def weekday_ok(self, tm: Tm) -> bool:
        bits = self.spec.weekdays
        if bits is None:
            return True
        result = self.clock.mktime(tm, -1)
        if result is None:
            return False
        norm = result[1]
        weekday = (days_from_civil(norm[0], norm[1], norm[2]) + 3) % 7  # 0 = Monday
        return bool(bits & (1 << weekday))

    def last_day(self, tm: Tm, back: int) -> int:
        # mktime() of day (1 - back) of the next month; -1 if that leaves this month.
        probe = [tm[0], tm[1] + 1, 1 - back, tm[3], tm[4], tm[5]]
        result = self.clock.mktime(probe, -1)
        if result is None:
            return _INF
        norm = result[1]
        if norm[1] != tm[1]:  # systemd compares the month only
            return _INF
        return norm[2]

    def day_bounds(self, tm: Tm) -> list[tuple[int, int, int]] | None:
        if self.day is None or not self.spec.last_day:
            return self.day
        out = []
        for start, stop, repeat in self.day:
            first, last = self.last_day(tm, start), self.last_day(tm, stop)
            if last > 0:
                first, last = last, first
            out.append((first, last, repeat))
        return out


def _forward(clock: LocalClock, tm: Tm, back: tuple[int, Tm, bool]) -> tuple[int, Tm, bool] | None:
    wall = wall_seconds(tm)
    if not back[2] or clock.offset(back[0])[0] >= clock.offset(back[0] + 7200)[0]:
        return back
    for flag in (1, 0):
        again = clock.mktime(tm, flag)
        if again is not None and wall_seconds(again[1]) >= wall:
            return again
    return back


def _match(bounds: list[tuple[int, int, int]] | None, value: int) -> tuple[int, int]:
    """Return (-1, value) if nothing matches from ``value`` on, else (changed?, new value)."""
    if bounds is None:
        return 0, value
    found = next_in_chain(bounds, value)
    if found is None:
        return -1, value
    return int(found != value), found


def next_elapse(spec: CalendarSpec, clock: LocalClock, after_us: int) -> int | None:
    """Return the first elapse strictly after ``after_us`` (POSIX microseconds), or None."""
    start, usec = divmod(after_us + 1, USEC)
    walk = _Walk(spec, clock, start)
    tm, dst = clock.localtime(start)
    isdst = int(dst)
    clock.guess = -clock.offset(start)[0]
    for _ in range(MAX_ITERATIONS):
        normalized = clock.mktime(tm, isdst)
        if isdst < 0 and normalized is not None and wall_seconds(normalized[1]) < wall_seconds(tm):
            normalized = _forward(clock, tm, normalized)
        if normalized is not None:
            tm = normalized[1]
        isdst = -1

        r, tm[0] = _match(walk.year, tm[0])
        if r > 0:
            tm[1:] = [1, 1, 0, 0, 0]
            usec = 0
        if r < 0 or walk.within_bounds(tm)[0] <= 0:
            return None

        r, tm[1] = _match(walk.month, tm[1])
        if r > 0:
            tm[2:] = [1, 0, 0, 0]
            usec = 0
        if r >= 0:
            r, isdst = walk.within_bounds(tm)
        if r < 0:
            tm[0] += 1
            tm[1:] = [1, 1, 0, 0, 0]
            usec, isdst = 0, -1
            continue
        if r == 0:
            continue

        r, tm[2] = _match(walk.day_bounds(tm), tm[2])
        if r > 0:
            tm[3:] = [0, 0, 0]
            usec = 0
        if r >= 0:
            r, isdst = walk.within_bounds(tm)
        if r < 0:
            tm[1] += 1
            tm[2:] = [1, 0, 0, 0]
            usec, isdst = 0, -1
            continue
        if r == 0:
            continue

        if not walk.weekday_ok(tm):
            tm[2] += 1
            tm[3:] = [0, 0, 0]
            usec = 0
            continue

        r, tm[3] = _match(walk.hour, tm[3])
        if r > 0:
            tm[4:] = [0, 0]
            usec = 0
        if r >= 0:
            r, isdst = walk.within_bounds(tm)
        if r < 0:
            tm[2] += 1
            tm[3:] = [0, 0, 0]
            usec, isdst = 0, -1
            continue
        if r == 0:
            continue

        r, tm[4] = _match(walk.minute, tm[4])
        if r > 0:
            tm[5] = 0
            usec = 0
        if r >= 0:
            r, isdst = walk.within_bounds(tm)
        if r < 0:
            tm[3] += 1
            tm[4:] = [0, 0]
            usec, isdst = 0, -1
            continue
        if r == 0:
            continue

        r, value = _match(walk.second, tm[5] * USEC + usec)
        tm[5], usec = divmod(value, USEC)
        if r >= 0:
            r, isdst = walk.within_bounds(tm)
        if r < 0:
            tm[4] += 1
            tm[5] = 0
            usec, isdst = 0, -1
            continue
        if r == 0:
            continue

        final = clock.mktime(tm, -1)
        if final is None:
            return None
        return final[0] * USEC + usec
    raise TimerSearchError(
        f"no elapse of {spec} found within {MAX_ITERATIONS} steps (systemd gives up too)"
    )
