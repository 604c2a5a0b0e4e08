"""Kind detection and dispatch through parse_timer."""

from __future__ import annotations

import pytest

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers import (
    CronTimer,
    IntervalTimer,
    OnceTimer,
    detect_kind,
    edit_kind,
    is_valid,
    parse_timer,
    shown_zone,
)


@pytest.mark.parametrize(
    ("expression", "kind"),
    [
        ("every 5m", "interval"),
        ("  Every 1h30m", "interval"),
        ("every", "interval"),
        ("@hourly", "cron"),
        ("@reboot", "cron"),
        ("2026-12-01T09:00:00Z", "once"),
        ("2026-12-01T09:00", "once"),
        ("*/5 * * * *", "cron"),
        ("0 9 * * * 30", "cron"),
        ("30 9 * * mon-fri", "cron"),
        ("*:0/5", "calendar"),
        ("Mon..Fri *-*-* 09:30", "calendar"),
        ("daily", "calendar"),
    ],
)
def test_detect_kind(expression: str, kind: str) -> None:
    assert detect_kind(expression) == kind


@pytest.mark.parametrize(
    ("expression", "cls"),
    [
        ("every 5m", IntervalTimer),
        ("@daily", CronTimer),
        ("*/5 * * * *", CronTimer),
        ("2026-12-01T09:00:00Z", OnceTimer),
    ],
)
def test_parse_timer_dispatches(expression: str, cls: type) -> None:
    timer = parse_timer(expression, tz="Europe/Berlin")
    assert isinstance(timer, cls)
    assert timer.tz_name == "Europe/Berlin"


def test_explicit_kind_wins() -> None:
    with pytest.raises(TimerSyntaxError):
        parse_timer("every 5m", kind="cron")


def test_reboot_is_detected_as_cron_and_refused() -> None:
    assert not is_valid("@reboot")
    with pytest.raises(TimerSyntaxError, match="@reboot"):
        parse_timer("@reboot")


@pytest.mark.parametrize("tz", [None, "UTC", "utc", "Z"])
def test_utc_spellings_give_one_zone_name(tz: str | None) -> None:
    assert parse_timer("*/5 * * * *", tz=tz).tz_name == "UTC"
    assert parse_timer("every 5m", tz=tz).tz_name == "UTC"
    assert parse_timer("2026-12-01T09:00:00Z", tz=tz).tz_name == "UTC"


@pytest.mark.parametrize(
    ("expression", "count"), [("*/5 * * *", 4), ("0 9 1 *", 4), ("0 9 * * * * *", 7)]
)
def test_a_crontab_line_of_the_wrong_size_says_cron_needs_five_or_six_fields(
    expression: str, count: int
) -> None:
    """Regression: a 4-field cron line was read as a calendar event ("expected '-' or '~' in
    the date")."""
    with pytest.raises(TimerSyntaxError, match=rf"cron needs 5 or 6 fields .* got {count}"):
        parse_timer(expression)


@pytest.mark.parametrize(
    ("given", "shown", "timer_changed", "expected"),
    [
        # The command line and the API: a kind is only given on purpose.
        (None, None, True, None),  # a new expression is detected afresh
        (None, None, False, "cron"),  # a zone-only edit keeps the stored kind
        ("cron", None, True, "cron"),  # given: honoured
        # A form posts back the kind it showed (the stored one).
        ("cron", "cron", True, None),  # left as shown, the expression changed: detect
        ("cron", "cron", False, "cron"),
        ("", "cron", True, None),  # blanked ("detect"): detect
        ("interval", "cron", True, "interval"),  # changed on purpose: honoured
        ("interval", "cron", False, "interval"),
    ],
)
def test_edit_kind_is_one_rule_for_every_window(
    given: str | None, shown: str | None, timer_changed: bool, expected: str | None
) -> None:
    assert edit_kind(given, stored="cron", shown=shown, timer_changed=timer_changed) == expected


def test_a_named_kind_the_expression_is_not_of_names_both() -> None:
    with pytest.raises(TimerSyntaxError) as caught:
        parse_timer("every 5m", kind="cron")
    message = str(caught.value)
    assert message.startswith("the timer kind is cron but the expression reads as interval")
    assert "leave the kind blank" in message
    assert message.endswith("not 2 in 'every 5m'")  # the grammar's own complaint follows


@pytest.mark.parametrize(
    ("kind", "shown"),
    [
        ("interval", None),
        ("cron", "Asia/Tokyo"),
        ("calendar", "Asia/Tokyo"),
        ("once", "Asia/Tokyo"),
    ],
)
def test_only_an_interval_shows_no_zone(kind: str, shown: str | None) -> None:
    assert shown_zone(kind, "Asia/Tokyo") == shown
