"""The import/apply plan (pure): what a source read against what is stored, as a table."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from task_rows import periodic_task

from celery_cronstore import policy
from celery_cronstore.adopt.plan import make_plan
from celery_cronstore.adopt.records import Incoming, Refused
from celery_cronstore.records import EPOCH
from celery_cronstore.timers import parse_timer

UTC = timezone.utc
NOW = datetime(2026, 3, 2, 12, 0, 30, tzinfo=UTC)


def incoming(name: str = "report", **values: Any) -> Incoming:
    base = {"task": "app.report", "timer": "0 9 * * *", "kind": "cron", "tz": "Europe/Berlin"}
    return Incoming(name, f"row {name}", {**base, **values})


def stored(name: str = "report", **changes: Any) -> Any:
    base = {
        "name": name,
        "task": "app.report",
        "timer": "0 9 * * *",
        "timer_kind": "cron",
        "tz": "Europe/Berlin",
        "source": "dcb",
    }
    return periodic_task(**{**base, **changes})


def plan(reads: list[Any], current: dict[str, Any] | None = None, **options: Any) -> Any:
    return make_plan(reads, current or {}, source="dcb", default_tz="UTC", **options)


def actions(result: Any) -> list[tuple[str, str]]:
    return [(c.action, c.name) for c in result.changes]


def test_a_new_name_is_created_with_its_timer_in_canonical_form() -> None:
    result = plan([incoming(timer="0  9 * * *")])
    (change,) = result.changes
    assert change.action == "create"
    assert change.fields["timer"] == (None, "0 9 * * *")
    assert change.incoming is not None
    assert change.incoming.values["tz"] == "Europe/Berlin"
    assert result.counts()["create"] == 1


def test_the_same_task_again_is_unchanged_and_a_changed_field_an_update() -> None:
    current = {"report": stored()}
    assert actions(plan([incoming()], current)) == [("unchanged", "report")]
    changed = plan([incoming(args=[1], timer="0 10 * * *")], current)
    (change,) = changed.changes
    assert change.action == "update"
    assert change.fields == {"args": ([], [1]), "timer": ("0 9 * * *", "0 10 * * *")}
    assert "timer: '0 9 * * *' -> '0 10 * * *'" in change.line()


@pytest.mark.parametrize(
    ("read", "reason"),
    [
        (incoming(timer="*/0 * * * *"), "*/0"),
        (incoming(tz="Mars/Olympus"), "Mars/Olympus"),
        (incoming(args="not a list"), "args must be a list"),
        (incoming(misfire_policy="sometimes"), "misfire_policy must be one of"),
        (incoming(colour="red"), "unknown field(s) colour"),
        (Refused("sun", "row sun", "solar schedules are not supported yet"), "solar"),
    ],
)
def test_a_bad_row_is_refused_with_its_reason_and_the_rest_still_comes(
    read: Any, reason: str
) -> None:
    result = plan([read, incoming("fine")])
    assert actions(result) == [("refuse", read.name), ("create", "fine")]
    assert reason in result.changes[0].reason
    assert result.refused == [result.changes[0]]


def test_a_task_the_app_would_not_send_is_refused_by_the_check() -> None:
    def check(task: str, args: list[Any], kwargs: dict[str, Any]) -> str | None:
        return None if task == "app.report" else f"task {task!r} is not registered"

    result = plan([incoming(), incoming("other", task="app.gone")], check_task=check)
    assert actions(result) == [("create", "report"), ("refuse", "other")]
    assert "app.gone" in result.changes[1].reason


def test_a_stored_task_of_another_source_is_a_conflict_unless_apply_manages_all() -> None:
    current = {"report": stored(source="api")}
    result = plan([incoming(args=[2])], current)
    assert actions(result) == [("conflict", "report")]
    assert "left alone" in result.changes[0].reason
    managed = plan([incoming(args=[2])], current, manage_all=True)
    assert actions(managed) == [("update", "report")]


def test_a_name_read_twice_is_refused_the_second_time() -> None:
    result = plan([incoming(), incoming(args=[9])])
    assert actions(result) == [("create", "report"), ("refuse", "report")]
    assert "read twice" in result.changes[1].reason


def test_prune_removes_only_what_the_source_no_longer_names_among_its_own() -> None:
    current = {
        "report": stored(),
        "gone": stored("gone"),
        "mine": stored("mine", source="api"),
    }
    assert actions(plan([incoming()], current)) == [("unchanged", "report")]
    pruned = plan([incoming()], current, prune=True)
    assert actions(pruned) == [("unchanged", "report"), ("remove", "gone")]
    everything = plan([incoming()], current, prune=True, prunable=lambda task: True)
    assert actions(everything)[1:] == [("remove", "gone"), ("remove", "mine")]


def test_owner_ids_compare_as_the_text_the_store_keeps() -> None:
    current = {"report": stored(owner_type="tenant", owner_id="42")}
    assert actions(plan([incoming(owner=("tenant", 42))], current)) == [("unchanged", "report")]


# -- the first fire of an imported task (policy.adopted_plan) --------------------------------


def first(timer: str, *, last: datetime | None, start: datetime | None = None) -> Any:
    parsed = parse_timer(timer, tz="UTC")
    return policy.adopted_plan(parsed, NOW, last_run_at=last, start_at=start, enabled=True)


def test_the_first_fire_is_the_timer_s_next_one_after_the_old_last_run() -> None:
    ran = datetime(2026, 3, 2, 9, 0, 0, 412_000, tzinfo=UTC)  # the old beat sent at 09:00:00.4
    assert first("0 9 * * *", last=ran) == datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
    # a fire due while switching is kept in the past: beat's misfire policy catches it up
    assert first("0 * * * *", last=ran) == datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
    # without a last run: the first fire after now
    assert first("0 * * * *", last=None) == datetime(2026, 3, 2, 13, 0, tzinfo=UTC)


def test_a_one_off_that_already_ran_is_not_planned_and_start_at_is_honoured() -> None:
    instant = "2026-03-01T08:00:00Z"
    assert first(instant, last=datetime(2026, 3, 1, 8, 0, 1, tzinfo=UTC)) is None
    assert first(instant, last=None) == datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
    later = NOW + timedelta(days=2)
    assert first("0 9 * * *", last=None, start=later) == datetime(2026, 3, 5, 9, 0, tzinfo=UTC)
    at_start = datetime(2026, 3, 5, 9, 0, tzinfo=UTC)
    assert first("0 9 * * *", last=None, start=at_start) == at_start


def test_disabled_or_unreadable_timers_plan_as_every_other_window_does() -> None:
    parsed = parse_timer("0 9 * * *", tz="UTC")
    assert policy.adopted_plan(parsed, NOW, last_run_at=None, start_at=None, enabled=False) is None
    assert policy.adopted_plan(None, NOW, last_run_at=None, start_at=None, enabled=True) == EPOCH


def test_an_import_rerun_keeps_the_switch_and_the_interval_grid_it_came_over_with() -> None:
    """Disabling the task in the old scheduler hands it over: a rerun must not switch it
    off here, nor move its interval grid to the old scheduler's newer last run."""
    current = {
        "every": stored("every", timer="every 3s from 2026-03-02T11:00:00Z",
                        timer_kind="interval", tz="UTC"),
    }  # fmt: skip
    rerun = incoming("every", timer="every 3s", kind="interval", tz="UTC", enabled=False)
    assert actions(plan([rerun], current)) == [("unchanged", "every")]
    changed = incoming("every", timer="every 5s", kind="interval", tz="UTC")
    assert list(plan([changed], current).changes[0].fields) == ["timer"]
    # apply manages the whole definition, the enabled flag included
    applied = plan([rerun], current, manage_all=True)
    assert set(applied.changes[0].fields) == {"enabled", "timer"}
