"""Regressions of issue 13: calendar timers that disagreed with systemd or died.

Each class of ``calendar-disagreements.md`` has its cases here, named after the problem.
Where systemd answers, the expected values are systemd 252's (``systemd-analyze
calendar``); where systemd gives up ("Infinite loop in calendar calculation"), they are
the true next fires, checked against a brute-force scan of real instants.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from calendar_oracle import brute_next

from celery_cronstore.timers import parse_timer
from celery_cronstore.timers.__main__ import main
from celery_cronstore.timers.calendar import CalendarTimer

UTC = timezone.utc


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires(expression: str, tz: str | None, after: datetime, count: int) -> list[datetime]:
    timer = CalendarTimer.parse(expression, tz=tz)
    out: list[datetime] = []
    moment = after
    for _ in range(count):
        found = timer.next_after(moment)
        assert found is not None
        assert found > moment
        out.append(found)
        moment = found
    return out


# A1: a seconds list holding 0/1 (every second) prints as "*", like systemd.
@pytest.mark.parametrize(
    ("expression", "normalized"),
    [
        ("*:*:0/1,15", "*-*-* *:*:*"),
        ("Mon 12:00:0/1,30", "Mon *-*-* 12:00:*"),
        ("*-*-* 08:15:5,0/1,59", "*-*-* 08:15:*"),
        ("*:*:0/1,1..3/2", "*-*-* *:*:*"),
    ],
)
def test_seconds_list_with_every_second_collapses_to_star(expression: str, normalized: str) -> None:
    timer = CalendarTimer.parse(expression)
    assert str(timer) == normalized
    assert CalendarTimer.parse(str(timer)) == timer


def test_seconds_list_with_a_fraction_keeps_its_fraction() -> None:
    # systemd prints "*" here and its own output then loses hh:mm:59.5 (A2): we keep it.
    timer = CalendarTimer.parse("*:*:0/1,59.5")
    assert str(timer) == "*-*-* *:*:00/1,59.500000"
    again = CalendarTimer.parse(str(timer))
    after = utc("2026-05-01T00:00:59")
    assert again.next_after(after) == after + timedelta(milliseconds=500)


# B: negative DST (winter is "DST" minus one hour): systemd 252 steps forward over the gap.
@pytest.mark.parametrize(
    ("expression", "tz", "after", "expected"),
    [
        ("daily Europe/Dublin", None, "2026-03-28T12:00:00",
         ["2026-03-29T00:00:00", "2026-03-29T23:00:00", "2026-03-30T23:00:00"]),
        ("*:20/30", "Europe/Dublin", "2026-03-29T00:00:00",
         ["2026-03-29T00:20:00", "2026-03-29T00:50:00", "2026-03-29T01:20:00",
          "2026-03-29T01:50:00", "2026-03-29T02:20:00"]),
        ("hourly Africa/Casablanca", None, "2026-03-22T00:30:00",
         ["2026-03-22T01:00:00", "2026-03-22T02:00:00", "2026-03-22T03:00:00"]),
        ("hourly", "Africa/El_Aaiun", "2026-03-22T00:30:00",
         ["2026-03-22T01:00:00", "2026-03-22T02:00:00", "2026-03-22T03:00:00"]),
        ("*-*-* 00/6:00", "Europe/Dublin", "2026-03-28T20:00:00",
         ["2026-03-29T00:00:00", "2026-03-29T05:00:00", "2026-03-29T11:00:00"]),
        ("Mon..Sun 00:00 Europe/Dublin", None, "2026-03-28T12:00:00",
         ["2026-03-29T00:00:00", "2026-03-29T23:00:00"]),
        ("hourly", "Europe/Dublin", "2025-03-29T22:00:00",
         ["2025-03-29T23:00:00", "2025-03-30T00:00:00", "2025-03-30T01:00:00"]),
    ],
)  # fmt: skip
def test_negative_dst_spring_gap_steps_forward(
    expression: str, tz: str | None, after: str, expected: list[str]
) -> None:
    assert fires(expression, tz, utc(after), len(expected)) == [utc(e) for e in expected]


# D: Pacific/Chatham jumps 02:45 -> 03:45; fires before the gap are kept, as systemd does,
# and 03:55 / 03:56 after it fire too (systemd skips them; issue 25).
@pytest.mark.parametrize(
    ("expression", "tz", "after", "expected"),
    [
        ("*:5/50", "Pacific/Chatham", "2026-09-26T13:05:00",
         ["2026-09-26T13:10:00", "2026-09-26T13:20:00", "2026-09-26T14:10:00",
          "2026-09-26T14:20:00"]),
        ("*-*-* 0..5:5/50", "Pacific/Chatham", "2026-09-26T11:15:00",
         ["2026-09-26T11:20:00", "2026-09-26T12:10:00", "2026-09-26T12:20:00",
          "2026-09-26T13:10:00", "2026-09-26T13:20:00", "2026-09-26T14:10:00"]),
        ("*:7/49 Pacific/Chatham", None, "2026-09-26T13:00:00",
         ["2026-09-26T13:11:00", "2026-09-26T13:22:00", "2026-09-26T14:11:00",
          "2026-09-26T14:22:00"]),
    ],
)  # fmt: skip
def test_gap_not_a_whole_hour_keeps_fires_before_the_gap(
    expression: str, tz: str | None, after: str, expected: list[str]
) -> None:
    assert fires(expression, tz, utc(after), len(expected)) == [utc(e) for e in expected]


# E: systemd gives up ("Infinite loop in calendar calculation"); we give the true next fire.
@pytest.mark.parametrize(
    ("expression", "tz", "after", "count"),
    [
        ("*-*-* 1/3:00", "Europe/London", "2026-03-28T10:00:00", 8),
        ("*-*-* 1/5:00", "Europe/Berlin", "2026-03-27T12:00:00", 10),
        ("*-*-* 0/7:00", "America/New_York", "2026-03-06T12:00:00", 10),
        ("*-*-* 1/5:00", "Europe/Dublin", "2026-03-28T21:00:00", 4),
        ("*-*-* 2/8:00", "Europe/Dublin", "2026-03-27T22:00:00", 5),
        ("*-*-* 0/2:00", "America/Santiago", "2026-09-06T03:10:00", 4),
        ("*-*-* 02:45", "Pacific/Chatham", "2026-09-26T13:10:00", 2),
    ],
)
def test_where_systemd_gives_up_we_fire_at_the_true_next_instant(
    expression: str, tz: str, after: str, count: int
) -> None:
    timer = CalendarTimer.parse(expression, tz=tz)
    moment = utc(after)
    for _ in range(count):
        found = timer.next_after(moment)
        assert found is not None
        assert found == brute_next(timer, moment, timedelta(days=3))
        moment = found


def test_every_five_months_in_berlin_does_not_die_in_november() -> None:
    # systemd gives up after 2026-11-01; the task would stop firing for good.
    found = fires("*-1/5-01", "Europe/Berlin", utc("2025-12-31T23:00:00"), 4)
    assert found == [
        utc("2026-05-31T22:00:00"),  # 2026-06-01 00:00 CEST
        utc("2026-10-31T23:00:00"),  # 2026-11-01 00:00 CET
        utc("2026-12-31T23:00:00"),  # 2027-01-01 00:00 CET
        utc("2027-05-31T22:00:00"),  # 2027-06-01 00:00 CEST
    ]


def test_london_every_three_hours_keeps_firing_after_the_spring_change() -> None:
    found = fires("*-*-* 1/3:00", "Europe/London", utc("2026-03-28T22:00:00"), 2)
    # 01:00 GMT does not happen on the 29th; 04:00 BST does.
    assert found == [utc("2026-03-29T03:00:00"), utc("2026-03-29T06:00:00")]


# 7: the timer CLI shows local times in the zone the expression names.
def test_timer_cli_shows_local_times_in_the_expressions_zone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(
        ["daily Europe/Dublin", "--kind", "calendar", "-n", "2", "--after", "2026-03-28T12:00Z"]
    )
    lines = capsys.readouterr().out.splitlines()
    assert status == 0
    assert lines[-2].startswith("  2026-03-29 00:00:00 GMT +0000")
    assert lines[-1].startswith("  2026-03-30 00:00:00 IST +0100")
    assert lines[-1].endswith("2026-03-29T23:00:00Z")


# 8: a date-only interval origin on a day whose midnight does not exist.
def test_interval_origin_on_a_day_without_midnight_is_the_start_of_that_day() -> None:
    timer = parse_timer("every 1d from 2026-09-06", tz="America/Santiago")
    # 2026-09-06 starts at 01:00 -03 (clocks jump from 24:00 -04 to 01:00 -03).
    assert str(timer) == "every 1d from 2026-09-06T04:00:00Z"
    assert parse_timer(str(timer), tz="America/Santiago") == timer


def test_interval_origin_on_a_day_whose_midnight_repeats_is_its_first_midnight() -> None:
    # Santiago 2026-04-05: 24:00 -03 becomes 23:00 -04, so 00:00 happens once, at -04.
    timer = parse_timer("every 1d from 2026-04-05", tz="America/Santiago")
    assert str(timer) == "every 1d from 2026-04-05T04:00:00Z"


# Issue 25: docs/timers.md says a fold's wall time fires once, at its first occurrence.
# From a base inside the second pass, systemd's walk answers the second occurrence of a
# wall time already fired in the first pass (TZ=Europe/Berlin systemd-analyze calendar
# --base-time='2026-10-25 01:10:00 UTC' '*-*-* 02:30' says 02:30 CET); we do not.
@pytest.mark.parametrize(
    ("expression", "tz", "after", "expected"),
    [
        # 02:30 CEST (00:30 UTC) was the fire; 02:10 CET is inside the repeated hour.
        ("*-*-* 02:30", "Europe/Berlin", "2026-10-25 01:10", ["2026-10-26 01:30"]),
        ("*-*-* 02:30", "Europe/Berlin", "2026-10-25 01:29:59", ["2026-10-26 01:30"]),
        ("*:0/30", "Europe/Berlin", "2026-10-25 01:10", ["2026-10-25 02:00", "2026-10-25 02:30"]),
        ("*-*-* 01:30", "America/New_York", "2026-11-01 06:10", ["2026-11-02 06:30"]),
        ("*-*-* 01:45", "Australia/Lord_Howe", "2026-04-04 15:05", ["2026-04-05 15:15"]),
    ],
)
def test_fold_wall_time_fires_once_even_from_inside_the_second_pass(
    expression: str, tz: str, after: str, expected: list[str]
) -> None:
    assert fires(expression, tz, utc(after), len(expected)) == [utc(e) for e in expected]


def test_fold_first_pass_fire_is_still_systemds() -> None:
    # The first pass is unchanged: 02:30 CEST fires, then 02:30 CET the next day.
    got = fires("*-*-* 02:30", "Europe/Berlin", utc("2026-10-25 00:10"), 2)
    assert got == [utc("2026-10-25 00:30"), utc("2026-10-26 01:30")]


# Issue 25: where systemd's walk skips wall times that exist (or gives up), the timer
# fires at the true next fire. The expectation is a brute-force walk written here, with
# zoneinfo and a plain predicate on the wall reading: every UTC minute after the base,
# skipping a wall reading already shown by an earlier instant (a fold's second pass).
def true_fires(
    wall_ok: Callable[[datetime], bool], tz: str, after: datetime, count: int
) -> list[datetime]:
    zone = ZoneInfo(tz)
    out: list[datetime] = []
    moment = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    end = after + timedelta(days=400)
    while len(out) < count and moment <= end:
        local = moment.astimezone(zone)
        wall = local.replace(tzinfo=None)
        if wall_ok(wall):
            earlier = [
                moment - timedelta(minutes=m)
                for m in range(1, 181)
                if (moment - timedelta(minutes=m)).astimezone(zone).replace(tzinfo=None) == wall
            ]
            if not earlier:
                out.append(moment)
        moment += timedelta(minutes=1)
    return out


@pytest.mark.parametrize("minute", [53, 50, 46, 47])
def test_chatham_minutes_after_the_gap_fire_where_systemd_loops(minute: int) -> None:
    # TZ=Pacific/Chatham systemd-analyze calendar --base-time='2026-09-26 13:59:00 UTC'
    # '*:53': "Resource deadlock avoided"; the true next fire is 03:53 +1345.
    after = utc("2026-09-26T13:59:00")
    expected = true_fires(lambda w: w.minute == minute, "Pacific/Chatham", after, 3)
    assert expected[0] == utc(f"2026-09-26T14:{minute - 45:02d}:00")  # 03:MM +1345
    assert fires(f"*:{minute}", "Pacific/Chatham", after, 3) == expected


@pytest.mark.parametrize("start", [0, 1, 2])
@pytest.mark.parametrize("step", [2, 3, 4, 5, 6, 7, 8, 12])
def test_dublin_every_n_hours_on_its_spring_day_fires_at_every_existing_hour(
    start: int, step: int
) -> None:
    # systemd skips the rest of 2026-03-29 for 1/2, 1/3, 1/4, 1/6, 1/8, 1/12 (01:00 GMT
    # does not exist; 03:00 IST does) and gives up on others.
    after = utc("2026-03-28T23:30:00")
    hours = set(range(start, 24, step))
    expected = true_fires(lambda w: w.minute == 0 and w.hour in hours, "Europe/Dublin", after, 4)
    assert fires(f"*-*-* {start}/{step}:00", "Europe/Dublin", after, 4) == expected


def test_dublin_one_every_two_hours_fires_at_three_on_the_spring_day() -> None:
    # TZ=Europe/Dublin systemd-analyze calendar --base-time='2026-03-28 23:30:00 UTC'
    # '*-*-* 1/2:00' says 2026-03-30 01:00 IST; 03:00 IST on the 29th exists.
    got = fires("*-*-* 1/2:00", "Europe/Dublin", utc("2026-03-28T23:30:00"), 2)
    assert got == [utc("2026-03-29T02:00:00"), utc("2026-03-29T04:00:00")]


@pytest.mark.parametrize(
    ("expression", "wall_ok", "after"),
    [
        ("*:0/15", lambda w: w.minute % 15 == 0, "2026-09-26T13:30:00"),
        ("*:5/50", lambda w: w.minute in (5, 55), "2026-09-26T13:25:00"),
        ("*-*-* 3:45..59", lambda w: w.hour == 3 and w.minute >= 45, "2026-09-26T13:30:00"),
        ("*:*", lambda w: True, "2026-09-26T13:59:00"),
    ],
)
def test_chatham_quarter_hour_after_the_gap_fires(
    expression: str, wall_ok: Callable[[datetime], bool], after: str
) -> None:
    # 02:45 +1245 jumps to 03:45 +1345; systemd skips 03:45-03:59 after the gap:
    # TZ=Pacific/Chatham systemd-analyze calendar --base-time='2026-09-26 13:30:00 UTC'
    # --iterations=3 '*:0/15' says 02:30 +1245, 04:00 +1345, 04:15 +1345.
    expected = true_fires(wall_ok, "Pacific/Chatham", utc(after), 4)
    assert fires(expression, "Pacific/Chatham", utc(after), 4) == expected
    if expression == "*:0/15":
        assert expected[1] == utc("2026-09-26T14:00:00")  # 03:45 +1345


def test_lord_howe_every_nine_months_fires_on_the_first_of_january() -> None:
    # TZ=Australia/Lord_Howe systemd-analyze calendar --base-time='2026-06-01 00:00:00 UTC'
    # '*-1/9-01' skips 1 January (+11, DST) and answers 1 October (+1030) every year.
    after = utc("2026-06-01T00:00:00")
    expected = true_fires(
        lambda w: w.day == 1 and w.month in (1, 10) and w.hour == w.minute == 0,
        "Australia/Lord_Howe",
        after,
        2,
    )
    assert expected == [
        utc("2026-09-30T13:30:00"),  # 2026-10-01 00:00 +1030
        utc("2026-12-31T13:00:00"),  # 2027-01-01 00:00 +11
    ]
    assert fires("*-1/9-01", "Australia/Lord_Howe", after, 2) == expected


@pytest.mark.parametrize(
    ("expression", "tz", "after", "systemd_says"),
    [
        # systemd-analyze calendar --base-time='2026-12-07 23:51:00 UTC' '*:0/50'
        ("*:0/50", "UTC", "2026-12-07T23:51:00", "2026-12-08T00:50:00"),
        # systemd-analyze calendar --base-time='2026-12-07 23:55:00 UTC' '*:5/50'
        ("*:5/50", "UTC", "2026-12-07T23:55:00", "2026-12-08T00:55:00"),
        # systemd-analyze calendar --base-time='2026-12-31 22:00:00 UTC' '*-*-* 0/5:00'
        ("*-*-* 0/5:00", "UTC", "2026-12-31T22:00:00", "2027-01-01T05:00:00"),
        # systemd-analyze calendar --base-time='2026-12-31 23:59:51 UTC' '*:*:0/25'
        ("*:*:0/25", "UTC", "2026-12-31T23:59:51", "2027-01-01T00:00:25"),
        # The same overflow in a zone with DST, on an ordinary night.
        ("*:0/50", "Europe/Berlin", "2026-07-14T21:51:00", "2026-07-14T22:50:00"),
    ],
)
def test_a_repeat_overflowing_across_a_day_or_a_year_skips_no_wall_time(
    expression: str, tz: str, after: str, systemd_says: str
) -> None:
    """systemd 252 keeps the lower fields of an overflow and skips the first wall time of
    the next day or year; the timer answers the true next fire (the brute-force walk)."""
    timer = CalendarTimer.parse(expression, tz=tz)
    moment = utc(after)
    found = timer.next_after(moment)
    assert found == brute_next(timer, moment, timedelta(days=2))
    assert found is not None
    assert found < utc(systemd_says)
