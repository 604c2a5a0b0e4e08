"""The registry of timer kinds: the one list that parsing, detection and the windows read."""

from __future__ import annotations

import pytest

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers import (
    KINDS,
    TIMER_KINDS,
    TIMERS,
    detect_kind,
    is_valid,
    parse_timer,
)
from celery_cronstore.timers.kinds import DETECTION


def test_the_names_are_the_registry_in_order() -> None:
    assert TIMER_KINDS == tuple(TIMERS) == ("calendar", "cron", "interval", "once", "solar")
    assert KINDS == TIMER_KINDS  # the older name still answers
    assert all(TIMERS[name].name == name for name in TIMER_KINDS)


@pytest.mark.parametrize("name", TIMER_KINDS)
def test_each_example_is_detected_and_parsed_as_its_kind(name: str) -> None:
    kind = TIMERS[name]
    assert kind.summary
    assert "\n" not in kind.summary
    assert detect_kind(kind.example) == name
    timer = parse_timer(kind.example)
    assert timer.kind == name
    assert timer == kind.parse(kind.example, tz=None)


def test_detection_names_only_registered_kinds_and_always_answers() -> None:
    assert {rule.kind for rule in DETECTION} == set(TIMER_KINDS)
    assert DETECTION[-1].matches("anything at all")


def test_an_unknown_kind_names_the_registered_ones() -> None:
    with pytest.raises(TimerSyntaxError, match="expected one of calendar, cron, interval, once"):
        parse_timer("every 5m", kind="weekly")


def test_a_detected_kind_may_name_the_kind_that_was_meant() -> None:
    with pytest.raises(TimerSyntaxError, match="cron needs 5 or 6 fields"):
        parse_timer("0 9 * *")
    with pytest.raises(TimerSyntaxError) as info:
        parse_timer("0 9 * *", kind="calendar")  # asked for: the calendar error stands
    assert "cron needs" not in str(info.value)


@pytest.mark.parametrize(
    ("expression", "kind"),
    [
        ("1" * 5_000 + " * * * *", "cron"),
        ("* * * * 1/" + "1" * 5_000, "cron"),
        ("* * * * 1-" + "1" * 5_000, "cron"),
        ("0 0 * * * " + "1" * 5_000, "cron"),
        ("every " + "1" * 5_000 + "m", "interval"),
        ("every 5m from " + "1" * 5_000, "interval"),
        ("2026-01-01T00:00:00." + "1" * 5_000 + "Z", "once"),
        ("*-*-" + "1" * 5_000, "calendar"),
        ("@" + "1" * 5_000, "calendar"),
    ],
)
def test_huge_digit_strings_are_syntax_errors_in_every_kind(expression: str, kind: str) -> None:
    # Issue 25: past 4,300 digits int() raises a plain ValueError; every kind must refuse
    # such a number with its own error, and is_valid() must answer instead of raising.
    with pytest.raises(TimerSyntaxError):
        parse_timer(expression, kind=kind)
    assert not is_valid(expression, kind=kind)
    assert not is_valid(expression)


def test_interval_with_many_leading_zeros_is_its_value() -> None:
    assert str(parse_timer("every " + "0" * 5_000 + "5m")) == "every 5m"
