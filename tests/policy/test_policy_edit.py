"""What an edit does to a task's planned fires, as tables: no database, no clock.

Each row is a task as the store read it (a base one, changed), the column values the edit
writes, the instant and the timer after the edit; :func:`~celery_cronstore.policy.edit_plan`
says whether the task is re-planned, its new ``next_run``, and which due fires no beat
claimed are recorded missed, and why.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from task_rows import periodic_task
from timeline import T0

from celery_cronstore.policy import EditPlan, edit_plan, first_plan, replans
from celery_cronstore.records import EPOCH, PeriodicTask
from celery_cronstore.timers import Timer, parse_timer

MINUTE = timedelta(minutes=1)
EVERY_MINUTE = parse_timer("every 1m")
EVERY_5M = parse_timer("every 5m")
#: A one-off instant an hour before T0.
PAST_ONCE = "2026-01-05T11:00:00Z"


def minutes(n: float) -> datetime:
    """Return the instant ``n`` minutes after T0."""
    return T0 + n * MINUTE


def make_task(**changes: Any) -> PeriodicTask:
    """Return an enabled ``every 1m`` task planned for T0, changed."""
    return periodic_task(**{"id": 7, "version": 3, **changes})


RETIMED = {"timer": "every 5m", "timer_kind": "interval", "tz": "UTC"}


@pytest.mark.parametrize(
    ("task", "values", "expected"),
    [
        pytest.param(make_task(), {}, False, id="nothing-written"),
        pytest.param(make_task(), {"description": "x", "args": "[1]"}, False, id="definition"),
        pytest.param(make_task(), {"misfire_policy": "skip"}, False, id="policy"),
        pytest.param(make_task(), {"timer": "every 1m", "tz": "UTC"}, False, id="same-timer"),
        pytest.param(make_task(), {"enabled": True}, False, id="enabled-again"),
        pytest.param(make_task(), {"timer": "every 5m"}, True, id="new-timer"),
        pytest.param(make_task(), {"timer_kind": "cron"}, True, id="new-kind"),
        pytest.param(make_task(), {"tz": "Europe/Berlin"}, True, id="new-zone"),
        pytest.param(make_task(), {"enabled": False}, True, id="disabled"),
        pytest.param(make_task(enabled=False), {"enabled": True}, True, id="enabled"),
        pytest.param(make_task(error="bad"), {"description": "x"}, True, id="in-error"),
    ],
)
def test_which_edits_replan(task: PeriodicTask, values: dict[str, Any], expected: bool) -> None:
    assert replans(task, values) is expected


def missed_of(plan: EditPlan) -> tuple[datetime, datetime | None, int, str] | None:
    """Return (first, until, count, reason) of the plan's missed entry."""
    if plan.missed is None:
        return None
    entry = plan.missed
    assert entry.state == "missed"
    assert (entry.periodic_task_id, entry.attempts) == (7, 0)
    return (entry.fire_time, entry.fire_until, entry.fire_count, str(entry.reason))


@pytest.mark.parametrize(
    ("task", "values", "now", "timer", "replan", "next_run", "missed", "why"),
    [
        pytest.param(
            make_task(),
            {"description": "x"},
            minutes(2.5),
            EVERY_MINUTE,
            False,
            None,
            None,
            None,
            id="definition-only-keeps-the-plan-and-the-due-fires",
        ),
        pytest.param(
            make_task(),
            {"enabled": False},
            minutes(2.5),
            EVERY_MINUTE,
            True,
            None,
            (T0, minutes(2), 3),
            "disabled",
            id="disabled-with-due-fires",
        ),
        pytest.param(
            make_task(),
            RETIMED,
            minutes(2.5),
            EVERY_5M,
            True,
            minutes(5),
            (T0, minutes(2), 3),
            "re-planned",
            id="retimed-with-due-fires",
        ),
        pytest.param(
            make_task(),
            {"enabled": False},
            T0,
            EVERY_MINUTE,
            True,
            None,
            (T0, None, 1),
            "disabled",
            id="one-fire-due-exactly-now",
        ),
        pytest.param(
            make_task(next_run=minutes(1)),
            RETIMED,
            minutes(0.5),
            EVERY_5M,
            True,
            minutes(5),
            None,
            None,
            id="nothing-due-yet",
        ),
        pytest.param(
            make_task(next_run=T0, last_fire=minutes(1)),
            {"enabled": False},
            minutes(2.5),
            EVERY_MINUTE,
            True,
            None,
            (minutes(2), None, 1),
            "disabled",
            id="points-in-the-ledger-are-not-counted-again",
        ),
        pytest.param(
            make_task(enabled=False, next_run=None, last_fire=minutes(-10)),
            {"enabled": True},
            minutes(2.5),
            EVERY_MINUTE,
            True,
            minutes(3),
            None,
            None,
            id="enabled-from-now-on",
        ),
        pytest.param(
            make_task(enabled=False, next_run=None),
            RETIMED,
            minutes(2.5),
            EVERY_5M,
            True,
            None,
            None,
            None,
            id="disabled-task-retimed-stays-unplanned",
        ),
        pytest.param(
            make_task(next_run=EPOCH),
            RETIMED,
            minutes(2.5),
            EVERY_5M,
            True,
            minutes(5),
            None,
            None,
            id="never-planned-row-has-no-due-fires",
        ),
        pytest.param(
            make_task(error="no such day", next_run=None),
            {"description": "fixed"},
            minutes(2.5),
            EVERY_MINUTE,
            True,
            minutes(3),
            None,
            None,
            id="task-in-error-planned-again",
        ),
        pytest.param(
            make_task(timer="bogus"),
            {"enabled": False},
            minutes(2.5),
            None,
            True,
            None,
            None,
            None,
            id="unreadable-timer-disabled",
        ),
        pytest.param(
            make_task(timer="bogus", enabled=False, next_run=None),
            {"enabled": True},
            minutes(2.5),
            None,
            True,
            EPOCH,
            None,
            None,
            id="unreadable-timer-enabled-left-to-beat",
        ),
        pytest.param(
            make_task(enabled=False, next_run=None),
            {"timer": PAST_ONCE, "timer_kind": "once", "enabled": True},
            minutes(2.5),
            parse_timer(PAST_ONCE),
            True,
            T0 - 60 * MINUTE,
            None,
            None,
            id="once-in-the-past-not-fired-is-planned-for-the-misfire-policy",
        ),
        pytest.param(
            make_task(enabled=False, next_run=None, last_fire=T0 - 60 * MINUTE),
            {"timer": PAST_ONCE, "timer_kind": "once", "enabled": True},
            minutes(2.5),
            parse_timer(PAST_ONCE),
            True,
            None,
            None,
            None,
            id="once-that-fired-fires-no-more",
        ),
    ],
)
def test_edit_plan(
    task: PeriodicTask,
    values: dict[str, Any],
    now: datetime,
    timer: Timer | None,
    replan: bool,
    next_run: datetime | None,
    missed: tuple[datetime, datetime | None, int] | None,
    why: str | None,
) -> None:
    plan = edit_plan(task, values, now, timer=timer)
    assert plan.replan is replan
    assert plan.next_run == next_run
    got = missed_of(plan)
    assert (got[:3] if got else None) == missed
    if got is not None:
        assert got[3].endswith(f"not published: the task was {why} before beat claimed them")
        newest = missed[1] or missed[0] if missed else None
        assert plan.last_fire == newest
    else:
        assert plan.last_fire is None
    assert plan.clear_error is (task.error is not None)


def test_values_name_only_what_the_plan_sets() -> None:
    assert EditPlan(replan=False).values() == {}
    assert EditPlan(replan=True, next_run=None).values() == {"next_run": None}
    fixed = EditPlan(replan=True, next_run=T0, last_fire=minutes(-1), clear_error=True)
    assert fixed.values() == {"error": None, "next_run": T0, "last_fire": minutes(-1)}


def test_a_long_outage_is_one_entry_counted_without_walking_it() -> None:
    # Two years of minutes: far past the walk limit; an interval grid is counted exactly.
    now = T0 + timedelta(days=730)
    plan = edit_plan(make_task(), {"enabled": False}, now, timer=EVERY_MINUTE)
    assert plan.missed is not None
    assert plan.missed.fire_count == 730 * 24 * 60 + 1
    assert plan.last_fire == now


@pytest.mark.parametrize(
    ("timer", "last_fire", "enabled", "expected"),
    [
        pytest.param(EVERY_MINUTE, None, True, minutes(3), id="next-grid-point"),
        pytest.param(EVERY_MINUTE, None, False, None, id="disabled"),
        pytest.param(None, None, True, EPOCH, id="unreadable-left-to-beat"),
        pytest.param(parse_timer(PAST_ONCE), None, True, T0 - 60 * MINUTE, id="once-due"),
        pytest.param(parse_timer(PAST_ONCE), T0 - 60 * MINUTE, True, None, id="once-fired"),
    ],
)
def test_first_plan(
    timer: Timer | None, last_fire: datetime | None, enabled: bool, expected: datetime | None
) -> None:
    assert first_plan(timer, minutes(2.5), last_fire, enabled) == expected
