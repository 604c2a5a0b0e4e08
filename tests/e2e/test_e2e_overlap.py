"""Overlap policies ``buffer_one`` and ``replace`` with three real beats and a real
prefork worker (issue 25).

A CronTask runs 5 s and fires every 3 s. Under ``buffer_one`` its runs never overlap:
the fire due while one runs waits ``buffered`` and starts within a beat poll of the
previous run's end, and the one due after it is ``skipped``. Under ``replace`` each new
fire ends the running one: it is recorded ``replaced``, the worker terminates it (no end
is recorded), and the new one starts on time.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from processes import beat, celery_env, deliveries, running, wait_for, worker

from celery_cronstore.states import FireState
from celery_cronstore.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.serial]

RUN = 5.0
SECONDS = 30


def runs_of(got: list[dict[str, Any]], label: str) -> dict[str, dict[str, float]]:
    """Return {task id: {"start": at, "end": at}} of one task's runs."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for line in got:
        if line.get("args") == [label] and "phase" in line:
            out[line["task_id"]][line["phase"]] = line["at"]
    return out


def test_buffer_one_and_replace_with_three_beats(
    tmp_path: Path, redis_url: str, postgres_url: str
) -> None:
    store = Store(postgres_url)
    store.upgrade()
    with store.begin() as conn:
        for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    # Longer than the interval: the CronTask time box (half the interval) is lifted.
    common = {
        "task": "e2e.slow",
        "timer": "every 3s",
        "misfire_policy": "run_all",
        "options": {"soft_time_limit": 30},
    }
    store.add("buffered", args=["buffered", RUN], overlap_policy="buffer_one", **common)
    store.add("replaced", args=["replaced", RUN], overlap_policy="replace", **common)
    record = tmp_path / "record.jsonl"
    env = celery_env(redis_url, postgres_url, record, E2E_QUEUE=f"overlap-{uuid.uuid4().hex[:8]}")
    # Four processes: a replaced run's child is terminated and restarted meanwhile.
    prefork = [*worker("w1", pool="prefork"), "--concurrency", "4"]
    with running([prefork, beat(), beat(), beat()], env, tmp_path):
        wait_for(lambda: len(deliveries(record)) >= 2, 60, "the first runs", tmp_path)
        time.sleep(SECONDS)
        for name in ("buffered", "replaced"):
            store.disable(name)
        time.sleep(RUN + 2)
    got = deliveries(record)

    # buffer_one: runs one after another, each buffered one started soon after an end.
    buffered = sorted(runs_of(got, "buffered").values(), key=lambda r: r["start"])
    assert len(buffered) >= 4, buffered
    for before, after in itertools.pairwise(buffered):
        assert "end" in before, "a buffer_one run was cut short"
        assert after["start"] >= before["end"] - 0.05, "two buffer_one runs overlapped"
        assert after["start"] - before["end"] < 2.5, "a buffered fire waited too long"
    history = store.history("buffered", 1000)
    states = {f.state for f in history}
    assert FireState.SKIPPED in states
    skipped = [f.reason for f in history if f.state == FireState.SKIPPED]
    assert all(
        r == "not published: a fire is already buffered (overlap policy buffer_one)"
        for r in skipped
    )
    # Each ran to its end (recorded timed_out "ended cleanly": past half its interval).
    done = {f.task_id for f in history if f.state in (FireState.SUCCEEDED, FireState.TIMED_OUT)}
    assert len(done) >= 3, [(f.fire_time, f.state, f.reason) for f in history]

    # replace: every run but the last was ended by the next fire, and never ran to its end.
    replaced_runs = runs_of(got, "replaced")
    fires = {f.task_id: f for f in store.history("replaced", 1000)}
    ended_by_next = [fires[i] for i in replaced_runs if fires[i].state == FireState.REPLACED]
    assert len(ended_by_next) >= 4, {i: fires[i].state for i in replaced_runs}
    for fire in ended_by_next:
        assert "end" not in replaced_runs[fire.task_id], f"{fire.task_id} ran to its end"
        assert (fire.reason or "").startswith("replaced by fire ")
    starts = sorted(r["start"] for r in replaced_runs.values())
    # (The first two may start close together: fires queued while the worker started.)
    gaps = [b - a for a, b in itertools.pairwise(starts[1:])]
    assert all(2.0 < g < 4.5 for g in gaps), f"replace runs did not follow the grid: {gaps}"
    store.close()
