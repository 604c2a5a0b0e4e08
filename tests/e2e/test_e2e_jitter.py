"""Jitter and bounds with three real beat replicas (issue 25): each fire sent once, at
its delay; a bounded task fires exactly the grid points between its start and its end.

Four plain tasks and two CronTasks fire every 10 s with ``jitter = 9``. Three beats share
one PostgreSQL store and a Redis broker; a worker records each delivery with its arrival
time and the fire-time header. Every grid point of the window is delivered exactly once,
carries its nominal time, and arrives after its nominal time plus the delay every replica
computes (and soon after it); no CronTask fire is dropped as "early" although two jittered
fires may come up to 9 s closer than their interval.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from processes import beat, celery_env, deliveries, running, wait_for, worker

from celery_cronstore.policy import jitter
from celery_cronstore.states import FireState
from celery_cronstore.store import Store
from celery_cronstore.timers import Timer, parse_timer

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.serial]

PLAIN = [f"plain-{i}" for i in range(4)]
GUARDED = [f"guarded-{i}" for i in range(2)]
SPREAD = 9.0
GRID = parse_timer("every 10s")
SECONDS = 45


def test_three_replicas_send_each_jittered_fire_once_after_its_delay(
    tmp_path: Path, redis_url: str, postgres_url: str
) -> None:
    store = Store(postgres_url)
    store.upgrade()
    with store.begin() as conn:
        for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    for name in PLAIN:
        store.add(name, task="e2e.record", timer="every 10s", args=[name], jitter=SPREAD)
    for name in GUARDED:
        store.add(name, task="e2e.guarded", timer="every 10s", args=[name], jitter=SPREAD)
    opens = store.now() + timedelta(seconds=40)  # after the processes are up
    closes = opens + timedelta(seconds=12)
    store.add(
        "bounded",
        task="e2e.record",
        timer="every 2s",
        args=["bounded"],
        start_at=opens,
        end_at=closes,
    )
    record = tmp_path / "record.jsonl"
    env = celery_env(redis_url, postgres_url, record, E2E_QUEUE=f"jitter-{uuid.uuid4().hex[:8]}")
    commands = [worker("w1", pool="threads"), beat(), beat(), beat()]
    with running(commands, env, tmp_path):
        wait_for(lambda: len(deliveries(record)) >= 6, 60, "the first fires", tmp_path)
        start = store.now()
        time.sleep(SECONDS)
        end = store.now()
        time.sleep(SPREAD + 3)  # the window's last fires are sent up to 9 s late
        while store.now() < closes + timedelta(seconds=3):  # the bounded task's end
            time.sleep(0.5)
        for name in PLAIN + GUARDED:
            store.disable(name)
        time.sleep(2)

    got = deliveries(record)
    per_id = Counter(d["task_id"] for d in got)
    assert {k: v for k, v in per_id.items() if v > 1} == {}, "delivered more than once"
    window = [p for p in _grid(start, end) if p + timedelta(seconds=SPREAD) < end]
    assert len(window) >= 3
    for name in PLAIN:
        arrivals = {
            datetime.fromisoformat(d["fire_time"]): d["at"] for d in got if d["args"] == [name]
        }
        delays = []
        for point in window:
            assert point in arrivals, f"{name}: fire {point} never delivered"
            send = jitter.due(name, SPREAD, GRID, point)
            assert send is not None
            lag = arrivals[point] - send.timestamp()
            assert -0.05 <= lag < 5, f"{name} {point}: arrived {lag:+.2f}s from its send time"
            delays.append(send - point)
        assert len(set(delays)) > 1  # the delay is per fire, not one per task
    for name in GUARDED:
        states = {f.fire_time: f.state for f in store.history(name, 1000)}
        for point in window:
            assert states.get(point) == FireState.SUCCEEDED, f"{name} {point}: {states.get(point)}"
    bounded = sorted(
        datetime.fromisoformat(d["fire_time"]) for d in got if d["args"] == ["bounded"]
    )
    # the grid points in [start_at, end_at], as stored (a grid point just before the
    # instant the test asked for is outside: the bound is exact to the microsecond)
    stored = store.get("bounded")
    assert stored.start_at is not None
    assert stored.end_at is not None
    inside = _grid(
        stored.start_at - timedelta(microseconds=1), stored.end_at, parse_timer("every 2s")
    )
    assert len(inside) >= 6
    assert bounded == inside, f"bounded task fired {bounded}, expected {inside}"
    assert store.get("bounded").next_run is None
    claimers = {f.claimed_by for name in PLAIN + GUARDED for f in store.history(name, 1000)}
    assert len(claimers) >= 2, f"only {claimers} claimed"
    store.close()


def _grid(start: datetime, end: datetime, grid: Timer = GRID) -> list[datetime]:
    points = []
    point = grid.next_after(start)
    while point is not None and point <= end:
        points.append(point)
        point = grid.next_after(point)
    return points
