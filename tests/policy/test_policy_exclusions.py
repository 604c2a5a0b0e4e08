"""Exclusion calendars (issue 25): table tests of :mod:`celery_cronstore.policy.exclusions`
(days and spans in the task's zone, instant windows, public holidays from the holidays
library, refusals naming the bad token) and of how :func:`policy.plan` records an
excluded fire ``skipped`` without sending it or counting it as a run."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest
from task_rows import periodic_task

from celery_cronstore import policy
from celery_cronstore.policy.exclusions import (
    ExclusionError,
    calendar_names,
    excluded_by,
    parse_calendar,
)
from celery_cronstore.states import FireState
from celery_cronstore.timers import parse_timer

UTC = timezone.utc
XMAS = parse_calendar("xmas", ["2026-12-24..2026-12-26"])
WINDOW = parse_calendar("maint", ["2026-12-07T22:00:00Z..2026-12-08T02:00:00+00:00"])
BAVARIA = parse_calendar("by", [], holidays="de-by")


@pytest.mark.parametrize(
    ("calendar", "when", "zone", "why"),
    [
        (XMAS, datetime(2026, 12, 24, 8, tzinfo=UTC), "UTC", "2026-12-24 is excluded"),
        (XMAS, datetime(2026, 12, 26, 23, 30, tzinfo=UTC), "UTC", "2026-12-26 is excluded"),
        (XMAS, datetime(2026, 12, 27, 0, 0, tzinfo=UTC), "UTC", None),
        # 23:30 UTC on the 26th is the 27th in Berlin: the task's zone decides the day.
        (XMAS, datetime(2026, 12, 26, 23, 30, tzinfo=UTC), "Europe/Berlin", None),
        (
            XMAS,
            datetime(2026, 12, 23, 23, 30, tzinfo=UTC),
            "Europe/Berlin",
            "2026-12-24 is excluded",
        ),
        (WINDOW, datetime(2026, 12, 7, 22, 0, tzinfo=UTC), "Asia/Tokyo", "in the window"),
        (WINDOW, datetime(2026, 12, 8, 1, 59, 59, tzinfo=UTC), "UTC", "in the window"),
        (WINDOW, datetime(2026, 12, 8, 2, 0, tzinfo=UTC), "UTC", None),  # the end is out
        (BAVARIA, datetime(2026, 1, 6, 9, tzinfo=UTC), "Europe/Berlin", "Epiphany"),
        (BAVARIA, datetime(2026, 12, 25, 9, tzinfo=UTC), "Europe/Berlin", "Christmas"),
        (BAVARIA, datetime(2026, 12, 28, 9, tzinfo=UTC), "Europe/Berlin", None),
    ],
)
def test_what_a_calendar_excludes(
    calendar: object, when: datetime, zone: str, why: str | None
) -> None:
    found = excluded_by((calendar.name,), {calendar.name: calendar}, when, zone)  # type: ignore[attr-defined]
    if why is None:
        assert found is None
    else:
        assert found is not None
        assert why in found


@pytest.mark.parametrize(
    ("entries", "holidays", "message"),
    [
        (["2026-13-01"], None, "'2026-13-01' is not a day (YYYY-MM-DD)"),
        (["2026-12-26..2026-12-24"], None, "the span ends before it starts"),
        (["2026-12-07T22:00:00Z"], None, "a window needs two instants"),
        (["2026-12-07T22:00:00..2026-12-08T02:00:00Z"], None, "has no offset"),
        (["2026-12-08T02:00:00Z..2026-12-07T22:00:00Z"], None, "ends before it starts"),
        ([], "XX", "holidays 'XX': Country XX not available"),
        ([], "US-ZZ", "does not have subdivision ZZ"),
        ([], "united states", "give a country code"),
        ([], None, "is empty"),
        (["2026-12-25"] * 1001, None, "more than 1000"),
    ],
)
def test_a_bad_calendar_is_refused_naming_the_token(
    entries: list[str], holidays: str | None, message: str
) -> None:
    with pytest.raises(ExclusionError) as refused:
        parse_calendar("c", entries, holidays)
    assert message in str(refused.value)
    assert isinstance(refused.value, ValueError)


def test_task_calendar_names_and_a_missing_calendar() -> None:
    assert calendar_names(" a, b.c ,a ") == ("a", "b.c")
    assert calendar_names(None) == ()
    with pytest.raises(ExclusionError, match="'a b' is not a calendar name"):
        calendar_names("a b")
    with pytest.raises(ExclusionError, match="exclusion calendar 'gone' does not exist"):
        excluded_by(("gone",), {}, datetime(2026, 1, 1, tzinfo=UTC), "UTC")


def test_plan_records_an_excluded_fire_skipped_and_sends_the_others() -> None:
    daily = parse_timer("0 9 * * *", kind="cron", tz="UTC")
    first = datetime(2026, 12, 24, 9, tzinfo=UTC)
    task = periodic_task(
        name="d",
        timer="0 9 * * *",
        timer_kind="cron",
        tz="UTC",
        next_run=first,
        last_fire=first - timedelta(days=1),
        exclude="xmas",
        misfire_policy="run_all",
    )

    def plan_at(now: datetime) -> policy.Plan:
        return policy.plan(
            task,
            daily,
            now,
            lambda: None,
            node="b1",
            lease=timedelta(seconds=30),
            grace=timedelta(seconds=30),
            calendars={"xmas": XMAS},
        )

    result = plan_at(first + timedelta(days=3))  # 24, 25, 26 excluded; 27 sent
    assert [c.fire_time for c in result.claims] == [first + timedelta(days=3)]
    skipped = [
        (e.fire_time.date(), e.state) for e in result.entries if e.state != FireState.CLAIMED
    ]
    assert skipped == [(date(2026, 12, d), FireState.SKIPPED) for d in (24, 25, 26)]
    reasons = [e.reason for e in result.entries if e.state == FireState.SKIPPED]
    assert all(r is not None and "excluded by calendar 'xmas'" in r for r in reasons)
    assert result.update.runs == 1  # an excluded fire is not a run
    with pytest.raises(ExclusionError):
        policy.plan(
            task, daily, first, lambda: None, node="b1", lease=timedelta(30), grace=timedelta(30)
        )
