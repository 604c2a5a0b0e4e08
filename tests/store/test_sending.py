"""The ledger's side of "a fire is sent at most once", on SQLite with a frozen clock.

Beat records a plain task's fire ``sending`` before it is handed to the broker
(:meth:`Claimer.mark_sending`: fenced on claimer and attempt, enabled tasks only), marks
it published after, puts back what surely did not go, hands back what it did not send
when it stops; the beat that takes a lapsed ``sending`` fire over records it published
and never sends it. A worker starts a plain fire through :func:`store.plain.start_plain`.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from timeline import T0

from celery_cronstore.policy.plain import DISABLED, GONE
from celery_cronstore.policy.takeover import MAYBE_SENT
from celery_cronstore.records import Claim
from celery_cronstore.states import FireState
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.marks import ANSWER_LOST, DISABLED_WAITING
from celery_cronstore.store.plain import start_plain
from celery_cronstore.testing import FrozenClock


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    return sqlite_store


def claimed(store: Store, clock: FrozenClock, *names: str, node: str = "b1") -> list[Claim]:
    for name in names:
        store.add(name, task="x.do", timer="every 10s")
    clock.set(T0 + timedelta(seconds=10))
    beat = Claimer(store, node, lease=5)
    claims = beat.claim_due().claims
    beat.close()
    return claims


def state(store: Store, name: str) -> tuple[str, str | None]:
    (fire,) = store.history(name)
    return fire.state, fire.reason


def test_sending_then_published(store: Store, clock: FrozenClock) -> None:
    claims = claimed(store, clock, "a", "b")
    beat = Claimer(store, "b1", lease=5)
    assert {c.name for c in beat.mark_sending(claims)} == {"a", "b"}
    assert state(store, "a") == (FireState.SENDING, None)
    assert beat.mark_published(claims) == 2
    assert state(store, "a") == (FireState.PUBLISHED, None)


def test_a_disabled_task_s_claim_is_dropped_not_sent(store: Store, clock: FrozenClock) -> None:
    claims = claimed(store, clock, "a", "off")
    store.disable("off")
    beat = Claimer(store, "b1", lease=5)
    assert [c.name for c in beat.mark_sending(claims)] == ["a"]
    assert state(store, "off") == (FireState.DROPPED, DISABLED_WAITING)


def test_a_paused_task_s_claim_is_dropped_not_sent_unless_asked_by_hand(
    store: Store, clock: FrozenClock
) -> None:
    """The ``sending`` write is also the re-check of a fire taken ahead: a pause committed
    since the claim stops it, as a disable does. A backfill (``paused_ok``) still goes."""
    claims = claimed(store, clock, "a", "held", "asked")
    store.pause("held", note="maintenance")
    store.pause("asked")
    beat = Claimer(store, "b1", lease=5)
    by_name = {c.name: c for c in claims}
    assert [c.name for c in beat.mark_sending([by_name["a"], by_name["held"]])] == ["a"]
    assert state(store, "held") == (FireState.DROPPED, DISABLED_WAITING)
    assert [c.name for c in beat.mark_sending([by_name["asked"]], paused_ok=True)] == ["asked"]
    assert state(store, "asked") == (FireState.SENDING, None)


def test_a_claim_taken_over_is_not_sent_by_its_first_beat(store: Store, clock: FrozenClock) -> None:
    claims = claimed(store, clock, "a")
    clock.set(T0 + timedelta(seconds=16))  # past the 5 s lease
    taker = Claimer(store, "b2", lease=5)
    (again,) = taker.reclaim_expired()
    frozen = Claimer(store, "b1", lease=5)  # the first beat wakes up
    assert frozen.mark_sending(claims) == []
    assert taker.mark_sending([again]) == [again]


def test_a_taken_over_claim_names_its_periodic_task_not_its_ledger_row(
    store: Store, clock: FrozenClock
) -> None:
    """The take-over reads the ledger joined to the tasks, and both have an ``id``: the
    claim it returns must carry the task's (the ``sending`` re-check, a drop and the task
    put in error go by it). It carried the ledger row's, so a taken-over plain fire was
    dropped as if its task were gone once the re-check read the task by that id."""
    first = claimed(store, clock, "a", "b")  # ledger rows 1 and 2
    beat = Claimer(store, "b1", lease=5)
    beat.mark_published(beat.mark_sending(first))
    clock.set(T0 + timedelta(seconds=20))
    beat.claim_due()  # ledger rows 3 and 4, then beat stops before sending them
    clock.set(T0 + timedelta(seconds=26))  # past the 5 s lease
    taker = Claimer(store, "b2", lease=5)
    again = taker.reclaim_expired()
    assert {c.periodic_task_id for c in again} == {store.get("a").id, store.get("b").id}
    assert {c.name for c in taker.mark_sending(again)} == {"a", "b"}


def test_released_claims_go_back_and_handed_back_ones_lapse(
    store: Store, clock: FrozenClock
) -> None:
    claims = claimed(store, clock, "a", "b")
    beat = Claimer(store, "b1", lease=5)
    beat.mark_sending(claims)
    assert beat.release(claims[:1]) == 1
    assert beat.hand_back(claims) == 2
    assert {state(store, n)[0] for n in ("a", "b")} == {FireState.CLAIMED}
    # Handed back: the next beat takes them over at once, and sends them.
    taken = Claimer(store, "b2", lease=5).reclaim_expired()
    assert sorted(c.name for c in taken) == ["a", "b"]


def test_a_lapsed_sending_fire_is_recorded_published_never_sent_again(
    store: Store, clock: FrozenClock
) -> None:
    claims = claimed(store, clock, "a")
    Claimer(store, "b1", lease=5).mark_sending(claims)
    clock.set(T0 + timedelta(seconds=16))
    assert Claimer(store, "b2", lease=5).reclaim_expired() == []
    assert state(store, "a") == (FireState.PUBLISHED, MAYBE_SENT)


def test_an_unsure_fire_is_recorded_published_with_the_reason(
    store: Store, clock: FrozenClock
) -> None:
    claims = claimed(store, clock, "a")
    beat = Claimer(store, "b1", lease=5)
    beat.mark_sending(claims)
    assert beat.mark_maybe_sent(claims) == 1
    assert state(store, "a") == (FireState.PUBLISHED, ANSWER_LOST)


def _start(store: Store, task_id: str, **kw: object) -> tuple[bool, str | None]:
    decision, _run = start_plain(store.db, task_id, node="w1", abandon_after=30, **kw)  # type: ignore[arg-type]
    return decision.start, decision.reason


def test_the_worker_starts_a_plain_fire_once(store: Store, clock: FrozenClock) -> None:
    (claim,) = claimed(store, clock, "a")
    Claimer(store, "b1", lease=5).mark_published([claim])
    assert _start(store, claim.task_id) == (True, None)
    assert state(store, "a")[0] == FireState.STARTED
    assert _start(store, claim.task_id) == (
        False,
        "duplicate delivery: the fire is already started",
    )


def test_the_worker_refuses_a_disabled_or_removed_task_s_fire(
    store: Store, clock: FrozenClock
) -> None:
    off, gone = claimed(store, clock, "off", "gone")
    Claimer(store, "b1", lease=5).mark_published([off, gone])
    store.disable("off")
    store.remove("gone")
    assert _start(store, off.task_id) == (False, DISABLED)
    assert state(store, "off") == (FireState.DROPPED, DISABLED)
    assert _start(store, gone.task_id) == (False, GONE)


def test_a_fire_recorded_lost_that_starts_late_becomes_a_start(
    store: Store, clock: FrozenClock
) -> None:
    (claim,) = claimed(store, clock, "a")
    with store.begin() as conn:
        conn.exec_driver_sql("UPDATE cronstore_fire SET state = 'lost', reason = 'never started'")
    assert _start(store, claim.task_id) == (True, None)
    assert state(store, "a") == (FireState.STARTED, None)


class _Beat:
    """The seam of beat's app: tasks named ``guarded.*`` may be published again (a
    CronTask, or ``acks_late``), the others must go at most once."""

    def registered(self, name: str) -> str | None:
        return None

    def guarded(self, name: str) -> bool:
        return name.startswith("guarded.")

    def redeliverable(self, name: str) -> bool:
        return name.startswith("guarded.")

    def call_problem(self, name: str, args: object, kwargs: object) -> str | None:
        return None


def test_a_claim_for_a_fire_sent_at_once_records_it_sending_in_the_same_transaction(
    store: Store, clock: FrozenClock
) -> None:
    """``claim_due(sending=True)``: the fires due now that go at most once are written
    ``sending`` by the claim (its row locks are the re-check), so beat needs no second
    write before they go; a fire that may go again, or one claimed ahead of its time, is
    ``claimed`` and takes the ``sending`` write (its re-check) when it goes."""
    store.add("plain", task="x.do", timer="every 10s")
    store.add("guarded", task="guarded.do", timer="every 10s")
    store.add("later", task="x.do", timer="*:*:12")  # at 12:00:12, claimed ahead
    clock.set(T0 + timedelta(seconds=10))
    beat = Claimer(store, "b1", lease=5, seam=_Beat())  # type: ignore[arg-type]
    claims = beat.claim_due(timedelta(seconds=3), sending=True).claims
    assert {c.name: c.sending for c in claims} == {
        "plain": True,
        "guarded": False,
        "later": False,
    }
    assert [state(store, n)[0] for n in ("plain", "guarded", "later")] == [
        FireState.SENDING,
        FireState.CLAIMED,
        FireState.CLAIMED,
    ]
    # A lapsed one is settled as one that may have gone out; never sent again.
    clock.set(T0 + timedelta(seconds=16))
    taken = Claimer(store, "b2", lease=5, seam=_Beat()).reclaim_expired()  # type: ignore[arg-type]
    assert sorted(c.name for c in taken) == ["guarded"]
    assert state(store, "plain") == (FireState.PUBLISHED, MAYBE_SENT)
    beat.close()


def test_without_sending_the_claim_records_every_fire_claimed(
    store: Store, clock: FrozenClock
) -> None:
    store.add("plain", task="x.do", timer="every 10s")
    clock.set(T0 + timedelta(seconds=10))
    beat = Claimer(store, "b1", lease=5, seam=_Beat())  # type: ignore[arg-type]
    (claim,) = beat.claim_due().claims
    assert not claim.sending
    assert state(store, "plain") == (FireState.CLAIMED, None)
    beat.close()
