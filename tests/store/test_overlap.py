"""Overlap policies ``buffer_one`` and ``replace`` (issue 25) through the store, three
claimers and the worker side of the ledger, on every backend.

``buffer_one``: while a fire runs, the next is recorded ``buffered`` (one only: a further
one is ``skipped``), and the claim after the running one ends publishes it under its own
nominal fire time and task id, once, whichever replica looks. ``replace``: the next fire
is claimed and the running one recorded ``replaced``, its task id handed back to revoke;
its late finish changes nothing.
"""

from __future__ import annotations

from timeline import at

from celery_cronstore import policy
from celery_cronstore.states import FireState
from celery_cronstore.store import Claimer, Store, runs
from celery_cronstore.testing import FrozenClock


def test_buffer_one_holds_one_fire_and_sends_it_when_the_running_one_ends(
    store: Store, clock: FrozenClock
) -> None:
    store.add("b", task="t", timer="*:*:0/10", overlap_policy="buffer_one")
    task = store.get("b")
    replicas = [Claimer(store, f"b{i}") for i in range(3)]
    clock.set(at(10))
    [first] = replicas[0].claim_due().claims
    replicas[0].mark_published([first])
    assert runs.start_fire(store.db, first.task_id, node="w1").started
    clock.set(at(20))
    held = replicas[1].claim_due()
    assert held.claims == []  # 20 buffered behind 10
    assert held.recorded == [(FireState.BUFFERED, "b", 1)]  # counted by beat's metric
    clock.set(at(30))
    result = replicas[2].claim_due()
    assert result.claims == []
    assert result.buffered == 1
    states = {f.fire_time: (f.state, f.reason) for f in store.history("b")}
    assert states[at(20)][0] == FireState.BUFFERED
    assert "waiting for fire" in (states[at(20)][1] or "")
    assert states[at(30)] == (
        FireState.SKIPPED,
        "not published: a fire is already buffered (overlap policy buffer_one)",
    )
    clock.set(at(35))
    assert all(r.claim_due().claims == [] for r in replicas)  # 10 still runs
    assert runs.finish_fire(store.db, first.task_id, FireState.SUCCEEDED)
    clock.set(at(36))
    released = [c for r in replicas for c in r.claim_due().claims]
    assert [(c.fire_time, c.task_id) for c in released] == [
        (at(20), policy.fire_task_id(task.id, "b", at(20)))
    ]
    assert {f.fire_time: f.state for f in store.history("b")}[at(20)] == FireState.CLAIMED
    assert store.get("b").total_run_count == 2
    assert replicas[0].claim_due().buffered == 0


def test_a_buffered_fire_of_a_task_disabled_meanwhile_is_dropped(
    store: Store, clock: FrozenClock
) -> None:
    store.add("b", task="t", timer="*:*:0/10", overlap_policy="buffer_one")
    claimer = Claimer(store, "b1")
    clock.set(at(10))
    [first] = claimer.claim_due().claims
    claimer.mark_published([first])
    runs.start_fire(store.db, first.task_id, node="w1")
    clock.set(at(20))
    claimer.claim_due()
    store.disable("b")
    runs.finish_fire(store.db, first.task_id, FireState.SUCCEEDED)
    clock.set(at(21))
    assert claimer.claim_due().claims == []
    fire = {f.fire_time: f for f in store.history("b")}[at(20)]
    assert fire.state == FireState.DROPPED
    assert "disabled while it was buffered" in (fire.reason or "")


def test_replace_claims_the_new_fire_and_records_the_running_one_replaced(
    store: Store, clock: FrozenClock
) -> None:
    store.add("r", task="t", timer="*:*:0/10", overlap_policy="replace")
    task = store.get("r")
    replicas = [Claimer(store, f"b{i}") for i in range(3)]
    clock.set(at(10))
    [first] = replicas[0].claim_due().claims
    replicas[0].mark_published([first])
    runs.start_fire(store.db, first.task_id, node="w1")
    clock.set(at(20))
    result = replicas[1].claim_due()
    assert [c.fire_time for c in result.claims] == [at(20)]
    assert result.revoke == [policy.fire_task_id(task.id, "r", at(10))]
    assert sorted(result.recorded) == [(FireState.CLAIMED, "r", 1), (FireState.REPLACED, "r", 1)]
    old = {f.fire_time: f for f in store.history("r")}[at(10)]
    assert old.state == FireState.REPLACED
    assert old.reason == f"replaced by fire {at(20).isoformat()} (overlap policy replace)"
    # The replaced run's late end changes nothing; its checkpoint is refused.
    assert not runs.finish_fire(store.db, first.task_id, FireState.SUCCEEDED)
    assert {f.fire_time: f.state for f in store.history("r")}[at(10)] == FireState.REPLACED
    # A fire that is not running is not replaced: nothing to revoke.
    replicas[1].mark_published(result.claims)
    clock.set(at(30))
    again = replicas[2].claim_due()
    assert [c.fire_time for c in again.claims] == [at(30)]
    assert again.revoke == []
    assert again.recorded == [(FireState.CLAIMED, "r", 1)]
