"""``start_at`` and ``end_at`` (issue 25) through the store and three claimers, on every
backend: nothing is claimed before the start or after the end, the ended task stays
enabled with no next run, moving the end later plans it again, the next-fires list keeps
inside the bounds, and bad bounds are refused naming the field."""

from __future__ import annotations

from datetime import timedelta

import pytest
from timeline import at

from celery_cronstore.fields import FieldValueError, ForceableError
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.sweep import replan_strays
from celery_cronstore.testing import FrozenClock


def test_three_replicas_claim_only_inside_the_bounds(store: Store, clock: FrozenClock) -> None:
    store.add("b", task="t", timer="*:*:0/10", start_at=at(25), end_at=at(60))
    task = store.get("b")
    assert (task.start_at, task.end_at, task.next_run) == (at(25), at(60), at(30))
    assert store.next_runs("b", 10, after=at(0)) == [at(30), at(40), at(50), at(60)]
    replicas = [Claimer(store, f"b{i}") for i in range(3)]
    claimed = []
    for second in range(0, 121, 5):
        clock.set(at(second))
        for replica in replicas:
            claimed += [c.fire_time for c in replica.claim_due().claims]
    assert claimed == [at(30), at(40), at(50), at(60)]
    ended = store.get("b")
    assert ended.enabled
    assert ended.next_run is None
    assert ended.total_run_count == 4
    assert replan_strays(store.db) == []  # an ended task is as beat leaves it

    store.update("b", end_at=at(100))  # later, but still past (now is 120): still ended
    assert store.get("b").next_run is None
    store.update("b", end_at=at(200))  # later than now: it goes on from now
    assert store.get("b").next_run == at(130)
    clock.set(at(130))
    assert [c.fire_time for c in replicas[1].claim_due().claims] == [at(130)]
    store.update("b", end_at=None)
    assert store.next_runs("b", 2, after=at(130)) == [at(140), at(150)]


def test_bad_bounds_are_refused_naming_the_field_and_nothing_is_written(
    store: Store, clock: FrozenClock
) -> None:
    with pytest.raises(FieldValueError, match=r"end_at .* is not after start_at") as caught:
        store.add("x", task="t", timer="every 1m", start_at=at(100), end_at=at(100))
    assert caught.value.field == "end_at"
    with pytest.raises(FieldValueError, match="has no offset"):
        store.add("x", task="t", timer="every 1m", end_at="2099-01-01T00:00:00")
    clock.set(at(500))
    with pytest.raises(ForceableError, match="is already past: the task would never fire"):
        store.add("x", task="t", timer="every 1m", end_at=at(100), force=False)
    assert store.list() == []
    store.add("y", task="t", timer="every 1m", start_at=at(1000))
    with pytest.raises(FieldValueError, match="is not after start_at"):
        store.update("y", end_at=at(900))
    assert store.get("y").end_at is None
    store.update("y", start_at=None, end_at=at(900))
    assert store.get("y").next_run == at(540)
    assert store.get("y").start_at is None
    # ISO text (files, forms) is the same instant as a datetime.
    store.update("y", end_at="2026-01-05T13:15:00+01:00")
    assert store.get("y").end_at == at(0) + timedelta(minutes=15)
