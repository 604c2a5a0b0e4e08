"""Hypothesis properties over the cron, interval and one-off timers.

For every timer t and aware instant a, with n = t.next_after(a):
n > a, n is UTC, t matches n, nothing on the timer's grid matches strictly between a
and n, and the canonical form parses back to an equal timer. Garbage and mutated
expressions raise TimerSyntaxError and nothing else, quickly.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers import CronTimer, IntervalTimer, OnceTimer, parse_timer

UTC = timezone.utc
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",  # 30-minute DST shift
    "Asia/Kolkata",  # +05:30, no DST
    "America/Santiago",  # southern hemisphere, transitions at local midnight
]


def _transitions(zone: str) -> list[datetime]:
    """Return the instants in 2025-2027 where ``zone`` changes its UTC offset."""
    tz = ZoneInfo(zone)
    found = []
    probe = datetime(2025, 1, 1, tzinfo=UTC)
    while probe.year < 2028:
        nxt = probe + timedelta(hours=1)
        if probe.astimezone(tz).utcoffset() != nxt.astimezone(tz).utcoffset():
            low, high = probe, nxt
            while high - low > timedelta(seconds=1):
                mid = low + (high - low) / 2
                if mid.astimezone(tz).utcoffset() == high.astimezone(tz).utcoffset():
                    high = mid
                else:
                    low = mid
            found.append(high.replace(microsecond=0))
        probe = nxt
    return found


TRANSITIONS = {zone: _transitions(zone) for zone in ZONES}
# How far the "nothing matches in between" check walks the grid.
WINDOW_MINUTES = timedelta(days=2)
WINDOW_SECONDS = timedelta(hours=2)

PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _field(low: int, high: int, *, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    value = st.integers(low, high).map(str)
    if names:
        value = value | st.sampled_from(names)

    def item(draw: st.DrawFn) -> str:
        kind = draw(st.sampled_from(["step", "value", "range", "rangestep"]))
        if kind == "step":
            return f"*/{draw(st.integers(1, max(1, (high - low) // 2)))}"
        if kind == "value":
            return draw(value)
        a, b = sorted((draw(st.integers(low, high)), draw(st.integers(low, high))))
        if kind == "range":
            return f"{a}-{b}"
        return f"{a}-{b}/{draw(st.integers(1, 5))}"

    items = st.lists(st.composite(lambda draw: item(draw))(), min_size=1, max_size=3)
    return st.just("*") | items.map(",".join)


@st.composite
def cron_expressions(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(["@hourly", "@daily", "@weekly", "@monthly", "@yearly"]))
    fields = [
        draw(_field(0, 59)),
        draw(_field(0, 23)),
        draw(_field(1, 28) | st.just("*") | st.sampled_from(["29", "30", "31", "1,31"])),
        draw(st.just("*") | _field(1, 12, names=("jan", "mar", "oct", "nov"))),
        draw(st.just("*") | _field(0, 7, names=("mon", "fri", "sun"))),
    ]
    if draw(st.integers(0, 5)) == 0:
        fields.append(draw(_field(0, 59)))
    return " ".join(fields)


@st.composite
def instants(draw: st.DrawFn, zone: str = "UTC") -> datetime:
    """Draw an instant, half the time within three hours of one of ``zone``'s transitions."""
    if TRANSITIONS[zone] and draw(st.booleans()):
        base = draw(st.sampled_from(TRANSITIONS[zone]))
        offset = timedelta(minutes=draw(st.integers(-180, 180)))
        return base + offset + timedelta(seconds=draw(st.sampled_from([0, 0, 1, 30, 59])))
    return draw(
        st.datetimes(min_value=datetime(2001, 1, 1), max_value=datetime(2060, 12, 31))
    ).replace(tzinfo=UTC)


def _valid_cron(draw: st.DrawFn) -> CronTimer:
    expression = draw(cron_expressions())
    zone = draw(st.sampled_from(ZONES))
    try:
        return CronTimer.parse(expression, tz=zone)
    except TimerSyntaxError as exc:
        error = exc
    # The generator only writes valid fields; only impossible dates may be refused.
    assert "never name a real date" in error.reason, error
    return CronTimer.parse("*/5 * * * *", tz=zone)


valid_cron_timers = st.composite(_valid_cron)()


@st.composite
def cron_and_instant(draw: st.DrawFn) -> tuple[CronTimer, datetime]:
    timer = draw(valid_cron_timers)
    return timer, draw(instants(timer.tz_name))


interval_timers = st.builds(
    lambda seconds, origin, zone: IntervalTimer.parse(
        f"every {seconds}s" + (f" from {origin.isoformat()}" if origin else ""), tz=zone
    ),
    st.integers(1, 366 * 86400),
    st.none() | st.datetimes(min_value=datetime(1960, 1, 1), max_value=datetime(2060, 1, 1)),
    st.sampled_from(ZONES),
)

once_timers = st.builds(
    lambda at, zone: OnceTimer.parse(at.replace(tzinfo=UTC).isoformat(), tz=zone),
    st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2100, 1, 1)),
    st.sampled_from(ZONES),
)


# -- cron ----------------------------------------------------------------------------


def _berlin(expression: str) -> CronTimer:
    return CronTimer.parse(expression, tz="Europe/Berlin")


@PROPERTY_SETTINGS
@given(cron_and_instant())
@example((_berlin("30 2 * * *"), datetime(2026, 3, 28, 12, tzinfo=UTC)))
@example((_berlin("30 * * * *"), datetime(2026, 3, 29, 0, 40, tzinfo=UTC)))
@example((_berlin("*/15 * * * *"), datetime(2026, 10, 25, 0, 50, tzinfo=UTC)))
@example((_berlin("30 2 * * *"), datetime(2026, 10, 25, 1, 15, tzinfo=UTC)))
@example(
    (CronTimer.parse("30 1 * * *", tz="America/New_York"), datetime(2026, 11, 1, 5, 45, tzinfo=UTC))
)
@example(
    (CronTimer.parse("0 * * * *", tz="Australia/Lord_Howe"), datetime(2026, 4, 4, 14, tzinfo=UTC))
)
def test_cron_next_is_later_matches_and_nothing_matches_in_between(
    case: tuple[CronTimer, datetime],
) -> None:
    timer, after = case
    nxt = timer.next_after(after)
    assert nxt is not None
    assert nxt > after
    assert nxt.tzinfo is UTC
    assert timer.matches(nxt)
    seconds = len(str(timer).split()) == 6
    step = timedelta(seconds=1) if seconds else timedelta(minutes=1)
    end = min(nxt, after + (WINDOW_SECONDS if seconds else WINDOW_MINUTES))
    probe = after.replace(microsecond=0) if seconds else after.replace(second=0, microsecond=0)
    probe += step
    while probe < end:
        assert not timer.matches(probe), f"{timer!r} matches {probe} before {nxt}"
        probe += step


@PROPERTY_SETTINGS
@given(st.builds(lambda t: CronTimer.parse(str(t)), valid_cron_timers), instants())
def test_cron_in_utc_agrees_with_croniter(timer: CronTimer, after: datetime) -> None:
    text = str(timer)
    expected = croniter(text, after.replace(tzinfo=None)).get_next(datetime)
    assert timer.next_after(after) == expected.replace(tzinfo=UTC)


@PROPERTY_SETTINGS
@given(cron_and_instant())
def test_cron_round_trips_through_its_canonical_form(case: tuple[CronTimer, datetime]) -> None:
    timer, after = case
    again = parse_timer(str(timer), kind=timer.kind, tz=timer.tz_name)
    assert again == timer
    assert hash(again) == hash(timer)
    assert again.next_after(after) == timer.next_after(after)


# -- interval and once ---------------------------------------------------------------


@PROPERTY_SETTINGS
@given(interval_timers, instants())
def test_interval_next_is_the_next_grid_point(timer: IntervalTimer, after: datetime) -> None:
    nxt = timer.next_after(after)
    assert nxt is not None
    assert nxt > after
    assert nxt.tzinfo is UTC
    assert timer.matches(nxt)
    assert (nxt - timer.origin) % timer.period == timedelta(0)
    # The grid point before it is not after ``after`` (or lies before the origin).
    assert nxt == timer.origin or nxt - timer.period <= after
    assert parse_timer(str(timer), kind="interval", tz=timer.tz_name) == timer


@PROPERTY_SETTINGS
@given(once_timers, instants())
def test_once_fires_at_its_instant_or_never(timer: OnceTimer, after: datetime) -> None:
    nxt = timer.next_after(after)
    if timer.at > after:
        assert nxt == timer.at
        assert timer.matches(nxt)
    else:
        assert nxt is None
    assert parse_timer(str(timer), kind="once", tz=timer.tz_name) == timer


# -- garbage in, TimerSyntaxError out ------------------------------------------------

ALPHABET = "0123456789 */-,#?LWHR@abcfhjmnorsuwxyz:.+TZé\t\n"
SEEDS = [
    "*/5 * * * *",
    "30 9 * * mon-fri",
    "0 0 1 jan *",
    "0 9 * * * 30",
    "@daily",
    "every 1h30m",
    "every 5 minutes from 2026-01-05T09:00",
    "every 2d from 2026-01-05",
    "2026-12-01T09:00:00+01:00",
    "2026-12-01T09:00:00.5Z",
]


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace", "repeat"]))
        char = draw(st.sampled_from(ALPHABET))
        if op == "insert":
            text = text[:at] + char + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + 1 :]
        elif op == "replace":
            text = text[:at] + char + text[at + 1 :]
        else:
            text = text[:at] + draw(st.sampled_from(["9" * 40, "99999", "-", "/0"])) + text[at:]
    return text


def _only_syntax_errors(expression: str, kind: str) -> None:
    started = time.perf_counter()
    error: TimerSyntaxError | None = None
    try:
        timer = parse_timer(expression, kind=kind, tz="Europe/Berlin")
    except TimerSyntaxError as exc:
        error = exc
    if error is None:
        assert parse_timer(str(timer), kind=kind, tz=timer.tz_name) == timer
        timer.next_after(datetime(2026, 3, 29, 0, 30, tzinfo=UTC))
    else:
        assert error.reason
        assert error.position is None or 0 <= error.position <= len(expression)
    assert time.perf_counter() - started < 0.5


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=60), st.sampled_from(["cron", "interval", "once"]))
def test_garbage_raises_only_syntax_errors(expression: str, kind: str) -> None:
    _only_syntax_errors(expression, kind)


@settings(max_examples=600, deadline=None)
@given(mutated(), st.sampled_from(["cron", "interval", "once"]))
def test_mutated_expressions_raise_only_syntax_errors(expression: str, kind: str) -> None:
    _only_syntax_errors(expression, kind)
