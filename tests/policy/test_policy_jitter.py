"""Jitter (issue 25): a fixed pseudo-random delay per task and fire, the same everywhere.

Table tests of :mod:`celery_cronstore.policy.jitter` and of what :func:`policy.plan`, the
edit re-plan, the stray check and the CronTask guard do with it: the ledger keeps the
nominal fire time, the row's ``next_run`` is the jittered send instant, a delay never
reaches the next fire, and a jittered fire is neither "early" nor "late" because of it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import datetime, timedelta

import pytest
from task_rows import periodic_task
from timeline import T0

from celery_cronstore import policy
from celery_cronstore.policy import jitter
from celery_cronstore.records import PeriodicTask
from celery_cronstore.states import FireState
from celery_cronstore.timers import Timer, parse_timer

HOURLY = parse_timer("0 * * * *", kind="cron", tz="UTC")
DAILY = parse_timer("0 2 * * *", kind="cron", tz="UTC")
EVERY_10S = parse_timer("every 10s")
LEASE = timedelta(seconds=30)


def task_of(timer: Timer, **changes: object) -> PeriodicTask:
    kind = "interval" if str(timer).startswith("every") else "cron"
    return periodic_task(
        id=3, name="report", timer=str(timer), timer_kind=kind, tz="UTC", **changes
    )


def plan_at(task: PeriodicTask, timer: Timer, now: datetime) -> policy.Plan:
    return policy.plan(
        task, timer, now, lambda: None, node="b1", lease=LEASE, grace=timedelta(seconds=30)
    )


# -- the delay ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jitter_s", "gap", "bound"),
    [
        (None, timedelta(hours=1), 0.0),
        (0.0, timedelta(hours=1), 0.0),
        (600.0, timedelta(hours=1), 600.0),  # the jitter bounds it
        (7200.0, timedelta(hours=1), 3600.0),  # the next fire bounds it
        (600.0, None, 600.0),  # no next fire: the jitter alone
        (5.0, timedelta(microseconds=1), 0.0),  # no room at all
    ],
)
def test_the_delay_is_below_the_jitter_and_the_gap(
    jitter_s: float | None, gap: timedelta | None, bound: float
) -> None:
    delays = [
        jitter.delay(f"t{i}", jitter_s, T0, None if gap is None else T0 + gap) for i in range(500)
    ]
    assert all(timedelta(0) <= d for d in delays)
    if bound == 0:
        assert set(delays) == {timedelta(0)}
    else:
        assert max(delays) < timedelta(seconds=bound)
        assert max(delays) > timedelta(seconds=bound * 0.9)  # it uses the whole range


def test_the_delay_is_fixed_per_task_and_fire_and_differs_between_them() -> None:
    one = jitter.delay("report", 3600, T0, None)
    assert jitter.delay("report", 3600, T0, None) == one  # every replica, every restart
    assert jitter.delay("report", 3600, T0.astimezone(), None) == one  # the instant counts
    assert jitter.delay("other", 3600, T0, None) != one
    assert jitter.delay("report", 3600, T0 + timedelta(days=1), None) != one


def test_five_thousand_tenants_at_two_are_spread_over_the_hour() -> None:
    night = T0.replace(hour=2)
    seconds = Counter(
        int(jitter.delay(f"tenant-{i}", 3600, night, night + timedelta(days=1)).total_seconds())
        for i in range(5000)
    )
    assert max(seconds) - min(seconds) > 3500
    assert max(seconds.values()) <= 10  # about 1.4 a second; never a crowd


@pytest.mark.parametrize("value", [-1.0, 604_801.0, 1e300])
def test_a_jitter_out_of_range_is_refused_with_the_range(value: float) -> None:
    problem = jitter.jitter_problem(value)
    assert problem is not None
    assert "from 0 to 604800 seconds" in problem


@pytest.mark.parametrize("timer", [HOURLY, DAILY, EVERY_10S])
@pytest.mark.parametrize("spread", [5.0, 600.0, 90_000.0])
def test_the_nominal_time_is_found_again_from_the_send_time(timer: Timer, spread: float) -> None:
    point = timer.next_after(T0)
    assert point is not None
    for _ in range(20):
        send = jitter.due("report", spread, timer, point)
        assert send is not None
        assert point <= send
        following = timer.next_after(point)
        assert following is not None
        assert send < following
        assert jitter.nominal("report", spread, timer, send, None) == point
        previous = timer.last_at_or_before(point - timedelta(microseconds=1))
        assert jitter.nominal("report", spread, timer, send, previous) == point
        point = following


def test_a_send_time_no_delay_explains_stands_for_the_next_unrecorded_point() -> None:
    # next_run set by hand between grid points: the newest point before it is due.
    hand = T0.replace(minute=0) + timedelta(minutes=7)
    assert jitter.nominal("report", 600, HOURLY, hand, None) == T0.replace(minute=0)
    # ... unless that one is recorded: then next_run stands for itself.
    assert jitter.nominal("report", 600, HOURLY, hand, T0.replace(minute=0)) == hand


# -- plan -----------------------------------------------------------------------------------


def test_a_jittered_fire_waits_for_its_delay_and_keeps_its_nominal_time() -> None:
    nominal = T0  # noon: an HOURLY grid point
    send = jitter.due("report", 1800, HOURLY, nominal)
    assert send is not None
    assert nominal < send < nominal + timedelta(seconds=1800)
    task = task_of(HOURLY, jitter=1800.0, next_run=send, last_fire=nominal - timedelta(hours=1))

    early = plan_at(task, HOURLY, send - timedelta(microseconds=1))
    assert (early.claims, early.entries) == ([], [])
    assert early.update.next_run == send  # unchanged: not sent yet

    sent = plan_at(task, HOURLY, send)
    [claim] = sent.claims
    assert claim.fire_time == nominal
    assert claim.task_id == policy.fire_task_id(task.id, task.name, nominal)
    assert claim.send_at == send
    assert [(e.state, e.fire_time) for e in sent.entries] == [(FireState.CLAIMED, nominal)]
    assert sent.update.last_fire == nominal
    assert sent.update.next_run == jitter.due("report", 1800, HOURLY, nominal + timedelta(hours=1))


def test_after_downtime_the_missed_count_and_the_newest_fire_use_nominal_times() -> None:
    nominal = T0
    task = task_of(
        HOURLY,
        jitter=1800.0,
        next_run=jitter.due("report", 1800, HOURLY, nominal),
        last_fire=nominal - timedelta(hours=1),
        misfire_policy="run_once",
    )
    now = nominal + timedelta(hours=5, seconds=1)  # 17:00:01, 17:00 not sent yet
    result = plan_at(task, HOURLY, now)
    newest_sent = max(
        n
        for n in (nominal + timedelta(hours=h) for h in range(6))
        if (jitter.due("report", 1800, HOURLY, n) or n) <= now
    )
    assert [c.fire_time for c in result.claims] == [newest_sent]
    missed = [e for e in result.entries if e.state == FireState.MISSED]
    hours = int((newest_sent - nominal) / timedelta(hours=1))
    if hours:
        assert missed[0].fire_time == nominal
        assert missed[0].fire_count == hours
    following = newest_sent + timedelta(hours=1)
    assert result.update.next_run == jitter.due("report", 1800, HOURLY, following)


def test_run_all_after_downtime_with_jitter_keeps_its_counts_right() -> None:
    task = task_of(
        EVERY_10S,
        jitter=5.0,
        next_run=T0,
        last_fire=T0 - timedelta(seconds=10),
        misfire_policy="run_all",
        misfire_limit=3,
    )
    now = T0 + timedelta(seconds=100)
    result = plan_at(task, EVERY_10S, now)
    sent = [c.fire_time for c in result.claims]
    assert len(sent) == 3
    missed = sum(e.fire_count for e in result.entries if e.state == FireState.MISSED)
    unsent = 0 if (jitter.due("report", 5, EVERY_10S, now) or now) <= now else 1
    assert len(sent) + missed == 11 - unsent
    assert all((c.send_at - c.fire_time) < timedelta(seconds=5) for c in result.claims)


def test_the_starting_deadline_and_expiry_count_from_the_send_time() -> None:
    send = jitter.due("report", 1800, HOURLY, T0)
    assert send is not None
    task = task_of(HOURLY, jitter=1800.0, next_run=send, start_deadline=60.0)
    [claim] = plan_at(task, HOURLY, send + timedelta(seconds=59)).claims
    assert claim.expires == send + timedelta(seconds=60)
    late = plan_at(task, HOURLY, send + timedelta(seconds=61))
    assert [e.state for e in late.entries] == [FireState.EXPIRED]


def test_a_new_or_edited_task_plans_its_first_send_time() -> None:
    first = policy.first_plan(HOURLY, T0, None, True, name="report", jitter=900.0)
    assert first == jitter.due("report", 900, HOURLY, T0 + timedelta(hours=1))
    assert first != T0 + timedelta(hours=1)
    edited = policy.edit_plan(
        task_of(HOURLY, next_run=T0 + timedelta(hours=1), last_fire=T0),
        {"jitter": 900.0},
        T0 + timedelta(minutes=1),
        timer=HOURLY,
    )
    assert edited.replan
    assert edited.next_run == first


def test_a_jittered_next_run_is_not_reported_as_set_by_hand() -> None:
    send = jitter.due("report", 1800, HOURLY, T0 + timedelta(hours=1))
    task = task_of(HOURLY, jitter=1800.0, next_run=send, last_fire=T0)
    assert policy.stray_next_run(task, T0 + timedelta(minutes=1)) is None
    # Past its nominal time, before its send: still as beat leaves it.
    assert policy.stray_next_run(task, T0 + timedelta(hours=1, seconds=1)) is None
    too_late = dataclasses.replace(task, next_run=T0 + timedelta(hours=3))
    assert policy.stray_next_run(too_late, T0 + timedelta(minutes=1)) is not None


# -- the CronTask guard ---------------------------------------------------------------------


def snapshot(now: datetime, last_run: datetime | None, **changes: object) -> policy.StartSnapshot:
    values: dict[str, object] = {
        "task_id": "x",
        "now": now,
        "retries": 0,
        "state": FireState.PUBLISHED,
        "fire_time": T0,
        "enabled": True,
        "start_deadline": None,
        "overlap_policy": "allow",
        "misfire_policy": "run_once",
        "last_run": last_run,
        "interval": 3600.0,
        "tolerance": 1.0,
        "running": lambda: None,
        "later_started": lambda: None,
        "previous_fire": lambda: T0 - timedelta(hours=1),
    }
    values.update(changes)
    return policy.StartSnapshot(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("delay_before", "delay_now", "spread", "decision"),
    [
        (1500, 100, 0.0, FireState.DROPPED),  # without jitter this bunching is "early"
        (1500, 100, 1800.0, FireState.STARTED),  # with it, it is two delays, not early
        (0, 0, 1800.0, FireState.STARTED),
    ],
)
def test_the_early_rule_allows_for_the_jitter(
    delay_before: int, delay_now: int, spread: float, decision: str
) -> None:
    last_run = T0 - timedelta(hours=1) + timedelta(seconds=delay_before)
    now = T0 + timedelta(seconds=delay_now)
    snap = snapshot(now, last_run, jitter=spread, delay=float(delay_now))
    assert policy.decide_start(snap).outcome == decision


def test_the_guards_deadline_counts_from_the_send_time() -> None:
    now = T0 + timedelta(seconds=1000)
    base: dict[str, object] = {"start_deadline": 60.0}
    on_time = snapshot(now, None, jitter=1800.0, delay=990.0, **base)
    assert policy.decide_start(on_time).outcome == FireState.STARTED
    late = snapshot(now, None, jitter=1800.0, delay=900.0, **base)
    assert policy.decide_start(late).outcome == FireState.EXPIRED
