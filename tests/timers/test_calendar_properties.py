"""Hypothesis properties of calendar timers in any IANA zone, mostly around DST changes.

For a generated expression and zone and an instant ``a`` near one of the zone's
transitions, with ``n = timer.next_after(a)``:

* ``next_after`` never raises, and answers whenever a brute-force scan of real instants
  finds a fire (a timer with a future fire never dies);
* ``n > a`` (never backwards), and the timer matches ``n``;
* ``n`` is the brute-force answer wherever no offset change is near: there systemd's
  walk and the plain meaning of the event agree;
* the true-next search used where systemd gives up (:func:`scan.next_real`) always
  equals the brute-force answer.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import cache
from zoneinfo import ZoneInfo, available_timezones

from calendar_oracle import brute_next
from hypothesis import HealthCheck, example, given, reject, settings
from hypothesis import strategies as st

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers.calendar import CalendarTimer
from celery_cronstore.timers.calendar.clock import LocalClock
from celery_cronstore.timers.calendar.scan import next_real

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
WINDOW = timedelta(days=2)
FAVOURITES = (
    "Europe/Dublin",
    "Africa/Casablanca",
    "Africa/El_Aaiun",
    "Pacific/Chatham",
    "Australia/Lord_Howe",
    "Europe/London",
    "America/New_York",
    "America/Santiago",
    "Europe/Kyiv",
    "Europe/Berlin",
)
ALL_ZONES = tuple(sorted(z for z in available_timezones() if "/" in z and "Etc" not in z))

PROPERTY_SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@cache
def transitions(zone_name: str) -> tuple[datetime, ...]:
    """Return the instants in 2026-2028 where ``zone_name`` changes its UTC offset."""
    zone = ZoneInfo(zone_name)
    found = []
    probe = datetime(2026, 1, 1, tzinfo=UTC)
    while probe.year < 2029:
        nxt = probe + timedelta(hours=3)
        if probe.astimezone(zone).utcoffset() != nxt.astimezone(zone).utcoffset():
            low, high = probe, nxt
            while high - low > timedelta(seconds=1):
                mid = low + (high - low) / 2
                if mid.astimezone(zone).utcoffset() == high.astimezone(zone).utcoffset():
                    high = mid
                else:
                    low = mid
            found.append(high.replace(microsecond=0))
        probe = nxt
    return tuple(found)


def _step(lo: int, hi: int) -> st.SearchStrategy[str]:
    value = st.integers(lo, hi)
    return st.one_of(
        st.just("*"),
        value.map(str),
        st.tuples(value, st.integers(1, hi - lo)).map(lambda p: f"{p[0]}/{p[1]}"),
        st.tuples(value, value).map(lambda p: f"{min(p)}..{max(p)}"),
        st.lists(value, min_size=1, max_size=3).map(lambda v: ",".join(map(str, v))),
    )


expressions = st.one_of(
    st.sampled_from(("hourly", "daily", "weekly", "monthly", "Mon..Sun 00:00")),
    st.tuples(
        st.sampled_from(("", "", "", "Mon..Fri ", "Sat,Sun ", "Sun ")),
        st.sampled_from(("", "", "*-*-* ", "*-*~01 ", "*-1/2-* ", "*-*-1..7 ")),
        _step(0, 23),
        _step(0, 59),
    ).map(lambda p: f"{p[0]}{p[1]}{p[2]}:{p[3]}"),
)


@st.composite
def zone_and_instant(draw: st.DrawFn) -> tuple[str, datetime]:
    zone = draw(st.one_of(st.sampled_from(FAVOURITES), st.sampled_from(ALL_ZONES)))
    changes = transitions(zone)
    if changes and draw(st.booleans()):
        base = draw(st.sampled_from(changes))
        return zone, base + timedelta(seconds=draw(st.integers(-30 * 3600, 3 * 3600)))
    seconds = draw(st.integers(0, 3 * 365 * 86400))
    return zone, datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)


def _parse(expression: str, zone: str) -> CalendarTimer:
    try:
        return CalendarTimer.parse(expression, tz=zone)
    except TimerSyntaxError:  # e.g. "*:1/59", a repeat that never fires twice
        reject()


def _near_change(zone: str, start: datetime, end: datetime) -> bool:
    margin = timedelta(days=1)
    return any(start - margin <= t <= end + margin for t in transitions(zone))


@PROPERTY_SETTINGS
@given(expression=expressions, where=zone_and_instant())
@example(expression="daily", where=("Europe/Dublin", datetime(2026, 3, 28, 12, tzinfo=UTC)))
@example(expression="*-*-* 1/3:00", where=("Europe/London", datetime(2026, 3, 28, 22, tzinfo=UTC)))
@example(expression="*:5/50", where=("Pacific/Chatham", datetime(2026, 9, 26, 13, 5, tzinfo=UTC)))
@example(expression="hourly", where=("Africa/Casablanca", datetime(2026, 3, 22, 0, 30, tzinfo=UTC)))
def test_next_after_never_dies_and_never_goes_back(
    expression: str, where: tuple[str, datetime]
) -> None:
    zone, after = where
    timer = _parse(expression, zone)
    found = timer.next_after(after)  # must not raise
    expected = brute_next(timer, after, WINDOW)
    if expected is not None:
        assert found is not None, "the timer has a future fire but next_after says none"
    if found is None:
        return
    assert found > after
    assert found.tzinfo is UTC
    assert timer.matches(found)
    if expected is not None and not _near_change(zone, after, expected):
        assert found == expected


@PROPERTY_SETTINGS
@given(expression=expressions, where=zone_and_instant())
@example(expression="*-*-* 1/5:00", where=("Europe/Dublin", datetime(2026, 3, 28, 21, tzinfo=UTC)))
@example(expression="*:0/25", where=("Australia/Lord_Howe", datetime(2026, 4, 4, 14, tzinfo=UTC)))
@example(expression="*:10", where=("Europe/Berlin", datetime(2026, 10, 25, 0, 30, tzinfo=UTC)))
def test_true_next_search_equals_brute_force(expression: str, where: tuple[str, datetime]) -> None:
    zone, after = where
    timer = _parse(expression, zone)
    clock = LocalClock(None if timer.tz_name == "UTC" else ZoneInfo(timer.tz_name))
    found = next_real(timer.spec, clock, (after - EPOCH) // timedelta(microseconds=1))
    expected = brute_next(timer, after, WINDOW)
    if expected is not None:
        assert found is not None
        assert EPOCH + timedelta(microseconds=found) == expected
    elif found is not None:
        assert EPOCH + timedelta(microseconds=found) > after + WINDOW
