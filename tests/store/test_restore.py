"""After an outage, beat writes back the fires it sent whose claims the database lost
(``store.restore``; issue 26: a failover with asynchronous replication loses the last
commits of the old primary). Simulated on every backend by undoing the commits by hand:
the ledger row deleted (or put back to ``claimed``), the task row put back as it was
before the claim, which is what the promoted standby holds.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from test_claims import Seam
from timeline import at

from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.restore import RESTORED, SENT_AGAIN
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.testing import FrozenClock

_PT = periodic_task.c
_F = fire.c


def _task_row(store: Store, name: str) -> dict[str, Any]:
    with store.engine.connect() as conn:
        row = conn.execute(sa.select(periodic_task).where(_PT.name == name)).one()
    return dict(row._mapping)


def _lose(store: Store, before: dict[str, Any], task_ids: list[str], *, state: str | None) -> None:
    """Undo what the old primary committed after ``before``: the task row as it was, the
    fires' rows gone (``state=None``) or back in ``state``."""
    with store.begin() as conn:
        conn.execute(sa.update(periodic_task).where(_PT.id == before["id"]).values(**before))
        rows: Any = (
            sa.update(fire).values(state=state, published_at=None, lease_until=None)
            if state
            else sa.delete(fire)
        )
        conn.execute(rows.where(_F.task_id.in_(task_ids)))


def _sent_then_lost(store: Store, clock: FrozenClock) -> tuple[Claimer, Claimer, Any]:
    """beat-1 claims and sends the fire at 10 s of task ``a``; the database then loses
    that (the task row back as before, the fire's row gone). Return both beats and the
    claims beat-1 sent."""
    store.add("a", task="t", timer="*:*:0/10")
    one, two = Claimer(store, "beat-1"), Claimer(store, "beat-2")
    before = _task_row(store, "a")
    clock.set(at(10.2))
    claims = _sent(one, clock, "a")
    _lose(store, before, [c.task_id for c in claims], state=None)
    return one, two, claims


def _sent(claimer: Claimer, clock: FrozenClock, name: str) -> Any:
    result = claimer.claim_due()
    claims = [c for c in result.claims if c.name == name]
    assert claims, f"nothing of {name} was due at {clock()}"
    claimer.mark_sending(claims)
    claimer.mark_published(claims)
    return claims


def test_a_lost_claim_is_written_back_and_not_claimed_again(
    store: Store, clock: FrozenClock
) -> None:
    store.add("a", task="t", timer="*:*:0/10")
    beat = Claimer(store, "beat-1")
    before = _task_row(store, "a")
    clock.set(at(10.2))
    claims = _sent(beat, clock, "a")
    _lose(store, before, [c.task_id for c in claims], state=None)
    assert store.history("a") == []

    restored = beat.restore(claims)

    assert restored.written == 1
    assert restored.twice == []
    (row,) = store.history("a")
    assert (row.task_id, row.state, row.claimed_by) == (claims[0].task_id, "published", "beat-1")
    assert row.reason == RESTORED
    # The task row still says the fire is due: a claim (any beat's) plans past it.
    other = Claimer(store, "beat-2")
    assert [c.task_id for c in other.claim_due().claims] == []
    clock.set(at(20.1))
    assert [c.fire_time for c in other.claim_due().claims] == [at(20)]


def test_a_claim_back_in_claimed_is_marked_and_no_take_over_sends_it(
    store: Store, clock: FrozenClock
) -> None:
    store.add("a", task="t", timer="*:*:0/10")
    beat = Claimer(store, "beat-1", lease=5)
    clock.set(at(10.2))
    claims = _sent(beat, clock, "a")
    with store.begin() as conn:  # the marks were lost: the claim alone survived
        conn.execute(
            sa.update(fire)
            .values(state="claimed", published_at=None)
            .where(_F.task_id == claims[0].task_id)
        )
    assert beat.restore(claims).written == 0
    assert [f.state for f in store.history("a")] == ["published"]
    clock.set(at(19))  # past the lease: nothing is left to take over
    assert Claimer(store, "beat-2", lease=5).reclaim_expired() == []


def test_another_beat_s_unsent_claim_of_the_fire_is_taken_back(
    store: Store, clock: FrozenClock
) -> None:
    one, two, claims = _sent_then_lost(store, clock)
    again = two.claim_due().claims  # beat-2 reached the promoted standby first
    assert [c.task_id for c in again] == [claims[0].task_id]

    restored = one.restore(claims)

    assert restored.twice == []
    assert [c.task_id for c in restored.to_mark] == [claims[0].task_id]
    assert two.mark_sending(again) == []  # beat-2's send is refused: sent once
    (row,) = store.history("a")
    assert (row.state, row.claimed_by) == ("published", "beat-1")


def test_a_fire_another_beat_already_sent_again_is_reported(
    store: Store, clock: FrozenClock
) -> None:
    one, two, claims = _sent_then_lost(store, clock)
    _sent(two, clock, "a")

    restored = one.restore(claims)

    assert restored.twice == [claims[0].task_id]
    assert restored.written == 0
    (row,) = store.history("a")
    assert (row.state, row.claimed_by) == ("published", "beat-2")
    assert row.reason == SENT_AGAIN.format(node="beat-1")


def test_nothing_is_written_back_for_a_removed_task_or_a_kept_claim(
    store: Store, clock: FrozenClock
) -> None:
    store.add("a", task="t", timer="*:*:0/10")
    store.add("b", task="t", timer="*:*:0/10")
    beat = Claimer(store, "beat-1")
    clock.set(at(10.2))
    claims = beat.claim_due().claims
    beat.mark_published(claims)
    with store.begin() as conn:
        conn.execute(sa.delete(fire))
    store.remove("a")
    restored = beat.restore(claims)
    assert restored.written == 1
    assert [f.state for f in store.history("b")] == ["published"]
    # Nothing lost: one read, nothing written.
    again = beat.restore(claims)
    assert (again.written, again.to_mark, again.twice) == (0, [], [])


def test_a_fire_past_the_retention_is_not_written_back_and_none_gets_a_start_lease(
    store: Store, clock: FrozenClock
) -> None:
    """The pruner may have deleted a fire older than the retention (it had ended): writing
    it back would publish-watch a fire that ran. A written-back fire gets no start lease:
    its start record may be lost with its claim, and it must not be sent again."""
    store.add("a", task="t", timer="*:*:0/10")
    beat = Claimer(store, "beat-1", start_timeout=5, seam=Seam(watched=lambda name: True))
    before = _task_row(store, "a")
    clock.set(at(10.2))
    first = _sent(beat, clock, "a")
    assert _lease(store, first[0].task_id) is not None  # watched for its start, as sent
    clock.set(at(20.2))
    second = _sent(beat, clock, "a")
    _lose(store, before, [c.task_id for c in first + second], state=None)
    clock.set(at(25))

    restored = beat.restore(first + second, keep=timedelta(seconds=10))

    assert restored.written == 1
    (row,) = store.history("a")
    assert (row.task_id, row.state) == (second[0].task_id, "published")
    assert _lease(store, second[0].task_id) is None


def _lease(store: Store, task_id: str) -> Any:
    with store.engine.connect() as conn:
        return conn.execute(sa.select(_F.lease_until).where(_F.task_id == task_id)).scalar_one()
