"""systemd's own calendar test cases (src/test/test-calendarspec.c) as a table of ours.

The expressions and the expected values are upstream's facts; the test is written here.
Upstream's ``test_next`` sets ``TZ`` for the whole process: ``""``/``NULL`` mean UTC,
``CET``/``EET`` are zone files in tzdata, and ``IST`` is no zone file at all, so glibc
falls back to UTC (the expressions that use it name their own zone anyway).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers.calendar import CalendarTimer

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
NEVER = -1

# test_one: input -> normalized form; the normalized form parses back to itself.
NORMALIZED = (
    ("Sat,Thu,Mon-Wed,Sat-Sun", "Mon..Thu,Sat,Sun *-*-* 00:00:00"),
    ("Sat,Thu,Mon..Wed,Sat..Sun", "Mon..Thu,Sat,Sun *-*-* 00:00:00"),
    ("Mon,Sun 12-*-* 2,1:23", "Mon,Sun 2012-*-* 01,02:23:00"),
    ("Wed *-1", "Wed *-*-01 00:00:00"),
    ("Wed-Wed,Wed *-1", "Wed *-*-01 00:00:00"),
    ("Wed..Wed,Wed *-1", "Wed *-*-01 00:00:00"),
    ("Wed, 17:48", "Wed *-*-* 17:48:00"),
    ("Wednesday,", "Wed *-*-* 00:00:00"),
    ("Wed-Sat,Tue 12-10-15 1:2:3", "Tue..Sat 2012-10-15 01:02:03"),
    ("Wed..Sat,Tue 12-10-15 1:2:3", "Tue..Sat 2012-10-15 01:02:03"),
    ("*-*-7 0:0:0", "*-*-07 00:00:00"),
    ("10-15", "*-10-15 00:00:00"),
    ("monday *-12-* 17:00", "Mon *-12-* 17:00:00"),
    ("Mon,Fri *-*-3,1,2 *:30:45", "Mon,Fri *-*-01,02,03 *:30:45"),
    ("12,14,13,12:20,10,30", "*-*-* 12,13,14:10,20,30:00"),
    ("mon,fri *-1/2-1,3 *:30:45", "Mon,Fri *-01/2-01,03 *:30:45"),
    ("03-05 08:05:40", "*-03-05 08:05:40"),
    ("08:05:40", "*-*-* 08:05:40"),
    ("05:40", "*-*-* 05:40:00"),
    ("Sat,Sun 12-05 08:05:40", "Sat,Sun *-12-05 08:05:40"),
    ("Sat,Sun 08:05:40", "Sat,Sun *-*-* 08:05:40"),
    ("2003-03-05 05:40", "2003-03-05 05:40:00"),
    ("2003-03-05", "2003-03-05 00:00:00"),
    ("03-05", "*-03-05 00:00:00"),
    ("hourly", "*-*-* *:00:00"),
    ("daily", "*-*-* 00:00:00"),
    ("monthly", "*-*-01 00:00:00"),
    ("weekly", "Mon *-*-* 00:00:00"),
    ("minutely", "*-*-* *:*:00"),
    ("quarterly", "*-01,04,07,10-01 00:00:00"),
    ("semi-annually", "*-01,07-01 00:00:00"),
    ("annually", "*-01-01 00:00:00"),
    ("*:2/3", "*-*-* *:02/3:00"),
    ("2015-10-25 01:00:00 uTc", "2015-10-25 01:00:00 UTC"),
    ("2015-10-25 01:00:00 Asia/Vladivostok", "2015-10-25 01:00:00 Asia/Vladivostok"),
    ("weekly Pacific/Auckland", "Mon *-*-* 00:00:00 Pacific/Auckland"),
    ("2016-03-27 03:17:00.4200005", "2016-03-27 03:17:00.420001"),
    ("2016-03-27 03:17:00/0.42", "2016-03-27 03:17:00/0.420000"),
    ("9..11,13:00,30", "*-*-* 09..11,13:00,30:00"),
    ("1..3-1..3 1..3:1..3", "*-01..03-01..03 01..03:01..03:00"),
    ("00:00:1.125..2.125", "*-*-* 00:00:01.125000..02.125000"),
    ("00:00:1.0..3.8", "*-*-* 00:00:01..03"),
    ("00:00:01..03", "*-*-* 00:00:01..03"),
    ("00:00:01/2,02..03", "*-*-* 00:00:01/2,02..03"),
    ("*:4,30:0..3", "*-*-* *:04,30:00..03"),
    ("*:4,30:0/1", "*-*-* *:04,30:*"),
    ("*:4,30:0/1,3,5", "*-*-* *:04,30:*"),
    ("*-*~1 Utc", "*-*~01 00:00:00 UTC"),
    ("*-*~05,3 ", "*-*~03,05 00:00:00"),
    ("*-*~* 00:00:00", "*-*-* 00:00:00"),
    ("Monday", "Mon *-*-* 00:00:00"),
    ("Monday *-*-*", "Mon *-*-* 00:00:00"),
    ("*-*-*", "*-*-* 00:00:00"),
    ("*:*:*", "*-*-* *:*:*"),
    ("*:*", "*-*-* *:*:00"),
    ("12:*", "*-*-* 12:*:00"),
    ("*:30", "*-*-* *:30:00"),
    ("93..00-*-*", "1993..2000-*-* 00:00:00"),
    ("00..07-*-*", "2000..2007-*-* 00:00:00"),
    ("*:20..39/5", "*-*-* *:20..35/5:00"),
    ("00:00:20..40/1", "*-*-* 00:00:20..40"),
    ("*~03/1,03..05", "*-*~03/1,03..05 00:00:00"),
    ("@1493187147", "2017-04-26 06:12:27 UTC"),
    ("@1493187147 UTC", "2017-04-26 06:12:27 UTC"),
    ("@0", "1970-01-01 00:00:00 UTC"),
    ("@0 UTC", "1970-01-01 00:00:00 UTC"),
    ("*:05..05", "*-*-* *:05:00"),
    ("*:05..10/6", "*-*-* *:05:00"),
)

# test_next: (expression, TZ, after, expected next elapse), in POSIX microseconds.
NEXT = (
    ("2016-03-27 03:17:00", "", 12345, 1459048620000000),
    ("2016-03-27 03:17:00", "CET", 12345, 1459041420000000),
    ("2016-03-27 03:17:00", "EET", 12345, NEVER),
    ("2016-03-27 03:17:00 UTC", None, 12345, 1459048620000000),
    ("2016-03-27 03:17:00 UTC", "", 12345, 1459048620000000),
    ("2016-03-27 03:17:00 UTC", "CET", 12345, 1459048620000000),
    ("2016-03-27 03:17:00 UTC", "EET", 12345, 1459048620000000),
    ("2016-03-27 03:17:00.420000001 UTC", "EET", 12345, 1459048620420000),
    ("2016-03-27 03:17:00.4200005 UTC", "EET", 12345, 1459048620420001),
    ("2015-11-13 09:11:23.42", "EET", 12345, 1447398683420000),
    ("2015-11-13 09:11:23.42/1.77", "EET", 1447398683420000, 1447398685190000),
    ("2015-11-13 09:11:23.42/1.77", "EET", 1447398683419999, 1447398683420000),
    ("Sun 16:00:00", "CET", 1456041600123456, 1456066800000000),
    ("*-04-31", "", 12345, NEVER),
    ("2016-02~01 UTC", "", 12345, 1456704000000000),
    ("Mon 2017-05~01..07 UTC", "", 12345, 1496016000000000),
    ("Mon 2017-05~07/1 UTC", "", 12345, 1496016000000000),
    ("*-*-01/5 04:00:00 UTC", "", 1646010000000000, 1646107200000000),
    ("*-01/7-01 04:00:00 UTC", "", 1664607600000000, 1672545600000000),
    ("2017-08-06 9,11,13,15,17:00 UTC", "", 1502029800000000, 1502031600000000),
    ("2017-08-06 9..17/2:00 UTC", "", 1502029800000000, 1502031600000000),
    ("2016-12-* 3..21/6:00 UTC", "", 1482613200000001, 1482634800000000),
    ("2017-09-24 03:30:00 Pacific/Auckland", "", 12345, 1506177000000000),
    # 2017-09-24 02:30:00 does not exist in Auckland (clocks jump forward over it).
    ("2017-09-24 02:30:00 Pacific/Auckland", "", 12345, NEVER),
    ("2017-04-02 02:30:00 Pacific/Auckland", "", 12345, 1491053400000000),
    # 02:30 happens twice that night; it fires once.
    ("2017-04-02 02:30:00 Pacific/Auckland", "", 1491053400000000, NEVER),
    ("2017-04-02 03:30:00 Pacific/Auckland", "", 12345, 1491060600000000),
    # A zone in the expression wins over TZ.
    ("2017-09-09 20:42:00 Pacific/Auckland", "", 12345, 1504946520000000),
    ("2017-09-09 20:42:00 Pacific/Auckland", "EET", 12345, 1504946520000000),
    # mktime() moving backwards must not loop (Ireland's negative DST).
    ("Sun *-*-* 01:00:00 Europe/Dublin", "", 1616412478000000, 1617494400000000),
    ("Sun *-*-* 01:00:00 Europe/Dublin", "IST", 1616412478000000, 1617494400000000),
)

# PR #36897: "hourly" in Europe/Dublin across the 2025 spring change, five iterations.
DUBLIN_HOURLY_BASE = datetime(2025, 3, 29, 22, 0, tzinfo=timezone.utc)
DUBLIN_HOURLY = (
    datetime(2025, 3, 29, 23, 0, tzinfo=timezone.utc),  # 23:00 GMT
    datetime(2025, 3, 30, 0, 0, tzinfo=timezone.utc),  # 00:00 GMT
    datetime(2025, 3, 30, 1, 0, tzinfo=timezone.utc),  # 02:00 IST (01:xx never happens)
    datetime(2025, 3, 30, 2, 0, tzinfo=timezone.utc),  # 03:00 IST
    datetime(2025, 3, 30, 3, 0, tzinfo=timezone.utc),  # 04:00 IST
)

INVALID = (
    "test",
    " utc",
    "    ",
    "",
    "7",
    "121212:1:2",
    "2000-03-05.23 00:00:00",
    "2000-03-05 00:00.1:00",
    "00:00:00/0.00000001",
    "00:00:00.0..00.9",
    "2016~11-22",
    "*-*~5/5",
    "Monday.. 12:00",
    "Monday..",
    "-00:+00/-5",
    "00:+00/-5",
    "2016- 11- 24 12: 30: 00",
    "*~29",
    "*~16..31",
    "12..1/2-*",
    "20/4:00",
    "00:00/60",
    "00:00:2300",
    "00:00:18446744073709551615",
    "@88588582097858858",
)


def _tz(name: str | None) -> str | None:
    # glibc reads TZ="" as UTC, and a TZ naming no zone file ("IST") as UTC too.
    return None if name in (None, "", "IST") else name


@pytest.mark.parametrize(("expression", "normalized"), NORMALIZED)
def test_normalized_form(expression: str, normalized: str) -> None:
    timer = CalendarTimer.parse(expression)
    assert str(timer) == normalized
    assert str(CalendarTimer.parse(normalized)) == normalized


@pytest.mark.parametrize(("expression", "tz", "after", "expected"), NEXT)
def test_next_elapse(expression: str, tz: str | None, after: int, expected: int) -> None:
    if expected == NEVER and expression == "*-04-31":
        # A deliberate deviation (issue 25, docs/timers.md): a date that never exists is
        # refused at parse time, where systemd accepts it and answers "never".
        with pytest.raises(TimerSyntaxError, match="April has no day 31"):
            CalendarTimer.parse(expression, tz=_tz(tz))
        return
    timer = CalendarTimer.parse(expression, tz=_tz(tz))
    found = timer.next_after(EPOCH + timedelta(microseconds=after))
    if expected == NEVER:
        assert found is None
    else:
        assert found == EPOCH + timedelta(microseconds=expected)


def test_dublin_hourly_across_the_spring_change_pr_36897() -> None:
    timer = CalendarTimer.parse("hourly", tz="Europe/Dublin")
    moment, found = DUBLIN_HOURLY_BASE, []
    for _ in DUBLIN_HOURLY:
        nxt = timer.next_after(moment)
        assert nxt is not None
        found.append(nxt)
        moment = nxt
    assert tuple(found) == DUBLIN_HOURLY


@pytest.mark.parametrize("expression", INVALID)
def test_invalid(expression: str) -> None:
    with pytest.raises(TimerSyntaxError):
        CalendarTimer.parse(expression)


def test_table_is_complete() -> None:
    # Upstream's counts, so a dropped row does not go unnoticed.
    assert (len(NORMALIZED), len(NEXT), len(INVALID)) == (68, 31, 25)
