"""The peers' schedules as timers: each mapping fires exactly when the peer's own code says.

Crontabs are checked against Celery's ``crontab.remaining_estimate`` (the arithmetic beat
runs), RedBeat's rrules against dateutil (what RedBeat runs), fire after fire.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab, schedule, solar
from dateutil.rrule import DAILY, FR, HOURLY, MINUTELY, MO, MONTHLY, TH, WEEKLY, YEARLY
from redbeat.schedules import rrule

from celery_cronstore.adopt import convert
from celery_cronstore.beat.schedule_sync import timer_from_entry
from celery_cronstore.timers import Timer, fires, parse_timer

UTC = timezone.utc


def _app(zone: str) -> Celery:
    app = Celery(set_as_current=False)
    app.conf.timezone = zone
    return app


def celery_fires(
    fields: tuple[str, ...], zone: str, start: datetime, until: datetime
) -> list[datetime]:
    """Celery's own fires of ``crontab(*fields)`` after ``start``, up to ``until``."""
    minute, hour, dom, moy, dow = fields
    now = [start]
    cron = crontab(minute, hour, dow, dom, moy, app=_app(zone), nowfun=lambda: now[0])
    out: list[datetime] = []
    last = start.astimezone(ZoneInfo(zone))
    while True:
        now[0] = last
        nxt = (last + cron.remaining_estimate(last)).astimezone(UTC)
        if nxt > until:
            return out
        out.append(nxt)
        last = nxt.astimezone(ZoneInfo(zone))


def timer_of(spec: convert.TimerSpec) -> Timer:
    return parse_timer(spec.timer, kind=spec.kind, tz=spec.tz)


#: (minute, hour, day_of_month, month_of_year, day_of_week), kind, canonical timer.
CRONTABS = [
    (("*/15", "*", "*", "*", "*"), "cron", "*/15 * * * *"),
    (("0", "9", "*", "*", "mon-fri"), "cron", "0 9 * * 1-5"),
    (("30", "8-17/3", "*", "*", "*"), "cron", "30 8-17/3 * * *"),
    (("0,30", "22-2", "*", "*", "sat,sun"), "cron", "*/30 0-2,22-23 * * 0,6"),
    (("5", "4", "*/10", "jan-mar,oct", "*"), "cron", "5 4 */10 1-3,10 *"),
    (("0", "0", "1-31", "*", "sunday"), "cron", "0 0 * * 0"),
    # Both day fields restricted: Celery ANDs them, so a calendar timer.
    (("0", "9", "1-7", "*", "mon"), "calendar", "Mon *-*-01..07 09:00:00"),
    (("0", "0", "13", "*", "fri"), "calendar", "Fri *-*-13 00:00:00"),
    (("15", "12", "1,15", "*", "sun,wed"), "calendar", "Wed,Sun *-*-01,15 12:15:00"),
    (("*/20", "6-8", "*/2", "feb", "sat"), "calendar", "Sat *-02-01..31/2 06..08:00..40/20:00"),
]


@pytest.mark.parametrize(
    ("fields", "kind", "expected"), CRONTABS, ids=[" ".join(c[0]) for c in CRONTABS]
)
@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo"])
def test_crontab_fires_as_celery_does(
    fields: tuple[str, ...], kind: str, expected: str, zone: str
) -> None:
    spec = convert.crontab_timer(*fields, zone)
    assert (spec.timer, spec.kind, spec.tz) == (expected, kind, zone)
    assert spec.values() == {"timer": expected, "kind": kind, "tz": zone}
    # Dense crontabs over a few weeks, sparse ones over years (leap years included).
    start = datetime(2026, 1, 1, 0, 7, tzinfo=UTC)
    span = (
        timedelta(days=20)
        if fields[0].startswith("*/") and fields[1] == "*"
        else timedelta(days=800)
    )
    expected_fires = celery_fires(fields, zone, start, start + span)
    assert len(expected_fires) >= 3
    ours = list(fires(timer_of(spec), start, until=start + span))
    assert ours == expected_fires


def test_the_and_rule_differs_from_cron() -> None:
    """What the calendar timer avoids: cron would fire on every day 1-7 and every Monday."""
    spec = convert.crontab_timer("0", "9", "1-7", "*", "mon", "UTC")
    start = datetime(2026, 4, 1, tzinfo=UTC)
    got = [t.date().isoformat() for t in fires(timer_of(spec), start, limit=3)]
    assert got == ["2026-04-06", "2026-05-04", "2026-06-01"]
    cron = parse_timer("0 9 1-7 * 1", kind="cron", tz="UTC")
    assert len(list(fires(cron, start, until=datetime(2026, 5, 1, tzinfo=UTC)))) > 3


def test_crontab_accepts_what_celery_accepts() -> None:
    assert convert.crontab_timer(0, {9, 17}, "*", "*", "Mon-Fri", "UTC").timer == "0 9,17 * * 1-5"
    assert convert.crontab_timer("0", "9", "*", "*", "fri-mon", "UTC").timer == "0 9 * * 0-1,5-6"
    assert convert.crontab_timer(" 0 ", "9, 10", "*", "*", "*", "UTC").timer == "0 9-10 * * *"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (("*/0", "*", "*", "*", "*"), "crontab minute '*/0' cannot be translated"),
        (("0", "24", "*", "*", "*"), "crontab hour '24' cannot be translated"),
        (("0", "9", "*", "*", "xyz"), "crontab day_of_week 'xyz' cannot be translated"),
        (("0", "9", "0", "*", "*"), "crontab day_of_month '0'"),
        (("0", "9", "*", "13", "*"), "crontab month_of_year '13'"),
        (("0", "9", "", "*", "*"), None),  # empty means every day, as Celery's '*'
        (("0", "9", "31", "2", "*"), "never occurs"),
        ((True, "9", "*", "*", "*"), "crontab minute True"),
        (("0", "9", [1, "x"], "*", "*"), "day_of_month"),
    ],
)
def test_crontab_refusals_name_the_field(fields: tuple[Any, ...], message: str | None) -> None:
    if message is None:
        assert convert.crontab_timer(*fields, "UTC").timer == "0 9 * * *"
        return
    with pytest.raises(ValueError, match=message.replace("*", r"\*")):
        convert.crontab_timer(*fields, "UTC")


def test_crontab_unknown_zone_is_refused() -> None:
    with pytest.raises(ValueError, match="Mars/Olympus"):
        convert.crontab_timer("0", "9", "*", "*", "*", "Mars/Olympus")


# -- intervals, instants --------------------------------------------------------------------


def test_interval_canonical_form_and_origin() -> None:
    assert convert.interval_timer(5400, None) == convert.TimerSpec("every 1h30m", "interval", None)
    assert convert.interval_timer(14 * 86400.0, None).timer == "every 2w"
    origin = datetime(2026, 3, 1, 10, 0, 0, 250000, tzinfo=timezone(timedelta(hours=2)))
    spec = convert.interval_timer(60, origin)
    assert spec.timer == "every 1m from 2026-03-01T08:00:00.250000Z"
    assert list(fires(timer_of(spec), origin, limit=2)) == [
        origin + timedelta(minutes=1), origin + timedelta(minutes=2)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("seconds", "message"),
    [(0.5, "whole number of seconds"), (90.5, r"e\.g\. 90s|e\.g\. 91s"), (0, "at least 1"),
     (float("nan"), "whole number"), (367 * 86400, "366 days")],
)  # fmt: skip
def test_interval_refusals_give_the_fix(seconds: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        convert.interval_timer(seconds, None)


def test_naive_instants_are_refused() -> None:
    with pytest.raises(ValueError, match="no zone"):
        convert.interval_timer(60, datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="no zone"):
        convert.once_timer(datetime(2026, 1, 1))


def test_once_is_the_instant_in_utc() -> None:
    at = datetime(2026, 12, 1, 9, tzinfo=ZoneInfo("Europe/Berlin"))
    spec = convert.once_timer(at)
    assert spec == convert.TimerSpec("2026-12-01T08:00:00Z", "once", None)
    assert list(fires(timer_of(spec), at - timedelta(days=1))) == [at]


# -- Celery schedule objects ----------------------------------------------------------------


def test_schedule_objects() -> None:
    last = datetime(2026, 5, 1, 10, 0, 3, tzinfo=UTC)
    every = convert.schedule_timer(schedule(timedelta(minutes=10)), "UTC", last_run_at=last)
    assert every.timer == "every 10m from 2026-05-01T10:00:03Z"
    assert convert.schedule_timer(30, "UTC").timer == "every 30s"
    assert convert.schedule_timer(timedelta(hours=2), "UTC", last_run_at=last).timer == (
        "every 2h from 2026-05-01T10:00:03Z"
    )
    assert convert.schedule_timer("Mon 09:00", "Europe/Berlin") == convert.TimerSpec(
        "Mon *-*-* 09:00:00", "calendar", "Europe/Berlin"
    )
    cron = convert.schedule_timer(crontab(0, 9, "mon", "1-7"), "Europe/Berlin")
    assert cron == convert.TimerSpec("Mon *-*-01..07 09:00:00", "calendar", "Europe/Berlin")
    # A crontab bound to an app is read in that app's zone.
    bound = convert.schedule_timer(crontab(0, 9, app=_app("Asia/Tokyo")), "UTC")
    assert (bound.timer, bound.tz) == ("0 9 * * *", "Asia/Tokyo")


def test_relative_schedule_is_celerys_rounded_grid() -> None:
    last = datetime(2026, 5, 1, 10, 12, 30, tzinfo=UTC)
    spec = convert.schedule_timer(
        schedule(timedelta(hours=1), relative=True), "UTC", last_run_at=last
    )
    # Celery: the next fire is last + 1h rounded down to the hour; then every hour.
    assert list(fires(timer_of(spec), last, limit=2)) == [
        datetime(2026, 5, 1, 11, tzinfo=UTC), datetime(2026, 5, 1, 12, tzinfo=UTC)
    ]  # fmt: skip
    with pytest.raises(ValueError, match="rounds each fire down to the hour"):
        convert.schedule_timer(schedule(timedelta(minutes=90), relative=True), "UTC")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (solar("sunrise", 89.9, 13.4), "latitude must be a number of degrees"),
        (crontab(0, 9, nowfun=lambda: datetime.now(UTC)), "nowfun"),
        (object(), "cannot convert a builtins.object schedule"),
        (True, "not a schedule"),
        (0.25, "whole number of seconds"),
        ("*/0 * * * *", "0"),
    ],
)
def test_schedule_refusals(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        convert.schedule_timer(value, "UTC")


def test_timer_from_entry_uses_the_and_rule_and_names_the_entry() -> None:
    timer = timer_from_entry("first-monday", crontab(0, 9, "mon", "1-7"), "Europe/Berlin")
    assert (str(timer), timer.kind, timer.tz_name) == (
        "Mon *-*-01..07 09:00:00", "calendar", "Europe/Berlin"
    )  # fmt: skip
    assert str(timer_from_entry("n", 60.0, "UTC")) == "every 1m"
    sun = timer_from_entry("sun", solar("sunset", 1, 2), "UTC")
    assert (str(sun), sun.kind) == ("sunset 1 2", "solar")
    with pytest.raises(ValueError, match="beat_schedule entry 'pole': the latitude"):
        timer_from_entry("pole", solar("sunset", 90, 2), "UTC")
    with pytest.raises(ValueError, match=r"beat_schedule entry 'half': interval 0\.5s"):
        timer_from_entry("half", 0.5, "UTC")


# -- RedBeat's rrule --------------------------------------------------------------------------

INDIA = timezone(timedelta(hours=5, minutes=30))
BERLIN_WINTER = datetime(2026, 1, 5, 8, 30, 15, 123456, tzinfo=timezone(timedelta(hours=1)))

RRULES: list[tuple[str, dict[str, Any], str]] = [
    ("every-15-minutes", {"freq": MINUTELY, "interval": 15}, "every 15m from 2026-01-05T07:30:15Z"),
    ("every-2-hours", {"freq": HOURLY, "interval": 2}, "every 2h from 2026-01-05T07:30:15Z"),
    ("daily-default-time", {"freq": DAILY}, "*-*-* 08:30:15"),
    ("twice-daily", {"freq": DAILY, "byhour": [8, 20], "byminute": 0, "bysecond": 0},
     "*-*-* 08,20:00:00"),
    ("weekly-default-day", {"freq": WEEKLY}, "Mon *-*-* 08:30:15"),
    ("weekly-mon-fri", {"freq": WEEKLY, "byweekday": [MO, FR], "byhour": 9, "byminute": 0,
                        "bysecond": 0}, "Mon,Fri *-*-* 09:00:00"),
    ("first-monday", {"freq": MONTHLY, "byweekday": MO(+1), "byhour": 9, "byminute": 0,
                      "bysecond": 0}, "Mon *-*-01..07 09:00:00"),
    ("third-thursday", {"freq": MONTHLY, "byweekday": TH(3)}, "Thu *-*-15..21 08:30:15"),
    ("monthly-and", {"freq": MONTHLY, "bymonthday": [1, 15], "byweekday": [FR]},
     "Fri *-*-01,15 08:30:15"),
    ("yearly", {"freq": YEARLY, "bymonth": 3, "bymonthday": 14}, "*-03-14 08:30:15"),
    ("yearly-default", {"freq": YEARLY}, "*-01-05 08:30:15"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "expected"), [r[1:] for r in RRULES], ids=[r[0] for r in RRULES]
)
def test_rrule_fires_as_dateutil_does(fields: dict[str, Any], expected: str) -> None:
    rule = rrule(dtstart=BERLIN_WINTER, app=_app("UTC"), **fields)
    spec = convert.schedule_timer(rule, "UTC")
    assert spec.timer == expected
    timer = timer_of(spec)
    cursor, theirs, ours = rule.dtstart - timedelta(microseconds=1), [], []
    ours = list(fires(timer, rule.rrule._dtstart - timedelta(microseconds=1), limit=40))
    cursor = rule.rrule._dtstart - timedelta(microseconds=1)
    for _ in range(40):
        cursor = rule.rrule.after(cursor)
        theirs.append(cursor.astimezone(UTC))
    assert ours == theirs


def test_rrule_zone_is_dtstarts() -> None:
    fixed = convert.RRule(freq=DAILY, dtstart=BERLIN_WINTER)
    assert convert.rrule_timer(fixed).tz == "Etc/GMT-1"
    named = convert.RRule(
        freq=DAILY, dtstart=datetime(2026, 7, 1, 9, tzinfo=ZoneInfo("Europe/Berlin"))
    )
    assert convert.rrule_timer(named) == convert.TimerSpec(
        "*-*-* 09:00:00", "calendar", "Europe/Berlin"
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"freq": DAILY, "count": 3}, "rrule count cannot be expressed yet"),
        ({"freq": DAILY, "until": datetime(2027, 1, 1, tzinfo=UTC)}, "rrule until cannot"),
        ({"freq": DAILY, "interval": 2}, "interval 2"),
        ({"freq": MONTHLY, "bysetpos": [1]}, "bysetpos"),
        ({"freq": MONTHLY, "byweekday": ((0, -1),)}, "n-th weekdays"),
        ({"freq": MONTHLY, "bymonthday": [-1]}, "end of the month"),
        ({"freq": HOURLY, "byminute": [0]}, "HOURLY rrule with byminute"),
        ({"freq": MINUTELY, "dtstart": datetime(2026, 1, 1, tzinfo=ZoneInfo("Europe/Berlin"))},
         "fixed UTC offset"),
        ({"freq": DAILY, "dtstart": datetime(2026, 1, 1, tzinfo=INDIA)},
         r"\+0530 is not a whole number of hours"),
        ({"freq": "FORTNIGHTLY"}, "freq 'FORTNIGHTLY'"),
    ],
)  # fmt: skip
def test_rrule_refusals_name_the_rule(fields: dict[str, Any], message: str) -> None:
    values = {"dtstart": BERLIN_WINTER, **fields}
    with pytest.raises(ValueError, match=message):
        convert.rrule_timer(convert.RRule(**values))
