"""What becomes of a published fire that never started, as a table: no database, no clock.

Each row is one :class:`~celery_cronstore.policy.RedeliverySnapshot` (a base one,
changed) and what :func:`~celery_cronstore.policy.decide_redelivery` must answer: handed
back for another publish (``claimed``, lease run out) or recorded ``lost`` with the
reason; and the start lease a published fire gets (:func:`~celery_cronstore.policy.start_lease`).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from timeline import at

from celery_cronstore.policy import (
    RedeliverySnapshot,
    decide_redelivery,
    handed_back_lease,
    start_lease,
)
from celery_cronstore.states import FireState

NOW = at(41)
ONE = (
    "never started 30s after its publish (published 1 time(s)): its message was lost (a "
    "broker restart, a dropped connection), and sending it again could run it twice (the "
    "task is not a CronTask and does not acknowledge late)"
)


def snapshot(**changes: Any) -> RedeliverySnapshot:
    """Return the snapshot of a fire published once that is handed back, changed."""
    base = RedeliverySnapshot(
        now=NOW, attempts=1, redeliverable=True, max_redeliveries=3, start_timeout=30.0
    )
    return dataclasses.replace(base, **changes)


#: (id, snapshot changes, state, reason)
TABLE: list[tuple[str, dict[str, Any], FireState, str | None]] = [
    # 1. A second publish could run it twice: lost, whatever the count.
    ("not-redeliverable", {"redeliverable": False}, FireState.LOST, ONE),
    (
        "not-redeliverable-later-attempt",
        {"redeliverable": False, "attempts": 2},
        FireState.LOST,
        "never started 30s after each of 2 publishes: its messages were lost",
    ),
    # 2. At most max_redeliveries publishes after the first.
    ("last-redelivery", {"attempts": 3}, FireState.CLAIMED, None),
    (
        "too-many",
        {"attempts": 4},
        FireState.LOST,
        "never started 30s after each of 4 publishes: its messages were lost",
    ),
    (
        "none-allowed",
        {"max_redeliveries": 0},
        FireState.LOST,
        ONE,
    ),
    (
        "the-timeout-in-the-reason",
        {"attempts": 2, "max_redeliveries": 1, "start_timeout": 2.5},
        FireState.LOST,
        "never started 2.5s after each of 2 publishes: its messages were lost",
    ),
    # 3. Otherwise handed back.
    ("handed-back", {}, FireState.CLAIMED, None),
]


@pytest.mark.parametrize(
    ("changes", "state", "reason"),
    [pytest.param(*row[1:], id=row[0]) for row in TABLE],
)
def test_redelivery_decision(changes: dict[str, Any], state: FireState, reason: str | None) -> None:
    decision = decide_redelivery(snapshot(**changes))
    assert (decision.state, decision.reason) == (state, reason)
    assert decision.again is (state == FireState.CLAIMED)
    # Handed back with its lease already run out, so the next take-over look sends it.
    assert decision.lease_until == (handed_back_lease(NOW) if decision.again else None)


def test_a_handed_back_lease_has_just_run_out() -> None:
    assert handed_back_lease(NOW) < NOW
    assert NOW - handed_back_lease(NOW) == timedelta(microseconds=1)


@pytest.mark.parametrize(
    ("timeout", "watched", "lease"),
    [
        (30.0, True, at(40)),
        (0.5, True, at(10.5)),
        (30.0, False, None),  # its start is not recorded: nothing to wait for
        (None, True, None),  # no start timeout: never redelivered
    ],
)
def test_the_start_lease(timeout: float | None, watched: bool, lease: Any) -> None:
    assert start_lease(at(10), timeout, watched) == lease
