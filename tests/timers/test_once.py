"""One-off timers: instants, zones, the DST gap and fold, canonical form."""

from __future__ import annotations

import pickle
from datetime import datetime, timezone

import pytest

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers import OnceTimer, parse_timer

UTC = timezone.utc


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "tz", "at", "canonical"),
    [
        ("2026-12-01T09:00:00+01:00", None, utc(2026, 12, 1, 8), "2026-12-01T08:00:00Z"),
        ("2026-12-01T09:00:00+0100", None, utc(2026, 12, 1, 8), "2026-12-01T08:00:00Z"),
        ("2026-12-01T08:00:00Z", None, utc(2026, 12, 1, 8), "2026-12-01T08:00:00Z"),
        ("2026-12-01t08:00z", None, utc(2026, 12, 1, 8), "2026-12-01T08:00:00Z"),
        ("2026-12-01T09:00", "Europe/Berlin", utc(2026, 12, 1, 8), "2026-12-01T08:00:00Z"),
        ("2026-12-01T09:00", None, utc(2026, 12, 1, 9), "2026-12-01T09:00:00Z"),
        (
            "2026-12-01T09:00:00-05:00",
            "Europe/Berlin",
            utc(2026, 12, 1, 14),
            "2026-12-01T14:00:00Z",
        ),
        (
            "2026-12-01T09:00:00.25Z",
            None,
            utc(2026, 12, 1, 9, 0, 0, 250000),
            "2026-12-01T09:00:00.250000Z",
        ),
        # An ambiguous wall time (Berlin falls back on 2026-10-25) means the first one.
        ("2026-10-25T02:30", "Europe/Berlin", utc(2026, 10, 25, 0, 30), "2026-10-25T00:30:00Z"),
        ("2026-11-01T01:30", "America/New_York", utc(2026, 11, 1, 5, 30), "2026-11-01T05:30:00Z"),
    ],
)
def test_parse(expression: str, tz: str | None, at: datetime, canonical: str) -> None:
    timer = OnceTimer.parse(expression, tz=tz)
    assert timer.at == at
    assert timer.at.tzinfo is UTC
    assert str(timer) == canonical
    assert parse_timer(str(timer), kind="once", tz=timer.tz_name) == timer


def test_next_after_fires_once() -> None:
    timer = OnceTimer.parse("2026-12-01T08:00:00Z")
    assert timer.next_after(utc(2026, 1, 1)) == utc(2026, 12, 1, 8)
    assert timer.next_after(utc(2026, 12, 1, 7, 59, 59, 999999)) == utc(2026, 12, 1, 8)
    assert timer.next_after(utc(2026, 12, 1, 8)) is None
    assert timer.next_after(utc(2027, 1, 1)) is None


def test_matches_only_the_instant() -> None:
    timer = OnceTimer.parse("2026-12-01T08:00:00Z")
    assert timer.matches(utc(2026, 12, 1, 8))
    assert not timer.matches(utc(2026, 12, 1, 8, 0, 1))


def test_describe_in_the_zone() -> None:
    assert (
        OnceTimer.parse("2026-12-01T09:00", tz="Europe/Berlin").describe()
        == "once at 2026-12-01 09:00 Europe/Berlin"
    )
    assert OnceTimer.parse("2026-12-01T09:00:30Z").describe() == "once at 2026-12-01 09:00:30 UTC"


def test_zone_is_kept() -> None:
    timer = OnceTimer.parse("2026-12-01T09:00:00Z", tz="Europe/Berlin")
    assert timer.tz_name == "Europe/Berlin"
    assert timer != OnceTimer.parse("2026-12-01T09:00:00Z")
    assert pickle.loads(pickle.dumps(timer)) == timer


def test_spring_gap_instant_is_refused_by_name() -> None:
    with pytest.raises(TimerSyntaxError, match="does not exist in Europe/Berlin") as info:
        OnceTimer.parse("2026-03-29T02:30", tz="Europe/Berlin")
    assert info.value.token == "2026-03-29T02:30"
    assert info.value.position == 0


def test_spring_gap_instant_in_new_york() -> None:
    with pytest.raises(TimerSyntaxError, match="does not exist"):
        OnceTimer.parse("2026-03-08T02:15", tz="America/New_York")


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("2026-12-01", "expected an ISO-8601 instant"),
        ("tomorrow", "expected an ISO-8601 instant"),
        ("2026-12-01T25:00", "invalid instant"),
        ("2026-02-29T10:00", "invalid instant"),
        ("2026-12-01T09:00+25:00", "UTC offset out of range"),
        ("9999-12-31T23:00-05:00", "invalid instant"),
        ("2026-12-01T09:00:00.1234567Z", "expected an ISO-8601 instant"),
    ],
)
def test_errors(expression: str, reason: str) -> None:
    with pytest.raises(TimerSyntaxError) as info:
        OnceTimer.parse(expression)
    assert info.value.reason.startswith(reason)
