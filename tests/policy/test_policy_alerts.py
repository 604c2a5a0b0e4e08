"""The alert rules (``policy.alerts``): ``alert_after``'s grammar, when an episode opens,
updates and resolves, and the delivery back-off. Tables of (facts, open episodes,
expected changes); the instant is passed in."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from celery_cronstore.policy.alerts import (
    FAILING,
    OPEN,
    RESOLVE,
    SILENT,
    UPDATE,
    AlertSettings,
    BadEnd,
    Change,
    Episode,
    TaskFacts,
    evaluate,
    parse_alert_after,
    retry_delay,
)
from celery_cronstore.timers import parse_timer

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)  # a Monday
HOURLY = parse_timer("every 1h")
WEEKDAYS = parse_timer("Mon..Fri *-*-* 09:00")


def ago(**delta: float) -> datetime:
    return NOW - timedelta(**delta)


# -- alert_after ---------------------------------------------------------------------------

#: ``(text, canonical, periods, seconds)``.
PARSED = [
    ("3 periods", "3 periods", 3, None),
    ("1 period", "1 period", 1, None),
    (" 2  PERIODS ", "2 periods", 2, None),
    ("6h", "6h", None, 21600.0),
    ("1h30m", "1h30m", None, 5400.0),
    ("1h 30m", "1h30m", None, 5400.0),
    ("90 minutes", "90m", None, 5400.0),
    ("2 days 4 hours", "2d4h", None, 187200.0),
    ("1w", "1w", None, 604800.0),
    ("45s", "45s", None, 45.0),
]

#: ``(text, what the message says)``: the bad token and the fix.
REFUSED = [
    ("", "alert_after is empty: give a number of periods ('3 periods') or a duration"),
    ("soon", "cannot read 'soon': give a number of periods"),
    ("5x", "unknown unit 'x' in '5x': use w, d, h, m or s"),
    ("3 periods 2h", "unknown unit 'periods' in '3 periods' (periods take a number alone"),
    ("0 periods", "the number of periods must be 1..1000"),
    ("1001 periods", "the number of periods must be 1..1000"),
    ("0h", "is no time at all"),
    ("1h1h", "the unit 'h' is given twice"),
    ("400d", "is longer than 366 days: shorten it"),
    ("6h!", "cannot read '!'"),
]


@pytest.mark.parametrize(("text", "canonical", "periods", "seconds"), PARSED)
def test_alert_after_reads(text: str, canonical: str, periods: int | None, seconds: Any) -> None:
    parsed = parse_alert_after(text)
    assert (str(parsed), parsed.periods, parsed.seconds) == (canonical, periods, seconds)
    assert parse_alert_after(str(parsed)) == parsed  # the canonical form reads back


@pytest.mark.parametrize(("text", "message"), REFUSED)
def test_alert_after_refuses_naming_the_token(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="alert_after") as caught:
        parse_alert_after(text)
    assert message in str(caught.value)


# -- episodes -------------------------------------------------------------------------------


def facts(**changes: Any) -> TaskFacts:
    """An enabled hourly task, edited long ago, whose newest fire succeeded an hour ago."""
    base = TaskFacts(
        id=1,
        name="poll",
        enabled=True,
        timer=HOURLY,
        alert_after=None,
        changed_at=ago(days=30),
        last_success=ago(hours=1),
    )
    return dataclasses.replace(base, **changes)


def episode(kind: str, count: int = 3, reason: str | None = "r") -> Episode:
    return Episode(
        id=7,
        periodic_task_id=1,
        name="poll",
        kind=kind,
        opened_at=ago(hours=2),
        resolved_at=None,
        reason=reason,
        count=count,
        sent_at=None,
        resolve_sent_at=None,
        attempts=0,
        next_attempt_at=None,
        last_error=None,
    )


FAILED = BadEnd("failed", ago(minutes=0), "RuntimeError: upstream returned 503")
BAD_REASON = (
    "3 bad end(s) in a row; newest failed (fire of 2026-03-02T12:00:00Z): "
    "RuntimeError: upstream returned 503"
)

# (case, facts, open episodes, settings, expected (action, kind, count) and reason words)
CASES: list[tuple[str, TaskFacts, list[Episode], AlertSettings, list[tuple[str, str, int]]]] = [
    ("healthy: nothing", facts(), [], AlertSettings(), []),
    (
        "two bad ends: under the threshold",
        facts(bad_run=2, newest_bad=FAILED),
        [],
        AlertSettings(),
        [],
    ),
    (
        "three bad ends open a failing episode",
        facts(bad_run=3, newest_bad=FAILED),
        [],
        AlertSettings(),
        [(OPEN, FAILING, 3)],
    ),
    (
        "with failures 1 the first bad end opens one (missed, dropped, abandoned...)",
        facts(bad_run=1, newest_bad=BadEnd("missed", NOW)),
        [],
        AlertSettings(failures=1),
        [(OPEN, FAILING, 1)],
    ),
    (
        "an open episode is not opened again: its count follows",
        facts(bad_run=5, newest_bad=FAILED),
        [episode(FAILING, count=3)],
        AlertSettings(),
        [(UPDATE, FAILING, 5)],
    ),
    (
        "an open episode with the same count and reason: nothing",
        facts(bad_run=3, newest_bad=FAILED),
        [episode(FAILING, count=3, reason=BAD_REASON)],
        AlertSettings(),
        [],
    ),
    (
        "a success resolves the failing episode",
        facts(bad_run=0),
        [episode(FAILING)],
        AlertSettings(),
        [(RESOLVE, FAILING, 0)],
    ),
    (
        "one bad end after opening keeps it open (only a success resolves)",
        facts(bad_run=1, newest_bad=FAILED),
        [episode(FAILING, count=1, reason="x")],
        AlertSettings(),
        [(UPDATE, FAILING, 1)],
    ),
    (
        "a disabled task resolves what is open and opens nothing",
        facts(enabled=False, bad_run=9, newest_bad=FAILED, last_success=ago(days=9)),
        [episode(FAILING), episode(SILENT)],
        AlertSettings(after="1 period"),
        [(RESOLVE, FAILING, 0), (RESOLVE, SILENT, 0)],
    ),
    (
        "no alert_after anywhere: no switch",
        facts(last_success=ago(days=9)),
        [],
        AlertSettings(),
        [],
    ),
    (
        "3 periods: silent once the 4th fire after the success is due",
        facts(last_success=ago(hours=4), alert_after="3 periods"),
        [],
        AlertSettings(),
        [(OPEN, SILENT, 4)],
    ),
    (
        "3 periods: the 3rd fire after the success (due now) may still succeed",
        facts(last_success=ago(hours=3), alert_after="3 periods"),
        [],
        AlertSettings(),
        [],
    ),
    (
        "the default switch applies to a task without its own",
        facts(last_success=ago(hours=7)),
        [],
        AlertSettings(after="6h"),
        [(OPEN, SILENT, 7)],
    ),
    (
        "the task's own switch wins over the default",
        facts(last_success=ago(hours=7), alert_after="12h"),
        [],
        AlertSettings(after="6h"),
        [],
    ),
    (
        "never succeeded: counted from the last edit",
        facts(last_success=None, changed_at=ago(hours=3)),
        [],
        AlertSettings(after="2 periods"),
        [(OPEN, SILENT, 3)],
    ),
    (
        "an edit starts the switch afresh",
        facts(last_success=ago(days=8), changed_at=ago(minutes=30)),
        [],
        AlertSettings(after="2 periods"),
        [],
    ),
    (
        "calendar periods skip the weekend: Friday's success, Monday noon, 1 period",
        facts(
            timer=WEEKDAYS,
            last_success=datetime(2026, 2, 27, 9, 0, tzinfo=timezone.utc),
        ),
        [],
        AlertSettings(after="1 period"),
        [],
    ),
    (
        "calendar periods: Thursday's success, Monday noon, 1 period: silent",
        facts(
            timer=WEEKDAYS,
            last_success=datetime(2026, 2, 26, 9, 0, tzinfo=timezone.utc),
        ),
        [],
        AlertSettings(after="1 period"),
        [(OPEN, SILENT, 2)],
    ),
    (
        "a timer with no next fire is never silent by periods",
        facts(timer=None, last_success=ago(days=30)),
        [],
        AlertSettings(after="1 period"),
        [],
    ),
    (
        "a success resolves the silent episode",
        facts(last_success=ago(minutes=5)),
        [episode(SILENT)],
        AlertSettings(after="2 periods"),
        [(RESOLVE, SILENT, 0)],
    ),
    (
        "failing and silent at once: two episodes",
        facts(last_success=ago(hours=5), bad_run=4, newest_bad=FAILED),
        [],
        AlertSettings(after="3 periods"),
        [(OPEN, FAILING, 4), (OPEN, SILENT, 5)],
    ),
    (
        "bad alert_after written by raw SQL: no switch (never an exception)",
        facts(last_success=ago(days=3), alert_after="whenever"),
        [],
        AlertSettings(after="1h"),
        [],
    ),
]


@pytest.mark.parametrize(
    ("case", "task", "open_", "settings", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_episodes_open_update_and_resolve(
    case: str,
    task: TaskFacts,
    open_: list[Episode],
    settings: AlertSettings,
    expected: list[tuple[str, str, int]],
) -> None:
    changes = evaluate(task, {e.kind: e for e in open_}, settings, NOW)
    assert [(c.action, c.kind, c.count) for c in changes] == expected
    for change in changes:
        assert (change.reason is None) == (change.action == RESOLVE)


def test_the_reasons_say_what_and_since_when() -> None:
    (failing,) = evaluate(facts(bad_run=3, newest_bad=FAILED), {}, AlertSettings(), NOW)
    assert failing == Change(OPEN, FAILING, BAD_REASON, 3)
    (silent,) = evaluate(
        facts(last_success=ago(hours=4)), {}, AlertSettings(after="3 periods"), NOW
    )
    assert silent.reason == (
        "no success since the fire of 2026-03-02T08:00:00Z "
        "(4 fire(s) due since; alert_after 3 periods)"
    )


def test_a_long_reason_is_bounded() -> None:
    huge = BadEnd("failed", NOW, "x" * 10_000)
    (change,) = evaluate(facts(bad_run=3, newest_bad=huge), {}, AlertSettings(), NOW)
    assert change.reason is not None
    assert len(change.reason) == 2000


def test_the_silent_count_is_bounded() -> None:
    task = facts(timer=parse_timer("every 1s"), last_success=ago(days=2))
    (change,) = evaluate(task, {}, AlertSettings(after="3 periods"), NOW)
    assert change.count == 100
    assert "(100+ fire(s) due since" in (change.reason or "")


def test_the_open_delivery_goes_before_the_resolve() -> None:
    fresh = episode(FAILING)
    assert fresh.pending == OPEN
    resolved_unsent = dataclasses.replace(fresh, resolved_at=NOW)
    assert resolved_unsent.pending == OPEN  # never a resolve the receiver was not told of
    sent = dataclasses.replace(resolved_unsent, sent_at=NOW)
    assert sent.pending == RESOLVE
    assert dataclasses.replace(sent, resolve_sent_at=NOW).pending is None
    assert dataclasses.replace(fresh, sent_at=NOW).pending is None


@pytest.mark.parametrize(
    ("attempts", "delay"),
    [(0, 10.0), (1, 10.0), (2, 20.0), (3, 40.0), (9, 2560.0), (10, 3600.0), (500, 3600.0)],
)
def test_retries_back_off_doubling_to_an_hour(attempts: int, delay: float) -> None:
    assert retry_delay(attempts) == delay
