"""``max_runs`` (issue 25) through the store and the claimer, on every backend: the
bound stops the scheduled fires, beat's start-up sweep leaves an ended task alone, an
edit raising the bound plans it again, and the field reads back in every record."""

from __future__ import annotations

from timeline import at

from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.sweep import replan_strays
from celery_cronstore.testing import FrozenClock


def claimed(claimer: Claimer) -> list[str]:
    return [c.fire_time.isoformat() for c in claimer.claim_due().claims]


def test_max_runs_ends_the_schedule_and_raising_it_goes_on(
    store: Store, clock: FrozenClock
) -> None:
    store.add("twice", task="t", timer="*:*:0/10", max_runs=2)
    store.add("free", task="t", timer="*:*:0/10")
    claimer = Claimer(store, "b1")
    assert store.get("twice").max_runs == 2
    clock.set(at(10))
    assert len(claimed(claimer)) == 2  # both tasks
    clock.set(at(20))
    assert len(claimed(claimer)) == 2
    ended = store.get("twice")
    assert (ended.total_run_count, ended.next_run) == (2, None)
    assert ended.enabled
    clock.set(at(30))
    assert claimed(claimer) == [at(30).isoformat()]  # "free" only
    assert replan_strays(store.db) == []  # an ended task is as beat leaves it
    assert store.get("twice").next_run is None

    store.update("twice", max_runs=3)
    assert store.get("twice").next_run == at(40)
    clock.set(at(40))
    assert len(claimed(claimer)) == 2
    clock.set(at(50))
    assert claimed(claimer) == [at(50).isoformat()]
    assert store.get("twice").total_run_count == 3

    store.update("twice", max_runs=None)  # no bound: it fires again
    assert store.get("twice").next_run == at(60)
