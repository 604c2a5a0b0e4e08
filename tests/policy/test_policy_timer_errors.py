"""A timer that cannot answer near some instant never kills its task (issue 13, item 5):
the due fire still goes out and the next plan is asked for further on."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from timeline import T0

from celery_cronstore.errors import TimerSearchError
from celery_cronstore.policy.past import PAST_STEPS, plan_past
from celery_cronstore.records import EPOCH, PeriodicTask
from celery_cronstore.timers import Timer

LEASE = timedelta(seconds=30)


class Blind(Timer):
    """Every minute, except that it cannot answer from inside ``[start, end)``."""

    kind = "calendar"
    tz_name = "UTC"

    def __init__(self, start: datetime, end: datetime, last: datetime | None = None) -> None:
        self.start, self.end, self.last = start, end, last

    def next_after(self, after: datetime) -> datetime | None:
        if self.start <= after < self.end:
            raise TimerSearchError(f"cannot search from {after.isoformat()}")
        following = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
        return None if self.last is not None and following > self.last else following

    def __str__(self) -> str:
        return "*:*"

    def describe(self) -> str:
        return "every minute"


def task(next_run: datetime | None) -> PeriodicTask:
    return PeriodicTask(
        id=7, name="t", task="x.y", args=[], kwargs={}, options={}, timer_kind="calendar",
        timer="*:*", tz="UTC", enabled=True, owner_type=None, owner_id=None, description="",
        source="api", next_run=next_run, last_fire=None, last_run=None, total_run_count=0,
        misfire_policy="run_once", misfire_limit=100, start_deadline=None,
        overlap_policy="allow", tolerance=None, max_retries=0, resume_state=None, error=None,
        version=1, created_at=T0, updated_at=T0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("blind_for", "expected_step"),
    [(timedelta(seconds=30), PAST_STEPS[0]), (timedelta(hours=2), PAST_STEPS[2])],
)
def test_the_due_fire_goes_out_and_the_plan_skips_the_blind_spot(
    blind_for: timedelta, expected_step: timedelta
) -> None:
    timer = Blind(T0, T0 + blind_for)
    error = TimerSearchError("cannot search")
    plan = plan_past(task(T0), timer, T0, error, node="b", lease=LEASE)
    assert plan is not None
    (claim,) = plan.claims
    assert (claim.fire_time, claim.interval) == (T0, None)  # no interval known: no time box
    (entry,) = plan.entries
    assert (entry.state, entry.fire_time) == ("claimed", T0)
    assert entry.reason is not None
    assert "the timer could not answer after this fire" in entry.reason
    assert plan.update.next_run == timer.next_after(T0 + expected_step)
    assert plan.update.error is None


def test_a_row_not_yet_due_only_gets_its_next_plan() -> None:
    timer = Blind(T0, T0 + timedelta(seconds=30))
    plan = plan_past(task(EPOCH), timer, T0, TimerSearchError("x"), node="b", lease=LEASE)
    assert plan is not None
    assert (plan.entries, plan.claims) == ([], [])
    assert plan.update.next_run == T0 + timedelta(minutes=2)


def test_no_answer_anywhere_or_no_future_fire_gives_none() -> None:
    always = Blind(
        datetime.min.replace(tzinfo=timezone.utc), datetime.max.replace(tzinfo=timezone.utc)
    )
    assert plan_past(task(T0), always, T0, TimerSearchError("x"), node="b", lease=LEASE) is None
    ended = Blind(T0, T0 + timedelta(seconds=30), last=T0)
    assert plan_past(task(T0), ended, T0, TimerSearchError("x"), node="b", lease=LEASE) is None
