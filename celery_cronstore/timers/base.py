"""The contract every timer keeps."""

from __future__ import annotations

import abc
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery_cronstore.errors import TimerSearchError, TimerSyntaxError

__all__ = ["LOOKBACK", "Timer", "fires", "require_aware", "resolve_zone"]

#: How far back :meth:`Timer.last_at_or_before` looks for a fire (ten years and a bit:
#: a leap-day timer fires every four, sometimes eight, years).
LOOKBACK = timedelta(days=3700)
#: Bound on the forward jumps of that search (it needs about two per doubling).
_SEARCH_STEPS = 2000
_TICK = timedelta(microseconds=1)


class Timer(abc.ABC):
    """A schedule expression turned into fire times.

    Every implementation guarantees:

    * ``next_after(after)`` takes an *aware* datetime and returns the first fire time
      strictly after it, as an aware datetime in UTC, or ``None`` when the timer has
      no future fire. It never reads the clock and never loops without bound.
    * ``str(timer)`` is the canonical form; ``parse_timer(str(t), kind=t.kind,
      tz=t.tz_name)`` returns a timer equal to ``t``.
    * ``describe()`` returns a short English description ("every 5 minutes").
    * Timers are immutable, hashable and compare equal when their canonical form,
      kind and zone are equal.
    """

    kind: str
    tz_name: str

    @abc.abstractmethod
    def next_after(self, after: datetime) -> datetime | None:
        """Return the first fire time strictly after ``after`` (aware, UTC) or ``None``."""

    @abc.abstractmethod
    def __str__(self) -> str:
        """Return the canonical form of the expression."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Return a short English description of when the timer fires."""

    def first_fire(self, now: datetime, last_fire: datetime | None = None) -> datetime | None:
        """Return the fire to plan for a task added, edited or enabled at ``now``.

        The first fire strictly after ``now``; :class:`OnceTimer` overrides it so that an
        instant that passed without firing is still planned (the misfire policy decides).
        ``last_fire`` is the task's newest fire time, if any.
        """
        return self.next_after(now)

    def last_at_or_before(self, instant: datetime) -> datetime | None:
        """Return the newest fire time at or before ``instant``, or ``None``.

        Found without walking from the past: windows ending at ``instant`` double from
        one second until one holds a fire; from that fire, forward jumps that double
        while they land at or before ``instant`` (and halve when they overshoot) reach
        the newest one in a few dozen steps, however dense the grid. Fires older than
        :data:`LOOKBACK` are not looked for. Subclasses with arithmetic grids answer
        directly.
        """
        instant = require_aware(instant)
        floor: datetime | None = None
        span = timedelta(seconds=1)
        while floor is None and span <= LOOKBACK:
            point = self.next_after(instant - span - _TICK)
            if point is not None and point <= instant:
                floor = point
            span *= 2
        if floor is None:
            return None
        jump = timedelta(seconds=1)
        for _ in range(_SEARCH_STEPS):
            following = self.next_after(floor)
            if following is None or following > instant:
                return floor
            floor = following
            probe = self.next_after(floor + jump)
            if probe is not None and probe <= instant:
                floor, jump = probe, jump * 2
            else:
                jump = max(jump / 2, _TICK)
        raise TimerSearchError(
            f"no answer for the newest fire at or before {instant.isoformat()} after "
            f"{_SEARCH_STEPS} steps ({self!r})"
        )

    def count_between(self, after: datetime, until: datetime, *, limit: int) -> int | None:
        """Return how many fires lie in ``(after, until]``; ``None`` if more than ``limit``.

        Subclasses with arithmetic grids count any number exactly.
        """
        count = 0
        for _ in fires(self, after, until=until, limit=limit + 1):
            count += 1
        return count if count <= limit else None

    def _key(self) -> tuple[str, str, str]:
        return (self.kind, str(self), self.tz_name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Timer):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {str(self)!r} tz={self.tz_name!r}>"


def require_aware(after: datetime) -> datetime:
    """Return ``after`` converted to UTC; refuse a naive datetime."""
    if after.tzinfo is None or after.utcoffset() is None:
        raise ValueError(f"next_after() needs an aware datetime, got naive {after.isoformat()}")
    return after.astimezone(timezone.utc)


def resolve_zone(name: str | None, *, expression: str = "", position: int | None = None) -> tzinfo:
    """Return the zone called ``name`` (UTC when ``None``); raise TimerSyntaxError if unknown."""
    if name is None or name in ("UTC", "utc", "Z"):
        return timezone.utc
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise TimerSyntaxError(
            "unknown time zone", expression=expression, token=name, position=position
        ) from exc


def fires(
    timer: Timer, after: datetime, *, limit: int | None = None, until: datetime | None = None
) -> Iterator[datetime]:
    """Yield ``timer``'s fire times strictly after ``after``, in order.

    Stop after ``limit`` fires, at the first fire later than ``until`` (``until`` itself is
    included), or when the timer has no further fire, whichever comes first. Without
    ``limit`` or ``until`` the iterator may be infinite: the caller bounds it.
    """
    cursor = after
    count = 0
    while limit is None or count < limit:
        nxt = timer.next_after(cursor)
        if nxt is None or (until is not None and nxt > until):
            return
        yield nxt
        count += 1
        cursor = nxt
