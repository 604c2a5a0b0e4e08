"""Overlap policies (issue 25): table tests of what :func:`policy.plan` does with a due
fire while the previous one is in flight, under ``allow``, ``skip``, ``buffer_one`` and
``replace`` (the in-flight read is asked only when a policy needs it)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from task_rows import periodic_task
from timeline import T0

from celery_cronstore import policy
from celery_cronstore.policy import Running
from celery_cronstore.states import FireState
from celery_cronstore.timers import parse_timer

EVERY_MINUTE = parse_timer("every 1m")
M = timedelta(minutes=1)


def plan_with(
    overlap: str, held: Running | None, now: datetime = T0, **changes: object
) -> policy.Plan:
    asked: list[bool] = []

    def running() -> Running | None:
        asked.append(True)
        return held

    task = periodic_task(overlap_policy=overlap, next_run=T0, **changes)
    result = policy.plan(
        task,
        EVERY_MINUTE,
        now,
        running,
        node="b1",
        lease=timedelta(seconds=30),
        grace=timedelta(seconds=30),
    )
    assert len(asked) == (0 if overlap == "allow" else 1)
    return result


RUNNING = (T0 - M, FireState.STARTED)
BUFFERED = (T0 - M, FireState.BUFFERED)


@pytest.mark.parametrize(
    ("overlap", "held", "state", "claimed", "replaces"),
    [
        ("allow", RUNNING, FireState.CLAIMED, True, []),
        ("skip", None, FireState.CLAIMED, True, []),
        ("skip", RUNNING, FireState.SKIPPED, False, []),
        ("buffer_one", None, FireState.CLAIMED, True, []),
        ("buffer_one", RUNNING, FireState.BUFFERED, False, []),
        ("buffer_one", BUFFERED, FireState.SKIPPED, False, []),
        ("replace", None, FireState.CLAIMED, True, []),
        ("replace", RUNNING, FireState.CLAIMED, True, [T0 - M]),
    ],
)
def test_a_due_fire_under_each_overlap_policy(
    overlap: str,
    held: Running | None,
    state: str,
    claimed: bool,
    replaces: list[datetime],
) -> None:
    result = plan_with(overlap, held)
    assert [e.state for e in result.entries] == [state]
    assert [c.fire_time for c in result.claims] == ([T0] if claimed else [])
    assert [when for when, _ in result.replaces] == replaces
    assert result.update.runs == (1 if claimed else 0)


def test_buffer_one_buffers_one_of_several_due_fires_and_skips_the_rest() -> None:
    result = plan_with("buffer_one", RUNNING, T0 + 2 * M, misfire_policy="run_all")
    assert [(e.state, e.fire_time) for e in result.entries] == [
        (FireState.BUFFERED, T0),
        (FireState.SKIPPED, T0 + M),
        (FireState.SKIPPED, T0 + 2 * M),
    ]
    buffered = result.entries[0]
    assert buffered.lease_until is None
    assert buffered.reason == (
        f"waiting for fire {(T0 - M).isoformat()} (started) to end (overlap policy buffer_one)"
    )


def test_replace_sends_only_the_newest_of_several_due_fires() -> None:
    result = plan_with("replace", RUNNING, T0 + 2 * M, misfire_policy="run_all")
    assert [c.fire_time for c in result.claims] == [T0 + 2 * M]
    skipped = [e.fire_time for e in result.entries if e.state == FireState.SKIPPED]
    assert skipped == [T0, T0 + M]
    [(when, why)] = result.replaces
    assert when == T0 - M
    assert why == f"replaced by fire {(T0 + 2 * M).isoformat()} (overlap policy replace)"
