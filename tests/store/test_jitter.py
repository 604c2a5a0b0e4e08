"""Jitter (issue 25) through the store and three claimers, on every backend.

Each fire is claimed once, by whichever of three replicas looks first, never before its
jittered send time; the ledger row keeps the nominal time and the deterministic task id;
the row's ``next_run`` is the next send time; an edit of the jitter re-plans; the field
reads back and is refused out of range with the range.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from timeline import T0, at

from celery_cronstore import policy
from celery_cronstore.fields import FieldValueError
from celery_cronstore.policy import jitter
from celery_cronstore.store import Claimer, Store
from celery_cronstore.testing import FrozenClock
from celery_cronstore.timers import parse_timer

EVERY_MINUTE = parse_timer("every 1m")


def test_three_replicas_claim_each_jittered_fire_once_at_its_send_time(
    store: Store, clock: FrozenClock
) -> None:
    names = [f"tenant-{i}" for i in range(12)]
    for name in names:
        store.add(name, task="t", timer="every 1m", jitter=50.0)
    replicas = [Claimer(store, f"b{i}") for i in range(3)]
    sends = {
        name: [jitter.due(name, 50.0, EVERY_MINUTE, T0 + timedelta(minutes=m)) for m in (1, 2)]
        for name in names
    }
    assert store.get("tenant-0").next_run == sends["tenant-0"][0]
    claimed: dict[str, list[tuple[str, str]]] = {name: [] for name in names}
    step = timedelta(seconds=1)
    now = T0
    while now <= T0 + timedelta(minutes=2, seconds=59):
        clock.set(now)
        for replica in replicas:
            for claim in replica.claim_due().claims:
                assert claim.send_at <= now  # never before its send time
                assert now - claim.send_at < step  # and on the tick it falls in
                claimed[claim.name].append((claim.fire_time.isoformat(), claim.task_id))
        now += step
    for name in names:
        task = store.get(name)
        nominal = [T0 + timedelta(minutes=m) for m in (1, 2)]
        assert claimed[name] == [
            (n.isoformat(), policy.fire_task_id(task.id, name, n)) for n in nominal
        ]
        ledger = [f.fire_time for f in store.history(name)]
        assert sorted(ledger) == nominal
        assert task.next_run == jitter.due(name, 50.0, EVERY_MINUTE, T0 + timedelta(minutes=3))
    delays = {sends[name][0] - (T0 + timedelta(minutes=1)) for name in names}
    assert len(delays) > 6  # the tenants are spread, not sent together


def test_editing_the_jitter_replans_and_bad_values_are_refused(
    store: Store, clock: FrozenClock
) -> None:
    store.add("r", task="t", timer="every 1m")
    assert store.get("r").next_run == at(60)
    clock.set(at(1))
    store.update("r", jitter=30.0)
    edited = store.get("r")
    assert edited.jitter == 30.0
    assert edited.next_run == jitter.due("r", 30.0, EVERY_MINUTE, at(60))
    store.update("r", jitter=None)
    assert store.get("r").next_run == at(60)
    for bad in (-1.0, 10**6):
        with pytest.raises(FieldValueError, match="jitter"):
            store.update("r", jitter=bad)
        with pytest.raises(FieldValueError, match="jitter"):
            store.add(f"bad{bad}", task="t", timer="every 1m", jitter=bad)
    assert store.get("r").jitter is None
