"""The retention rule as plain tables: what a prune keeps, and why."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from celery import Celery
from timeline import T0

from celery_cronstore.config import Config
from celery_cronstore.policy.retention import (
    Candidate,
    TaskLedger,
    cutoff,
    keep_reason,
    parse_age,
    prunable,
    retention,
    worth_a_pass,
)

CUT = T0 - timedelta(days=30)
OLD = CUT - timedelta(days=1)
H = timedelta(hours=1)


def row(fire_time: datetime = OLD, state: str = "succeeded", *, leased: bool = False) -> Candidate:
    return Candidate(1, 7, fire_time, state, leased)


def ledger(
    newest: datetime = OLD + H,
    in_flight: datetime | None = None,
    before_in_flight: datetime | None = None,
) -> TaskLedger:
    return TaskLedger(newest, in_flight, before_in_flight)


@pytest.mark.parametrize(
    ("candidate", "cut", "task", "reason"),
    [
        # ended fires older than the cutoff go, whatever way they ended
        (row(), CUT, ledger(), None),
        (row(state="failed"), CUT, ledger(), None),
        (row(state="missed"), CUT, ledger(), None),
        (row(state="skipped"), CUT, ledger(), None),
        (row(state="dropped"), CUT, ledger(), None),
        (row(state="expired"), CUT, ledger(), None),
        (row(state="timed_out"), CUT, ledger(), None),
        (row(state="abandoned"), CUT, ledger(), None),
        (row(state="published"), CUT, ledger(), None),  # no start lease: a plain task's fire
        # 1. recent (at the cutoff counts as recent); no cutoff keeps everything
        (row(CUT), CUT, ledger(T0), "recent"),
        (row(CUT + H), CUT, ledger(T0), "recent"),
        (row(), None, ledger(), "recent"),
        # 2. in flight
        (row(state="claimed"), CUT, ledger(), "in flight"),
        (row(state="started"), CUT, ledger(), "in flight"),
        (row(state="retrying"), CUT, ledger(), "in flight"),
        (row(state="published", leased=True), CUT, ledger(), "in flight"),
        # 3. the task's newest fire (or a task the store could not describe)
        (row(), CUT, ledger(newest=OLD), "newest"),
        (row(), CUT, None, "newest"),
        # 4. the guard's reads: the fire right before the oldest in flight, and later ones
        (row(), CUT, ledger(T0, in_flight=OLD + H, before_in_flight=OLD), "read by the guard"),
        (
            row(),
            CUT,
            ledger(T0, in_flight=OLD - H, before_in_flight=OLD - 2 * H),
            "read by the guard",
        ),
        (row(), CUT, ledger(T0, in_flight=T0, before_in_flight=OLD), "read by the guard"),
        (row(), CUT, ledger(T0, in_flight=OLD), "read by the guard"),
        (row(), CUT, ledger(T0, in_flight=T0, before_in_flight=OLD + H), None),
    ],
)
def test_keep_reason(
    candidate: Candidate, cut: datetime | None, task: TaskLedger | None, reason: str | None
) -> None:
    assert keep_reason(candidate, cut, task) == reason


def test_prunable_looks_up_each_rows_task() -> None:
    a = Candidate(1, 7, OLD, "succeeded", False)
    b = Candidate(2, 8, OLD, "succeeded", False)
    c = Candidate(3, 9, OLD, "succeeded", False)
    tasks = {7: ledger(T0), 8: ledger(T0, in_flight=OLD + H, before_in_flight=OLD)}
    assert prunable([a, b, c], CUT, tasks) == [a]


@pytest.mark.parametrize(
    ("text", "age"),
    [
        ("30d", timedelta(days=30)),
        ("30", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("90m", timedelta(minutes=90)),
        ("3600s", timedelta(hours=1)),
        ("2w", timedelta(weeks=2)),
        ("1.5d", timedelta(hours=36)),
        (" 7D ", timedelta(days=7)),
    ],
)
def test_parse_age(text: str, age: timedelta) -> None:
    assert parse_age(text) == age


@pytest.mark.parametrize("text", ["", "d", "30y", "-1d", "0d", "30 days", "1e3"])
def test_parse_age_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="age"):
        parse_age(text)


@pytest.mark.parametrize(
    ("days", "keep"),
    [(30, timedelta(days=30)), (0.5, timedelta(hours=12)), (0, None), (None, None)],
)
def test_retention_and_cutoff(days: float | None, keep: timedelta | None) -> None:
    assert retention(days) == keep
    assert cutoff(T0, keep) == (None if keep is None else T0 - keep)


def test_retention_refuses_negative_days() -> None:
    with pytest.raises(ValueError, match="-1"):
        retention(-1)


@pytest.mark.parametrize(
    ("value", "keep"), [(None, timedelta(days=30)), (7, timedelta(days=7)), (0, None)]
)
def test_history_days_setting(value: int | None, keep: timedelta | None) -> None:
    app = Celery("t", set_as_current=False)
    app.conf.cronstore_history_days = value
    assert Config.from_app(app).history == keep


def test_history_days_refuses_a_negative_number() -> None:
    app = Celery("t", set_as_current=False)
    app.conf.cronstore_history_days = -1
    with pytest.raises(ValueError, match="cronstore_history_days must be zero or more"):
        Config.from_app(app)


@pytest.mark.parametrize(
    ("oldest", "cutoff", "worth"),
    [
        (None, T0, False),  # an empty ledger
        (T0, None, False),  # retention off
        (T0 - timedelta(seconds=1), T0, True),  # the first row in write order is old
        (T0, T0, False),  # exactly at the cutoff: kept
        (T0 + timedelta(days=1), T0, False),  # the first row is young: the pass would end
    ],
)
def test_worth_a_pass(oldest: datetime | None, cutoff: datetime | None, worth: bool) -> None:
    assert worth_a_pass(oldest, cutoff) is worth
