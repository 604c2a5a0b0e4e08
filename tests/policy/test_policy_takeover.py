"""What becomes of a lapsed claim, as a table: no database, no clock.

Each row is one :class:`~celery_cronstore.policy.TakeOverSnapshot` (a base one, changed)
and what :func:`~celery_cronstore.policy.decide_take_over` must answer: left to its
claimer, taken over (a fresh lease for the asking beat), or closed with a state and the
reason written to the fire's ledger row.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from timeline import at

from celery_cronstore.policy import TakeOverSnapshot, decide_take_over
from celery_cronstore.policy.takeover import MAYBE_SENT
from celery_cronstore.states import FireState

#: The claim: made at 10 s with a 5 s lease by a beat that died; another looks at 20 s.
NOW = at(20)
LEASE = timedelta(seconds=30)


def snapshot(**changes: Any) -> TakeOverSnapshot:
    """Return the snapshot of a claim the asking beat takes over, changed."""
    base = TakeOverSnapshot(
        now=NOW,
        node="b2",
        lease=LEASE,
        lease_until=at(15),
        attempts=1,
        refused=None,
        enabled=True,
        expires=None,
    )
    return dataclasses.replace(base, **changes)


#: (id, snapshot changes, state (None: taken over), reason)
TABLE: list[tuple[str, dict[str, Any], FireState | None, str | None]] = [
    # 2. Beat would refuse the row as it reads now (edited since the claim).
    (
        "refused",
        {"refused": "task 'x' is not in cronstore_task_allowlist"},
        FireState.DROPPED,
        "not re-published: task 'x' is not in cronstore_task_allowlist",
    ),
    # 3. Nothing goes out after a disable.
    (
        "disabled",
        {"enabled": False},
        FireState.DROPPED,
        "not re-published: the task was disabled before its fire went out",
    ),
    # 4. Past the starting deadline: it would only be refused as expired.
    (
        "past-the-starting-deadline",
        {"expires": at(19)},
        FireState.EXPIRED,
        "publish never completed before the starting deadline",
    ),
    ("deadline-boundary-is-in-time", {"expires": NOW}, None, None),
    ("within-the-starting-deadline", {"expires": at(60)}, None, None),
    # The first that applies is the reason given.
    (
        "refused-before-disabled",
        {"refused": "bad options", "enabled": False, "expires": at(0)},
        FireState.DROPPED,
        "not re-published: bad options",
    ),
    (
        "disabled-before-expired",
        {"enabled": False, "expires": at(0)},
        FireState.DROPPED,
        "not re-published: the task was disabled before its fire went out",
    ),
    # 5. Otherwise the asking beat takes it over.
    ("taken-over", {}, None, None),
    ("a-handed-back-fire", {"lease_until": NOW - timedelta(microseconds=1)}, None, None),
    ("no-lease-at-all", {"lease_until": None}, None, None),
    ("a-later-attempt", {"attempts": 3}, None, None),
]


@pytest.mark.parametrize(
    ("changes", "state", "reason"),
    [pytest.param(*row[1:], id=row[0]) for row in TABLE],
)
def test_take_over_decision(
    changes: dict[str, Any], state: FireState | None, reason: str | None
) -> None:
    snap = snapshot(**changes)
    decision = decide_take_over(snap)
    assert decision is not None
    assert (decision.state, decision.reason) == (state, reason)
    assert decision.republish is (state is None)
    # Either way the asking beat now holds the claim, one attempt on: a late mark by the
    # first claimer (fenced on its attempt) finds nothing to mark.
    assert (decision.attempt, decision.claimed_by) == (snap.attempts + 1, "b2")
    assert decision.lease_until == (NOW + LEASE if state is None else None)


@pytest.mark.parametrize("lease_until", [NOW, at(21), at(600)], ids=["now", "ahead", "far"])
def test_a_claim_whose_lease_has_not_run_out_is_left_to_its_claimer(lease_until: Any) -> None:
    # 1. Even a claim beat would refuse: its claimer is publishing or dropping it.
    assert decide_take_over(snapshot(lease_until=lease_until)) is None
    assert decide_take_over(snapshot(lease_until=lease_until, enabled=False)) is None


def test_the_ledger_values() -> None:
    taken = decide_take_over(snapshot())
    assert taken is not None
    assert taken.values() == {"attempts": 2, "claimed_by": "b2", "lease_until": NOW + LEASE}
    closed = decide_take_over(snapshot(enabled=False))
    assert closed is not None
    assert closed.values() == {
        "attempts": 2,
        "claimed_by": "b2",
        "lease_until": None,
        "state": FireState.DROPPED,
        "reason": "not re-published: the task was disabled before its fire went out",
    }


#: A claim whose beat stopped while sending it (``sending``): it may have gone out.
SENDING_TABLE: list[tuple[str, dict[str, Any]]] = [
    ("plain", {}),
    # 2 comes before every refusal: whatever the row says now, the fire may have gone.
    ("disabled-since", {"enabled": False}),
    ("refused-since", {"refused": "bad options"}),
    ("past-its-deadline", {"expires": at(0)}),
    ("watched", {"start_lease": at(80)}),
]


@pytest.mark.parametrize("changes", [pytest.param(c, id=i) for i, c in SENDING_TABLE])
def test_a_fire_its_beat_stopped_sending_is_recorded_published_never_sent_again(
    changes: dict[str, Any],
) -> None:
    snap = snapshot(sending=True, **changes)
    decision = decide_take_over(snap)
    assert decision is not None
    assert not decision.republish
    assert decision.values() == {
        "attempts": 2,
        "claimed_by": "b2",
        "lease_until": changes.get("start_lease"),
        "state": FireState.PUBLISHED,
        "reason": MAYBE_SENT,
        "published_at": NOW,
    }


def test_a_fire_being_sent_within_its_lease_is_left_to_its_beat() -> None:
    assert decide_take_over(snapshot(sending=True, lease_until=at(21))) is None
