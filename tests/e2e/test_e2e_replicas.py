"""Three beat replicas on one database, 1-second timers: every fire published once.

Deliveries are counted at the worker by task id and fire time (the record file keeps
duplicates). The run length is CRONSTORE_E2E_SECONDS (default 60).
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from processes import beat, celery_env, deliveries, running, wait_for, window_delivered, worker

from celery_cronstore.store import Store

# serial: three beats and two workers must keep an unbroken 1-second grid for a minute.
pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.serial]

SECONDS = float(os.environ.get("CRONSTORE_E2E_SECONDS", "60"))
TIMERS = {
    "cal-1s": "*:*:*",
    "cal-1s-berlin": "*-*-* *:*:* Europe/Berlin",
    "int-1s": "every 1s",
    "int-2s": "every 2s",
    "cal-3s": "*:*:0/3",
}


@pytest.mark.parametrize(
    "store_kind",
    [
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ],
)
def test_three_replicas_publish_every_fire_exactly_once(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str, store_kind: str
) -> None:
    url = str(request.getfixturevalue(f"{store_kind}_url"))
    store = Store(url)
    store.upgrade()
    with store.begin() as conn:
        for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    for name, timer in TIMERS.items():
        store.add(name, task="e2e.record", timer=timer, args=[name])
    record = tmp_path / "record.jsonl"
    env = celery_env(redis_url, url, record, E2E_QUEUE=f"replicas-{uuid.uuid4().hex[:8]}")
    commands = [worker("w1", pool="threads"), worker("w2", pool="threads"), beat(), beat(), beat()]
    with running(commands, env, tmp_path):
        wait_for(lambda: len(deliveries(record)) >= 5, 40, "the first fires", tmp_path)
        start = store.now()
        time.sleep(SECONDS)
        end = store.now()
        # Every fire of the window is delivered before the disable: a delivery that comes
        # after the disable commits is refused by the worker's guard, as promised
        # (docs/reliability.md), and a loaded machine can hold one back a second or two.
        wait_for(
            lambda: window_delivered(store, TIMERS, record, start, end),
            30,
            "the window's fires to be delivered",
            tmp_path,
        )
        for name in TIMERS:
            store.disable(name)
        time.sleep(3)  # let anything published meanwhile arrive

    got = deliveries(record)
    per_id = Counter(d["task_id"] for d in got)
    doubled = {k: v for k, v in per_id.items() if v > 1}
    assert doubled == {}, f"delivered more than once: {doubled}"
    fires = {f.task_id: f for name in TIMERS for f in store.history(name, 10_000)}
    assert set(per_id) <= set(fires), "a delivery has no ledger row"
    beats = {f.claimed_by for f in fires.values()}
    assert len(beats) >= 2, f"only {beats} claimed: the replicas did not share the work"
    for name in TIMERS:
        # Inside the observed window every grid point is in the ledger exactly once...
        times = sorted(f.fire_time for f in fires.values() if f.name == name)
        assert len(times) == len(set(times))
        step = 3 if name == "cal-3s" else 2 if name == "int-2s" else 1
        window = [t for t in times if start <= t <= end]
        expected = int((end - start).total_seconds() // step) - 1
        assert len(window) >= expected, f"{name}: {len(window)} fires, expected ~{expected}"
        gaps = [b - a for a, b in itertools.pairwise(window)]
        assert all(g == timedelta(seconds=step) for g in gaps), f"{name} lost fires: {gaps}"
        # ... and each of them was delivered exactly once.
        delivered = {fires[i].fire_time for i in per_id if fires[i].name == name}
        assert set(window) <= delivered, f"{name}: fires published but never delivered"
    store.close()
