"""systemd calendar-event timers (``OnCalendar=`` syntax, as in systemd.time(7)).

The package splits along the grammar: :mod:`.fields` (value sets), :mod:`.parse`
(tokens, shorthands), :mod:`.zones` (the trailing zone), :mod:`.dates` (dates that never
exist), :mod:`.spec` (normalized form), :mod:`.clock` (local time
as glibc computes it), :mod:`.search` (next elapse, as systemd walks it), :mod:`.scan`
(the true next fire, where systemd gives up) and :mod:`.describe` (English).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo

from celery_cronstore.errors import TimerSearchError
from celery_cronstore.timers.base import Timer, require_aware, resolve_zone
from celery_cronstore.timers.calendar.clock import LocalClock, days_from_civil
from celery_cronstore.timers.calendar.describe import describe_spec
from celery_cronstore.timers.calendar.fields import USEC, Chain, chain_contains
from celery_cronstore.timers.calendar.parse import parse_spec
from celery_cronstore.timers.calendar.scan import next_real, wall_matches
from celery_cronstore.timers.calendar.search import MAX_YEAR, next_elapse
from celery_cronstore.timers.calendar.spec import CalendarSpec
from celery_cronstore.timers.calendar.transitions import changes
from celery_cronstore.timers.calendar.zones import load_zone

__all__ = ["CalendarSpec", "CalendarTimer"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_USEC = timedelta(microseconds=1)
_MIN_YEAR = 1970


def _values(chain: Chain | None, lo: int, hi: int) -> set[int]:
    if chain is None:
        return set(range(lo, hi + 1))
    bounds = [(c.start, c.stop, c.repeat) for c in chain]
    return {v for v in range(lo, hi + 1) if chain_contains(bounds, v)}


def _month_length(year: int, month: int) -> int:
    return days_from_civil(year, month + 1, 1) - days_from_civil(year, month, 1)


def _can_ever_match(spec: CalendarSpec) -> bool:
    """Return False when no (year, month, day) can satisfy the date fields at all."""
    if spec.last_day or spec.day is None:
        return True
    days = _values(spec.day, 1, 31)
    months = _values(spec.month, 1, 12)
    for year in sorted(_values(spec.year, _MIN_YEAR, MAX_YEAR)):
        if any(d <= _month_length(year, m) for m in months for d in days):
            return True
    return False


class CalendarTimer(Timer):
    """A systemd calendar event, firing exactly when ``systemd-analyze calendar`` says.

    ``str(timer)`` is systemd's normalized form. The zone is the expression's trailing
    zone if it has one, else the ``tz`` given to :meth:`parse` (UTC by default).
    """

    kind = "calendar"

    def __init__(self, spec: CalendarSpec, tz_name: str, zone: tzinfo) -> None:
        self.spec = spec
        self.tz_name = tz_name
        self._zone = None if zone is timezone.utc else zone
        self._possible = _can_ever_match(spec)

    @classmethod
    def parse(cls, expression: str, tz: str | None = None) -> CalendarTimer:
        """Parse a calendar event; raise TimerSyntaxError naming the bad token."""
        spec = parse_spec(expression)
        if spec.utc:
            return cls(spec, "UTC", timezone.utc)
        if spec.timezone is not None:
            zone = load_zone(spec.timezone)
            if zone is not None:
                return cls(spec, spec.timezone, zone)
        zone = resolve_zone(tz)
        return cls(spec, "UTC" if zone is timezone.utc else str(tz), zone)

    def next_after(self, after: datetime) -> datetime | None:
        """Return the first elapse strictly after ``after`` (aware, UTC) or None.

        The answer is systemd's wherever systemd has one, but for one case: from inside
        the second pass of an autumn fold, a wall time already passed in the first pass
        does not fire again (systemd's walk fires it; docs/timers.md lists this). Where
        systemd's walk gives up
        (it loops, or steps back before ``after``) or says "never" while a real fire is
        still ahead, the answer is the true next fire (:func:`.scan.next_real`): a
        timer with a future fire always has a next one.
        """
        moment = require_aware(after)
        if not self._possible:
            return None
        after_us = (moment - _EPOCH) // _ONE_USEC
        if self._in_second_pass(moment):
            # systemd walks on from the wall time of ``after`` and so answers the second
            # occurrence of a wall time whose first one is already past (issue 25). Such
            # a wall time has had its fire: the next one comes after the repeated hour.
            found = next_real(self.spec, LocalClock(self._zone), after_us)
            return None if found is None else _EPOCH + timedelta(microseconds=found)
        try:
            found = next_elapse(self.spec, LocalClock(self._zone), after_us)
        except TimerSearchError:
            found = None  # systemd: "Infinite loop in calendar calculation"
        if found is None or found <= after_us or self._crosses_change(after_us, found):
            found = next_real(self.spec, LocalClock(self._zone), after_us)
            if found is None:
                return None
        return _EPOCH + timedelta(microseconds=found)

    def _crosses_change(self, after_us: int, found_us: int) -> bool:
        """Return whether the zone changes its offset (or DST flag) in (after, found].

        systemd's walk skips wall times only across such a change (issue 25: the rest of
        Dublin's spring day for ``0/N`` hours, 03:45-03:59 after Chatham's gap, 1 January
        in Lord Howe for ``*-1/9-01``). With no change between, every wall time from
        ``after`` on is read once at a constant offset and the walk's answer is the true
        one; with one, :func:`.scan.next_real` is: it is never later than a real fire,
        and where systemd is right the two are the same instant.
        """
        zone = self._zone
        return zone is not None and bool(changes(zone, after_us // USEC, found_us // USEC))

    def _in_second_pass(self, moment: datetime) -> bool:
        """Return whether ``moment`` reads, in the zone, as the second occurrence of a wall
        time (inside the repeated hour of an autumn fold)."""
        if self._zone is None:
            return False
        try:
            local = moment.astimezone(self._zone)
        except OverflowError:  # at the ends of datetime's range
            return False
        return local.fold == 1 and local.utcoffset() != local.replace(fold=0).utcoffset()

    def matches(self, instant: datetime) -> bool:
        """Return whether the local wall-clock reading of ``instant`` satisfies the event."""
        moment = require_aware(instant)
        local = moment.astimezone(self._zone or timezone.utc).replace(tzinfo=timezone.utc)
        return wall_matches(self.spec, (local - _EPOCH) // _ONE_USEC)

    def __str__(self) -> str:
        return str(self.spec)

    def describe(self) -> str:
        """Return a short English description ("every 5 minutes", "Mon..Fri at 09:30")."""
        explicit = self.spec.utc or self.spec.timezone is not None
        zone = self.tz_name if explicit or self.tz_name != "UTC" else None
        return describe_spec(self.spec, zone)
