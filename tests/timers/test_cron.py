"""Cron timers: tables of (expression, zone, after, expected), DST regressions, errors."""

from __future__ import annotations

import itertools
import pickle
import threading
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers import CronTimer, parse_timer

UTC = timezone.utc
BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local(zone: str, *args: int, fold: int = 0) -> datetime:
    """Return a wall time in ``zone`` as UTC.

    In UTC on purpose: PEP 495 makes an ambiguous local time compare unequal to every
    instant in another zone.
    """
    return datetime(*args, tzinfo=ZoneInfo(zone), fold=fold).astimezone(UTC)


def fires(expression: str, zone: str, after: datetime, count: int) -> list[datetime]:
    timer = CronTimer.parse(expression, tz=zone)
    out = []
    for _ in range(count):
        nxt = timer.next_after(after)
        assert nxt is not None
        out.append(nxt)
        after = nxt
    return out


# -- plain tables (UTC) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/5 * * * *", utc(2026, 5, 1, 10, 2), utc(2026, 5, 1, 10, 5)),
        ("*/5 * * * *", utc(2026, 5, 1, 10, 5), utc(2026, 5, 1, 10, 10)),
        ("*/5 * * * *", utc(2026, 5, 1, 10, 4, 59, 999999), utc(2026, 5, 1, 10, 5)),
        ("30 9 * * 1-5", utc(2026, 5, 1, 9, 30), utc(2026, 5, 4, 9, 30)),  # Fri -> Mon
        ("30 9 * * mon-fri", utc(2026, 5, 2, 0, 0), utc(2026, 5, 4, 9, 30)),
        ("0 0 1 * *", utc(2026, 1, 31, 23, 59), utc(2026, 2, 1)),
        ("0 12 29 2 *", utc(2026, 1, 1), utc(2028, 2, 29, 12)),
        ("0 12 29 2 *", utc(2096, 3, 1), utc(2104, 2, 29, 12)),  # 2100 is no leap year
        ("0 0 31 * *", utc(2026, 4, 1), utc(2026, 5, 31)),
        ("0 9 * * 7", utc(2026, 5, 1), utc(2026, 5, 3, 9)),  # 7 is Sunday
        ("0 9 * * fri-mon", utc(2026, 5, 5), utc(2026, 5, 8, 9)),  # wrapping range
        ("0 22-2 * * *", utc(2026, 5, 1, 2, 30), utc(2026, 5, 1, 22)),
        ("0 0 13 * 5", utc(2026, 2, 1), utc(2026, 2, 6)),  # dom OR dow: Friday the 6th
        ("0 9 * * * 30", utc(2026, 5, 1, 9, 0, 0), utc(2026, 5, 1, 9, 0, 30)),
        ("* * * * * */10", utc(2026, 5, 1, 9, 0, 5), utc(2026, 5, 1, 9, 0, 10)),
        ("@hourly", utc(2026, 5, 1, 9, 0), utc(2026, 5, 1, 10)),
        ("@daily", utc(2026, 5, 1, 9, 0), utc(2026, 5, 2)),
        ("@midnight", utc(2026, 5, 1, 9, 0), utc(2026, 5, 2)),
        ("@weekly", utc(2026, 5, 1), utc(2026, 5, 3)),
        ("@monthly", utc(2026, 5, 1), utc(2026, 6, 1)),
        ("@yearly", utc(2026, 5, 1), utc(2027, 1, 1)),
        ("@annually", utc(2026, 5, 1), utc(2027, 1, 1)),
    ],
)
def test_next_after_utc(expression: str, after: datetime, expected: datetime) -> None:
    got = CronTimer.parse(expression).next_after(after)
    assert got == expected
    assert got is not None
    assert got.tzinfo is UTC


def test_next_after_converts_an_aware_argument_in_another_zone() -> None:
    timer = CronTimer.parse("0 12 * * *")
    after = local(NEW_YORK, 2026, 5, 1, 7, 59)  # 11:59 UTC
    assert timer.next_after(after) == utc(2026, 5, 1, 12)


def test_next_after_refuses_a_naive_datetime() -> None:
    with pytest.raises(ValueError, match="naive"):
        CronTimer.parse("* * * * *").next_after(datetime(2026, 1, 1))


def test_next_after_returns_none_at_the_end_of_datetime() -> None:
    timer = CronTimer.parse("0 0 1 1 *", tz=BERLIN)
    assert timer.next_after(datetime(9999, 12, 31, 12, tzinfo=UTC)) is None


def test_zone_shifts_fire_times() -> None:
    # 09:30 in Berlin is 07:30 UTC in summer and 08:30 UTC in winter.
    timer = CronTimer.parse("30 9 * * *", tz=BERLIN)
    assert timer.next_after(utc(2026, 7, 1)) == utc(2026, 7, 1, 7, 30)
    assert timer.next_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 8, 30)


# -- DST: spring gap -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "zone", "after", "expected_local"),
    [
        # Berlin jumps 02:00 CET -> 03:00 CEST on 2026-03-29.
        ("30 2 * * *", BERLIN, utc(2026, 3, 28, 12), (2026, 3, 29, 3, 0)),
        ("0 2 * * *", BERLIN, utc(2026, 3, 28, 12), (2026, 3, 29, 3, 0)),
        ("*/15 2 * * *", BERLIN, utc(2026, 3, 28, 12), (2026, 3, 29, 3, 0)),
        ("59 2 * * 0", BERLIN, utc(2026, 3, 28, 12), (2026, 3, 29, 3, 0)),
        ("30 3 * * *", BERLIN, utc(2026, 3, 28, 12), (2026, 3, 29, 3, 30)),
        # New York jumps 02:00 EST -> 03:00 EDT on 2026-03-08.
        ("30 2 * * *", NEW_YORK, utc(2026, 3, 7, 12), (2026, 3, 8, 3, 0)),
        ("0 2 8 3 *", NEW_YORK, utc(2026, 3, 1), (2026, 3, 8, 3, 0)),
    ],
)
def test_spring_gap_fixed_hour_fires_once_after_the_gap(
    expression: str, zone: str, after: datetime, expected_local: tuple[int, ...]
) -> None:
    got = CronTimer.parse(expression, tz=zone).next_after(after)
    assert got == local(zone, *expected_local)


def test_spring_gap_job_in_gap_fires_once_not_per_missing_minute() -> None:
    got = fires("*/15 2 * * *", BERLIN, utc(2026, 3, 28, 12), 2)
    assert got == [local(BERLIN, 2026, 3, 29, 3, 0), local(BERLIN, 2026, 3, 30, 2, 0)]


def test_spring_gap_fire_and_matching_gap_end_are_one_fire() -> None:
    # 02:00 (missing) maps to 03:00, which also matches on its own: one fire, not two.
    got = fires("0 2,3 * * *", BERLIN, utc(2026, 3, 28, 12), 2)
    assert got == [local(BERLIN, 2026, 3, 29, 3, 0), local(BERLIN, 2026, 3, 30, 2, 0)]


def test_spring_gap_every_hour_job_skips_the_missing_hour() -> None:
    got = fires("*/15 * * * *", BERLIN, local(BERLIN, 2026, 3, 29, 1, 40), 3)
    assert got == [
        local(BERLIN, 2026, 3, 29, 1, 45),
        local(BERLIN, 2026, 3, 29, 3, 0),
        local(BERLIN, 2026, 3, 29, 3, 15),
    ]
    # 15 real minutes between 01:45 CET and 03:00 CEST.
    assert got[1] - got[0] == timedelta(minutes=15)


def test_spring_gap_every_hour_job_in_new_york() -> None:
    got = fires("30 * * * *", NEW_YORK, local(NEW_YORK, 2026, 3, 8, 1, 0), 2)
    assert got == [local(NEW_YORK, 2026, 3, 8, 1, 30), local(NEW_YORK, 2026, 3, 8, 3, 30)]


def test_spring_gap_every_second_job_crosses_the_gap_quickly() -> None:
    timer = CronTimer.parse("* * * * * *", tz=BERLIN)
    assert timer.next_after(local(BERLIN, 2026, 3, 29, 1, 59, 59)) == local(
        BERLIN, 2026, 3, 29, 3, 0
    )


# -- DST: autumn fold ----------------------------------------------------------------


def test_autumn_fold_fixed_hour_fires_at_first_occurrence_only() -> None:
    # Berlin repeats 02:00-03:00 on 2026-10-25 (CEST, then CET).
    got = fires("30 2 * * *", BERLIN, utc(2026, 10, 24, 12), 2)
    assert got == [local(BERLIN, 2026, 10, 25, 2, 30, fold=0), local(BERLIN, 2026, 10, 26, 2, 30)]
    assert got[0] == utc(2026, 10, 25, 0, 30)


def test_autumn_fold_fixed_hour_after_first_occurrence_waits_a_day() -> None:
    timer = CronTimer.parse("30 2 * * *", tz=BERLIN)
    # 02:15 CET (the second 02:15): the 02:30 of the second pass must not fire.
    got = timer.next_after(local(BERLIN, 2026, 10, 25, 2, 15, fold=1))
    assert got == local(BERLIN, 2026, 10, 26, 2, 30)


def test_autumn_fold_every_hour_job_fires_at_both_occurrences() -> None:
    got = fires("*/15 * * * *", BERLIN, local(BERLIN, 2026, 10, 25, 1, 50), 10)
    gaps = {b - a for a, b in itertools.pairwise(got)}
    assert gaps == {timedelta(minutes=15)}
    assert got[1] == local(BERLIN, 2026, 10, 25, 2, 15, fold=0)
    assert got[5] == local(BERLIN, 2026, 10, 25, 2, 15, fold=1)


def test_autumn_fold_hourly_job_from_inside_the_first_pass() -> None:
    timer = CronTimer.parse("0 * * * *", tz=BERLIN)
    got = timer.next_after(local(BERLIN, 2026, 10, 25, 2, 30, fold=0))
    assert got == local(BERLIN, 2026, 10, 25, 2, 0, fold=1)
    assert got == utc(2026, 10, 25, 1, 0)


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        # New York repeats 01:00-02:00 on 2026-11-01 (EDT = UTC-4, then EST = UTC-5).
        ("30 1 * * *", utc(2026, 11, 1, 4), utc(2026, 11, 1, 5, 30)),
        ("30 1 * * *", utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)),
        ("30 * * * *", utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30)),
        ("30 * * * *", utc(2026, 11, 1, 6, 30), utc(2026, 11, 1, 7, 30)),
    ],
)
def test_autumn_fold_new_york(expression: str, after: datetime, expected: datetime) -> None:
    assert CronTimer.parse(expression, tz=NEW_YORK).next_after(after) == expected


def test_autumn_fold_every_second_job_in_second_pass() -> None:
    timer = CronTimer.parse("* * * * * *", tz=BERLIN)
    after = local(BERLIN, 2026, 10, 25, 2, 30, fold=1)
    assert timer.next_after(after) == after + timedelta(seconds=1)


# -- matches -------------------------------------------------------------------------


def test_matches_follows_the_dst_rule() -> None:
    fixed = CronTimer.parse("30 2 * * *", tz=BERLIN)
    assert fixed.matches(local(BERLIN, 2026, 3, 29, 3, 0))  # gap fire
    assert not fixed.matches(local(BERLIN, 2026, 3, 29, 3, 1))
    assert fixed.matches(local(BERLIN, 2026, 10, 25, 2, 30, fold=0))
    assert not fixed.matches(local(BERLIN, 2026, 10, 25, 2, 30, fold=1))
    every = CronTimer.parse("30 * * * *", tz=BERLIN)
    assert every.matches(local(BERLIN, 2026, 10, 25, 2, 30, fold=1))
    assert not every.matches(local(BERLIN, 2026, 3, 29, 3, 0))
    assert not every.matches(local(BERLIN, 2026, 3, 29, 3, 30, 1))


# -- canonical form, equality --------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "canonical"),
    [
        ("  */5   *  * *\t* ", "*/5 * * * *"),
        ("30 9 * * MON-Fri", "30 9 * * mon-fri"),
        ("0 0 1 JAN *", "0 0 1 jan *"),
        ("@Daily", "@daily"),
        (" @ANNUALLY ", "@annually"),
        ("0 9 * * * 30", "0 9 * * * 30"),
    ],
)
def test_canonical_form(expression: str, canonical: str) -> None:
    timer = CronTimer.parse(expression, tz=BERLIN)
    assert str(timer) == canonical
    assert parse_timer(str(timer), kind="cron", tz=timer.tz_name) == timer


def test_timers_compare_by_form_and_zone() -> None:
    assert CronTimer.parse("0 9 * * *") == CronTimer.parse(" 0  9 * * * ")
    assert CronTimer.parse("0 9 * * *") != CronTimer.parse("0 9 * * *", tz=BERLIN)
    assert hash(CronTimer.parse("0 9 * * *")) == hash(CronTimer.parse("0 9 * * *", tz="UTC"))


def test_pickle_round_trip() -> None:
    timer = CronTimer.parse("*/5 * * * *", tz=BERLIN)
    copy = pickle.loads(pickle.dumps(timer))
    assert copy == timer
    assert copy.next_after(utc(2026, 1, 1)) == utc(2026, 1, 1, 0, 5)


def test_concurrent_searches_agree() -> None:
    timer = CronTimer.parse("17 */3 * * *", tz=BERLIN)
    starts = [utc(2026, 1, 1) + timedelta(hours=7 * i) for i in range(200)]
    expected = [timer.next_after(s) for s in starts]
    results: list[list[datetime | None]] = []

    def run() -> None:
        results.append([timer.next_after(s) for s in starts])

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 4


@pytest.mark.parametrize(
    ("expression", "description"),
    [
        ("*/5 * * * *", "every 5 minutes"),
        ("30 9 * * 1-5", "at 09:30 on Monday-Friday"),
        ("0 0 1 * *", "at 00:00 on day 1 of the month"),
        ("0 12 29 2 *", "at 12:00 on day 29 of the month in February"),
        ("* * * * *", "every minute"),
        ("15 * * * *", "every hour at minute 15"),
        ("@hourly", "every hour at minute 0"),
        ("@daily", "every day at 00:00"),
    ],
)
def test_describe(expression: str, description: str) -> None:
    assert CronTimer.parse(expression).describe() == description


def test_describe_names_the_zone() -> None:
    assert CronTimer.parse("0 9 * * *", tz=BERLIN).describe() == "at 09:00 (Europe/Berlin)"


# -- errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "reason", "token", "position"),
    [
        ("61 * * * *", "minute 61 is out of range 0..59", "61", 0),
        ("0 24 * * *", "hour 24 is out of range 0..23", "24", 2),
        ("0 0 32 * *", "day-of-month 32 is out of range 1..31", "32", 4),
        ("0 0 0 * *", "day-of-month 0 is out of range 1..31", "0", 4),
        ("0 0 * 13 *", "month 13 is out of range 1..12", "13", 6),
        ("0 0 * * 8", "day-of-week 8 is out of range 0..7", "8", 8),
        ("0 0 * * * 60", "second 60 is out of range 0..59", "60", 10),
        ("1-61 * * * *", "minute 61 is out of range 0..59", "61", 2),
        ("0 0 * * 1,2,9", "day-of-week 9 is out of range 0..7", "9", 12),
        ("*/0 * * * *", "minute step must be at least 1", "0", 2),
        ("*/61 * * * *", "minute step 61 is larger than the range 0..59", "61", 2),
        ("0 0 * foo *", "month value must be a number 1..12 or a name like 'jan'", "foo", 6),
        ("0 0 * * xyz", "day-of-week value must be a number 0..7 or a name like 'sun'", "xyz", 8),
        ("1,,2 * * * *", "empty list item in the minute field", "1,,2", 0),
        ("0 0 L * *", "croniter extension in the day-of-month field", "L", 4),
        ("0 0 * * 5#2", "croniter extension in the day-of-week field", "5#2", 8),
        ("H * * * *", "croniter extension in the minute field", "H", 0),
        ("0 0 15W * *", "croniter extension in the day-of-month field", "15W", 4),
        ("0 0 ? * *", "croniter extension in the day-of-month field", "?", 4),
        ("0 0 * * * * 2030", "a cron expression has 5 fields", "2030", 12),
        ("0 0 30 2 *", "the day-of-month and month fields never name a real date", "30", 4),
        ("0 0 31 4,6 *", "the day-of-month and month fields never name a real date", "31", 4),
        ("@reboot", "@reboot has no meaning for a periodic scheduler", "@reboot", 0),
        ("@often", "unknown cron macro", "@often", 0),
        ("0 0 * * 1\u00e9", "unexpected character in the day-of-week field", "\u00e9", 9),
    ],
)
def test_errors_name_field_token_and_position(
    expression: str, reason: str, token: str, position: int
) -> None:
    with pytest.raises(TimerSyntaxError) as info:
        CronTimer.parse(expression)
    assert info.value.reason.startswith(reason)
    assert info.value.token == token
    assert info.value.position == position
    assert info.value.expression == expression


def test_error_for_wrong_field_count_has_no_token() -> None:
    with pytest.raises(TimerSyntaxError, match="not 4") as info:
        CronTimer.parse("* * * *")
    assert info.value.position is None


def test_error_on_a_huge_number_is_short() -> None:
    with pytest.raises(TimerSyntaxError) as info:
        CronTimer.parse("9" * 5000 + " * * * *")
    assert len(str(info.value)) < 300 + 5000  # the expression is quoted once, not the message
    assert len(info.value.reason) < 80


def test_unknown_zone_is_a_syntax_error() -> None:
    with pytest.raises(TimerSyntaxError, match="unknown time zone"):
        CronTimer.parse("* * * * *", tz="Mars/Olympus")


@pytest.mark.parametrize(
    ("expression", "canonical"),
    [
        ("* * * * *,0", "* * * * *"),
        ("*,5 * * * *", "* * * * *"),
        ("*/15,* * * * *", "* * * * *"),
        ("0 *,3 * * *", "0 * * * *"),
        ("0 0 * JAN,* *", "0 0 * * *"),
        # A day field holding "*" is unrestricted for croniter: no day-of-month OR rule.
        ("0 0 *,1 * mon", "0 0 * * mon"),
        ("0 0 1,* * mon", "0 0 * * mon"),
        ("0 0 1 * *,mon", "0 0 1 * *"),
        ("0 0 * * * *,30", "0 0 * * * *"),
    ],
)
def test_star_inside_a_comma_list_means_every_value_as_in_croniter(
    expression: str, canonical: str
) -> None:
    # Issue 25: "* * * * *,0" was refused although the grammar allows "*" in a list.
    timer = CronTimer.parse(expression)
    assert str(timer) == canonical
    assert CronTimer.parse(str(timer)) == timer
    moment = utc(2026, 3, 4, 10, 7, 13)
    reference = croniter(expression, moment.replace(tzinfo=None))  # naive: wall time
    for _ in range(8):
        found = timer.next_after(moment)
        assert found is not None
        assert found.replace(tzinfo=None) == reference.get_next(datetime)
        moment = found


def test_star_inside_a_comma_list_still_checks_the_other_items() -> None:
    with pytest.raises(TimerSyntaxError, match="out of range") as info:
        CronTimer.parse("0 0 * * 1,*,9")
    assert info.value.token == "9"
    assert info.value.position == 12
