"""The retention rule as plain tables: what a prune keeps, and why."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery import Celery
from timeline import T0

from celery_cronstore.config import Config
from celery_cronstore.policy.retention import (
    Candidate,
    cutoff,
    keep_reason,
    parse_age,
    prunable,
    retention,
)

CUT = T0 - timedelta(days=30)
OLD = CUT - timedelta(days=1)
H = timedelta(hours=1)


def row(
    fire_time: object = OLD,
    state: str = "succeeded",
    *,
    leased: bool = False,
    successor: object = OLD + H,
) -> Candidate:
    return Candidate(1, 7, fire_time, state, leased, successor)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("candidate", "cut", "oldest_in_flight", "reason"),
    [
        # ended fires older than the cutoff go, whatever way they ended
        (row(), CUT, None, None),
        (row(state="failed"), CUT, None, None),
        (row(state="missed"), CUT, None, None),
        (row(state="skipped"), CUT, None, None),
        (row(state="dropped"), CUT, None, None),
        (row(state="expired"), CUT, None, None),
        (row(state="timed_out"), CUT, None, None),
        (row(state="abandoned"), CUT, None, None),
        (row(state="published"), CUT, None, None),  # no start lease: a plain task's fire
        # 1. recent (at the cutoff counts as recent); no cutoff keeps everything
        (row(fire_time=CUT), CUT, None, "recent"),
        (row(fire_time=CUT + H), CUT, None, "recent"),
        (row(), None, None, "recent"),
        # 2. in flight
        (row(state="claimed"), CUT, None, "in flight"),
        (row(state="started"), CUT, None, "in flight"),
        (row(state="retrying"), CUT, None, "in flight"),
        (row(state="published", leased=True), CUT, None, "in flight"),
        # 3. the task's newest fire
        (row(successor=None), CUT, None, "newest"),
        # 4. the guard's reads: the fire right before the oldest in flight, and later ones
        (row(successor=OLD + H), CUT, OLD + H, "read by the guard"),
        (row(successor=OLD + H), CUT, OLD, "read by the guard"),
        (row(successor=T0), CUT, T0, "read by the guard"),  # a recent fire's previous
        (row(successor=OLD + H), CUT, OLD + 2 * H, None),
    ],
)
def test_keep_reason(
    candidate: Candidate, cut: object, oldest_in_flight: object, reason: str | None
) -> None:
    assert keep_reason(candidate, cut, oldest_in_flight) == reason  # type: ignore[arg-type]


def test_prunable_looks_up_each_rows_task() -> None:
    a = Candidate(1, 7, OLD, "succeeded", False, OLD + H)
    b = Candidate(2, 8, OLD, "succeeded", False, OLD + H)
    assert prunable([a, b], CUT, {8: OLD + H}) == [a]


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
