"""Pause with a note and pause until (issue 25): table tests of
:mod:`celery_cronstore.policy.pause` (what resuming does with the fires held back) and of
how an edit and the stray check treat a paused task."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest
from task_rows import periodic_task
from timeline import T0

from celery_cronstore import policy
from celery_cronstore.policy import pause
from celery_cronstore.records import PeriodicTask
from celery_cronstore.states import FireState
from celery_cronstore.timers import parse_timer

HOURLY = parse_timer("0 * * * *", kind="cron", tz="UTC")
H = timedelta(hours=1)


def paused(**changes: object) -> PeriodicTask:
    values: dict[str, object] = {
        "name": "p",
        "timer": "0 * * * *",
        "timer_kind": "cron",
        "tz": "UTC",
        "paused_at": T0 + timedelta(minutes=10),  # after the noon fire
        "paused_by": "alice",
        "paused_note": "db migration",
        "paused_until": None,
        "next_run": None,
        "last_fire": T0,
    }
    values.update(changes)
    return periodic_task(**values)


@pytest.mark.parametrize(
    ("until", "resume", "problem"),
    [
        (None, "skip", None),
        (T0 + H, "newest", None),
        (T0, "skip", "is not in the future"),
        (T0 - H, "skip", "is not in the future"),
        (None, "later", "resume must be one of skip, newest, got 'later'"),
    ],
)
def test_what_a_pause_may_ask(until: datetime | None, resume: str, problem: str | None) -> None:
    found = pause.pause_problem(until, resume, T0)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found


def test_the_pause_is_said_with_who_when_why_and_until() -> None:
    assert pause.paused_text(paused(paused_at=None)) is None
    text = pause.paused_text(paused(paused_until=T0 + 5 * H, paused_resume="newest"))
    assert text == (
        f"paused by alice at {(T0 + timedelta(minutes=10)).isoformat()} until "
        f"{(T0 + 5 * H).isoformat()} (then newest): db migration"
    )
    bare = pause.paused_text(paused(paused_by=None, paused_note=None))
    assert bare == f"paused at {(T0 + timedelta(minutes=10)).isoformat()} until resumed (then skip)"


@pytest.mark.parametrize(
    ("now", "mode", "missed", "next_run", "last_fire"),
    [
        # Resumed before any fire was held back: nothing missed, the next grid point.
        (T0 + timedelta(minutes=30), "skip", None, T0 + H, T0),
        (T0 + timedelta(minutes=30), "newest", None, T0 + H, T0),
        # Three fires held back (13:00, 14:00, 15:00).
        (
            T0 + 3 * H + timedelta(minutes=5),
            "skip",
            (T0 + H, T0 + 3 * H, 3),
            T0 + 4 * H,
            T0 + 3 * H,
        ),
        (
            T0 + 3 * H + timedelta(minutes=5),
            "newest",
            (T0 + H, T0 + 2 * H, 2),
            T0 + 3 * H,
            T0 + 2 * H,
        ),
        # One fire held back: newest sends it, nothing missed.
        (T0 + H + timedelta(minutes=5), "newest", None, T0 + H, T0),
    ],
)
def test_resuming_skips_or_plans_the_newest_held_back_fire(
    now: datetime,
    mode: str,
    missed: tuple[datetime, datetime, int] | None,
    next_run: datetime,
    last_fire: datetime,
) -> None:
    resumed = pause.resume_plan(paused(), HOURLY, now, mode)
    if missed is None:
        assert resumed.missed is None
    else:
        assert resumed.missed is not None
        entry = resumed.missed
        assert entry.state == FireState.SKIPPED  # on purpose: not a bad end
        assert (entry.fire_time, entry.fire_until or entry.fire_time, entry.fire_count) == missed
        assert entry.reason is not None
        assert "the task was paused by alice (db migration)" in entry.reason
    assert (resumed.next_run, resumed.last_fire) == (next_run, last_fire)


def test_a_planned_newest_fire_is_then_claimed_by_beats_plan() -> None:
    now = T0 + 3 * H + timedelta(minutes=5)
    resumed = pause.resume_plan(paused(), HOURLY, now, "newest")
    task = paused(
        paused_at=None, next_run=resumed.next_run, last_fire=resumed.last_fire, paused_note=None
    )
    plan = policy.plan(
        task,
        HOURLY,
        now,
        lambda: None,
        node="b1",
        lease=timedelta(seconds=30),
        grace=timedelta(seconds=30),
    )
    assert [c.fire_time for c in plan.claims] == [T0 + 3 * H]
    assert plan.update.next_run == T0 + 4 * H


def test_resuming_keeps_inside_the_bounds_and_refuses_a_task_not_paused() -> None:
    now = T0 + 5 * H + timedelta(minutes=5)
    bounded = pause.resume_plan(paused(end_at=T0 + 2 * H), HOURLY, now, "skip")
    assert bounded.missed is not None
    assert (bounded.missed.fire_time, bounded.missed.fire_count) == (T0 + H, 2)
    assert bounded.next_run is None  # past its end
    with pytest.raises(ValueError, match="is not paused"):
        pause.resume_plan(paused(paused_at=None), HOURLY, now, "skip")


def test_an_edit_keeps_a_paused_task_paused_and_the_stray_check_leaves_it() -> None:
    task = paused(paused_until=T0 + 5 * H, next_run=T0 + 5 * H)
    edited = policy.edit_plan(task, {"timer": "*/5 * * * *"}, T0 + H, timer=HOURLY)
    assert edited.next_run == T0 + 5 * H
    assert policy.stray_next_run(task, T0 + H) is None
    forever = dataclasses.replace(task, paused_until=None, next_run=None)
    assert policy.stray_next_run(forever, T0 + H) is None
