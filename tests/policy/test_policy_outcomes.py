"""Per-task health as tables: failures in a row, last success, late by, the fold, the filter."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from timeline import T0

from celery_cronstore.policy.outcomes import (
    OutcomeFacts,
    TaskHealth,
    consecutive_failures,
    fold,
    health,
    parse_failing,
)
from celery_cronstore.records import EPOCH


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


S, F, M, K, T, A, L, D, E, P = (
    "succeeded", "failed", "missed", "skipped", "timed_out", "abandoned", "lost", "dropped",
    "expired", "published",
)  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "walk", "expected"),
    [
        ([], 50, (0, False)),
        ([(S, 1)], 50, (0, False)),
        ([(F, 1), (F, 1), (S, 1), (F, 1)], 50, (2, False)),
        # Every bad end counts; a missed row counts its grid points.
        ([(F, 1), (T, 1), (A, 1), (L, 1), (D, 1), (E, 1), (M, 4), (S, 1)], 50, (10, False)),
        # Skipped and in-flight fires neither count nor end the run.
        ([(P, 1), (F, 1), (K, 1), (F, 1), (S, 1)], 50, (2, False)),
        # Never a success: the whole (short) ledger.
        ([(F, 1), (F, 1), (F, 1)], 50, (3, False)),
        # The walk ends inside the run: "at least".
        ([(F, 1)] * 5, 3, (3, True)),
        # Exactly the walk and nothing beyond: the whole ledger was seen.
        ([(F, 1)] * 3, 3, (3, False)),
        # The success lies just inside the walk.
        ([(F, 1), (F, 1), (S, 1), (F, 1)], 3, (2, False)),
        # Nothing bad in the walk, older rows beyond it: zero, not "at least".
        ([(K, 1), (K, 1), (F, 1)], 2, (0, False)),
    ],
)
def test_consecutive_failures(
    rows: list[tuple[str, int]], walk: int, expected: tuple[int, bool]
) -> None:
    assert consecutive_failures(rows, walk) == expected


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        # No fire yet, planned in the future: nothing to say.
        (OutcomeFacts(enabled=True, next_run=at(60)), TaskHealth()),
        # Sent 2 s after its time; last success and failures as read.
        (
            OutcomeFacts(
                enabled=True,
                next_run=at(60),
                newest_fire=at(0),
                newest_sent=at(2),
                success_fire=at(-60),
                success_at=at(-55),
                bad_in_row=1,
            ),
            TaskHealth(consecutive_failures=1, last_success=at(-55), late_by=2.0),
        ),
        # next_run 31 s past (grace 30): overdue, measured from next_run.
        (
            OutcomeFacts(enabled=True, next_run=at(-31), newest_fire=at(-91), newest_sent=at(-90)),
            TaskHealth(late_by=31.0, overdue=True),
        ),
        # 29 s past: within the grace, the newest fire's lateness instead.
        (
            OutcomeFacts(enabled=True, next_run=at(-29), newest_fire=at(-89), newest_sent=at(-88)),
            TaskHealth(late_by=1.0),
        ),
        # Disabled, or never planned (the epoch), or no future fire: never overdue.
        (OutcomeFacts(enabled=False, next_run=at(-3600)), TaskHealth()),
        (OutcomeFacts(enabled=True, next_run=EPOCH), TaskHealth()),
        (OutcomeFacts(enabled=True, next_run=None), TaskHealth()),
        # The newest fire did not run (missed): no lateness to show.
        (OutcomeFacts(enabled=True, next_run=at(60), newest_fire=at(0)), TaskHealth()),
        # Published before its time (claimed ahead, clock skew): never negative.
        (
            OutcomeFacts(enabled=True, next_run=at(60), newest_fire=at(0), newest_sent=at(-0.1)),
            TaskHealth(late_by=0.0),
        ),
        # The run reaches past the walk with no success inside it: at least.
        (
            OutcomeFacts(enabled=True, next_run=at(60), bad_in_row=50, walk_start=at(-3000)),
            TaskHealth(consecutive_failures=50, at_least=True),
        ),
        # The success is older than the walk's oldest row: at least.
        (
            OutcomeFacts(
                enabled=True,
                next_run=at(60),
                bad_in_row=50,
                walk_start=at(-3000),
                success_fire=at(-4000),
                success_at=at(-3990),
            ),
            TaskHealth(consecutive_failures=50, at_least=True, last_success=at(-3990)),
        ),
        # The success is inside the walk: an exact count.
        (
            OutcomeFacts(
                enabled=True,
                next_run=at(60),
                bad_in_row=3,
                walk_start=at(-3000),
                success_fire=at(-200),
                success_at=at(-190),
            ),
            TaskHealth(consecutive_failures=3, last_success=at(-190)),
        ),
    ],
)
def test_health(facts: OutcomeFacts, expected: TaskHealth) -> None:
    assert health(facts, T0, grace=30.0) == expected


def test_failing_and_its_text() -> None:
    assert not TaskHealth().failing
    assert TaskHealth(consecutive_failures=2).failing
    assert TaskHealth(consecutive_failures=2).failures_text == "2"
    assert TaskHealth(consecutive_failures=50, at_least=True).failures_text == "50+"


def test_fold_keeps_failing_tasks_first_then_names() -> None:
    healths = {
        1: TaskHealth(),
        2: TaskHealth(consecutive_failures=1),
        3: TaskHealth(),
        4: TaskHealth(consecutive_failures=7),
        5: TaskHealth(),
    }
    names = {1: "e", 2: "d", 3: "a", 4: "z", 5: "b"}
    assert fold(healths, names, 3) == ([4, 2, 3], [5, 1])
    assert fold(healths, names, 10) == ([4, 2, 3, 5, 1], [])
    assert fold(healths, names, 0) == ([], [4, 2, 3, 5, 1])


@pytest.mark.parametrize(
    ("text", "expected"),
    [("yes", True), ("no", False), ("", None), (None, None), (" YES ", True)],
)
def test_failing_filter_accepts(text: str | None, expected: bool | None) -> None:
    assert parse_failing(text) is expected


@pytest.mark.parametrize("text", ["maybe", "1", "true", "ye s"])
def test_failing_filter_refuses_naming_itself(text: str) -> None:
    with pytest.raises(ValueError, match=r"failing must be yes, no or empty \(any task\), got"):
        parse_failing(text)
