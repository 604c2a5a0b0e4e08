"""Pause and resume (issue 25) through the store and three claimers, on every backend:
a paused task is claimed nothing, the fires due when it was paused and those it held back
are recorded missed with the note, beat resumes it at ``paused_until`` by itself and sends
the newest held-back fire once when asked, and every step is in the audit trail."""

from __future__ import annotations

import pytest
from timeline import at

from celery_cronstore.fields import FieldValueError
from celery_cronstore.states import FireState
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.pause import NotPausedError
from celery_cronstore.store.sweep import replan_strays
from celery_cronstore.testing import FrozenClock


def claim_all(replicas: list[Claimer]) -> list[str]:
    return [c.fire_time.isoformat() for r in replicas for c in r.claim_due().claims]


def test_paused_until_then_resumed_by_beat_sending_the_newest_once(
    store: Store, clock: FrozenClock
) -> None:
    store.add("p", task="t", timer="*:*:0/10")
    replicas = [Claimer(store, f"b{i}") for i in range(3)]
    clock.set(at(10))
    assert claim_all(replicas) == [at(10).isoformat()]
    clock.set(at(25))  # 20 is due, not claimed: the pause records it missed
    paused = store.acting("alice").pause("p", note="db migration", until=at(62), resume="newest")
    assert paused.enabled
    assert (paused.paused_at, paused.paused_by, paused.paused_note) == (
        at(25),
        "alice",
        "db migration",
    )
    assert (paused.paused_until, paused.paused_resume, paused.next_run) == (
        at(62),
        "newest",
        at(62),
    )
    assert replan_strays(store.db) == []
    for second in (30, 40, 50, 60):
        clock.set(at(second))
        assert claim_all(replicas) == []  # nothing while paused
    clock.set(at(62))  # its end: beat resumes it and sends 60, the newest held back
    assert claim_all(replicas) == [at(60).isoformat()]
    resumed = store.get("p")
    assert resumed.paused_at is None
    assert resumed.next_run == at(70)
    clock.set(at(70))
    assert claim_all(replicas) == [at(70).isoformat()]
    states = {f.fire_time: (f.state, f.fire_count, f.reason) for f in store.history("p")}
    assert states[at(20)][0] == FireState.SKIPPED  # due when it was paused: on purpose
    state, count, reason = states[at(30)]
    assert (state, count) == (FireState.SKIPPED, 3)  # 30, 40, 50 held back
    assert reason is not None
    assert "paused by alice (db migration)" in reason
    actions = [(e.action, e.actor) for e in store.audit_trail(task="p")]
    assert ("pause", "alice") in actions


def test_paused_until_resumed_by_hand_skipping_what_it_held_back(
    store: Store, clock: FrozenClock
) -> None:
    store.add("p", task="t", timer="*:*:0/10")
    claimer = Claimer(store, "b1")
    clock.set(at(5))
    store.pause("p")  # until resumed, then skip
    assert store.get("p").next_run is None
    clock.set(at(45))
    assert claim_all([claimer]) == []
    resumed = store.resume("p")
    assert resumed.paused_at is None
    assert resumed.next_run == at(50)
    [held] = [f for f in store.history("p") if f.state == FireState.SKIPPED]
    assert (held.fire_time, held.fire_until, held.fire_count) == (at(10), at(40), 4)
    clock.set(at(50))
    assert claim_all([claimer]) == [at(50).isoformat()]
    with pytest.raises(NotPausedError, match="is not paused"):
        store.resume("p")


def test_bad_pauses_are_refused_and_nothing_is_written(store: Store, clock: FrozenClock) -> None:
    store.add("p", task="t", timer="every 1m")
    clock.set(at(100))
    before = store.get("p")
    with pytest.raises(FieldValueError, match="is not in the future"):
        store.pause("p", until=at(50))
    with pytest.raises(FieldValueError, match="resume must be one of skip, newest"):
        store.pause("p", resume="maybe")
    with pytest.raises(FieldValueError, match="note is longer than 1000 characters"):
        store.pause("p", note="x" * 1001)
    with pytest.raises(FieldValueError, match="has no offset"):
        store.pause("p", until="2099-01-01T00:00:00")
    assert store.get("p") == before
    # An edit while paused keeps it paused; pausing again replaces note and end.
    store.pause("p", note="first", until=at(1000))
    store.update("p", timer="every 2m")
    again = store.pause("p", note="second", until=at(2000))
    assert (again.paused_at, again.paused_note, again.next_run) == (at(100), "second", at(2000))
    assert store.get("p").paused_until == at(2000)
