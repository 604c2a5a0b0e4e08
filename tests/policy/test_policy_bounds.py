"""Bounds (issue 25): ``start_at`` and ``end_at`` on any timer, table tests of
:mod:`celery_cronstore.policy.bounds` and of what planning, an edit and the stray check do
with them. The bounds are on nominal fire times; an ended task plans no further fire."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest
from task_rows import periodic_task
from timeline import T0

from celery_cronstore import policy
from celery_cronstore.policy import bounds
from celery_cronstore.records import PeriodicTask
from celery_cronstore.states import FireState
from celery_cronstore.timers import parse_timer

HOURLY = parse_timer("0 * * * *", kind="cron", tz="UTC")
H = timedelta(hours=1)
LEASE = timedelta(seconds=30)


def hourly(**changes: object) -> PeriodicTask:
    return periodic_task(name="b", timer="0 * * * *", timer_kind="cron", tz="UTC", **changes)


def plan_at(task: PeriodicTask, now: datetime) -> policy.Plan:
    return policy.plan(
        task, HOURLY, now, lambda: None, node="b1", lease=LEASE, grace=timedelta(seconds=30)
    )


@pytest.mark.parametrize(
    ("when", "start_at", "end_at", "expected"),
    [
        (T0, None, None, T0),
        (T0, T0 + 2 * H + timedelta(minutes=1), None, T0 + 3 * H),  # first point after start
        (T0, T0 + 2 * H, None, T0 + 2 * H),  # a point at start_at is inside
        (T0, None, T0, T0),  # a point at end_at is inside
        (T0 + H, None, T0, None),  # past the end
        (T0, T0 + 2 * H, T0 + 2 * H + timedelta(minutes=30), T0 + 2 * H),
        (T0, T0 + 2 * H + timedelta(minutes=1), T0 + 2 * H + timedelta(minutes=30), None),
        (None, None, None, None),
    ],
)
def test_bounded_keeps_grid_points_inside(
    when: datetime | None,
    start_at: datetime | None,
    end_at: datetime | None,
    expected: datetime | None,
) -> None:
    assert bounds.bounded(HOURLY, when, start_at, end_at) == expected


def test_an_end_must_come_after_the_start() -> None:
    assert bounds.bounds_problem(T0, T0 + H) is None
    assert bounds.bounds_problem(None, T0) is None
    problem = bounds.bounds_problem(T0 + H, T0 + H)
    assert problem is not None
    assert "is not after start_at" in problem


def test_a_task_starting_later_plans_its_first_fire_at_the_start() -> None:
    start = T0 + 5 * H + timedelta(minutes=10)
    assert policy.first_plan(HOURLY, T0, None, True, start_at=start) == T0 + 6 * H
    task = hourly(next_run=None, start_at=start)
    assert plan_at(task, T0).update.next_run == T0 + 6 * H
    # A row planned before the start (start_at set by raw SQL) waits for it too.
    early = hourly(next_run=T0, start_at=start)
    result = plan_at(early, T0)
    assert (result.claims, result.entries) == ([], [])
    assert result.update.next_run == T0 + 6 * H


def test_the_last_fire_is_the_last_point_at_or_before_the_end() -> None:
    task = hourly(next_run=T0, last_fire=T0 - H, end_at=T0 + timedelta(minutes=59))
    result = plan_at(task, T0)
    assert [c.fire_time for c in result.claims] == [T0]
    assert result.update.next_run is None  # ended
    ended = dataclasses.replace(task, next_run=None, last_fire=T0, total_run_count=1)
    end = (T0 + timedelta(minutes=59)).isoformat()
    assert bounds.ended(ended, T0 + H) == f"ended: its end_at {end} has passed"
    assert bounds.ended(ended, T0) is None  # before the end it is not "ended"


def test_after_downtime_nothing_past_the_end_is_sent_or_counted_missed() -> None:
    end = T0 + 3 * H
    task = hourly(next_run=T0, last_fire=T0 - H, end_at=end, misfire_policy="run_all")
    result = plan_at(task, T0 + 10 * H)
    assert [c.fire_time for c in result.claims] == [T0, T0 + H, T0 + 2 * H, T0 + 3 * H]
    assert [e.state for e in result.entries] == [FireState.CLAIMED] * 4
    assert result.update.next_run is None
    once = plan_at(dataclasses.replace(task, misfire_policy="run_once"), T0 + 10 * H)
    assert [c.fire_time for c in once.claims] == [end]
    [missed] = [e for e in once.entries if e.state == FireState.MISSED]
    assert (missed.fire_time, missed.fire_until, missed.fire_count) == (T0, T0 + 2 * H, 3)


def test_moving_the_end_later_plans_the_task_again() -> None:
    task = hourly(next_run=None, last_fire=T0, end_at=T0)
    edited = policy.edit_plan(
        task, {"end_at": T0 + 5 * H}, T0 + H + timedelta(minutes=5), timer=HOURLY
    )
    assert edited.replan
    assert edited.next_run == T0 + 2 * H
    cleared = policy.edit_plan(task, {"end_at": None}, T0 + H + timedelta(minutes=5), timer=HOURLY)
    assert cleared.next_run == T0 + 2 * H
    earlier = policy.edit_plan(
        hourly(next_run=T0 + 2 * H, last_fire=T0 + H),
        {"end_at": T0 + H},
        T0 + H + timedelta(minutes=5),
        timer=HOURLY,
    )
    assert earlier.next_run is None


def test_an_ended_or_not_yet_started_task_is_not_reported_as_set_by_hand() -> None:
    ended = hourly(next_run=None, last_fire=T0, end_at=T0)
    assert policy.stray_next_run(ended, T0 + 5 * H) is None
    waiting = hourly(next_run=T0 + 6 * H, start_at=T0 + 6 * H)
    assert policy.stray_next_run(waiting, T0) is None
    assert policy.stray_next_run(dataclasses.replace(waiting, start_at=None), T0) is not None
