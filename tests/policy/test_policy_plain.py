"""Whether a worker starts a delivery of a plain task's fire, as a table: no database.

Each row is a :class:`~celery_cronstore.policy.PlainSnapshot` (the fire's ledger state,
its task's ``enabled``, the delivery's retries, the task's ``acks_late``) and what
:func:`~celery_cronstore.policy.decide_plain_start` must answer.
"""

from __future__ import annotations

from typing import Any

import pytest

from celery_cronstore.policy import PlainSnapshot, decide_plain_start
from celery_cronstore.policy.plain import DISABLED, GONE
from celery_cronstore.states import FireState as S

START = (True, None, None)

#: (id, snapshot fields, (start, state recorded, reason))
TABLE: list[tuple[str, dict[str, Any], tuple[bool, S | None, str | None]]] = [
    # 1. No ledger row: removed (or another store).
    ("gone", {"state": None, "enabled": False}, (False, None, GONE)),
    ("gone-even-if-said-enabled", {"state": None, "enabled": True}, (False, None, GONE)),
    # 2. The retry of a fire waiting for it.
    ("its-retry", {"state": S.RETRYING, "retries": 1}, START),
    ("retrying-but-not-a-retry", {"state": S.RETRYING}, (False, None, None)),
    # 3. Not started yet: starts, unless its task was disabled.
    ("claimed", {"state": S.CLAIMED}, START),
    ("being-sent", {"state": S.SENDING}, START),
    ("published", {"state": S.PUBLISHED}, START),
    ("recorded-lost-starts-late", {"state": S.LOST}, START),
    ("disabled", {"state": S.PUBLISHED, "enabled": False}, (False, S.DROPPED, DISABLED)),
    ("disabled-lost", {"state": S.LOST, "enabled": False}, (False, S.DROPPED, DISABLED)),
    # 4. A redelivery the task asked for (acks_late).
    ("acks-late-redelivery", {"state": S.STARTED, "acks_late": True}, START),
    ("acks-late-after-abandon", {"state": S.ABANDONED, "acks_late": True}, START),
    ("acks-late-but-ended", {"state": S.SUCCEEDED, "acks_late": True}, (False, None, None)),
    # 5. Duplicates and closed fires: refused, nothing written.
    ("second-delivery", {"state": S.STARTED}, (False, None, None)),
    ("after-its-end", {"state": S.SUCCEEDED}, (False, None, None)),
    ("after-a-failure", {"state": S.FAILED}, (False, None, None)),
    ("abandoned", {"state": S.ABANDONED}, (False, None, None)),
    ("dropped", {"state": S.DROPPED}, (False, None, None)),
    ("expired", {"state": S.EXPIRED}, (False, None, None)),
    ("skipped", {"state": S.SKIPPED}, (False, None, None)),
    ("missed", {"state": S.MISSED}, (False, None, None)),
]


@pytest.mark.parametrize(("fields", "want"), [pytest.param(*r[1:], id=r[0]) for r in TABLE])
def test_plain_start_decision(
    fields: dict[str, Any], want: tuple[bool, S | None, str | None]
) -> None:
    snap = PlainSnapshot(**{"enabled": True, **fields})
    decision = decide_plain_start(snap)
    start, record, reason = want
    assert (decision.start, decision.record) == (start, record)
    if start:
        assert decision.reason is None
    elif reason is not None:
        assert decision.reason == reason
    else:  # a duplicate names the state it found
        assert decision.reason == f"duplicate delivery: the fire is already {snap.state}"


def test_every_state_has_an_answer() -> None:
    for state in [None, *S]:
        for enabled in (True, False):
            decision = decide_plain_start(PlainSnapshot(state=state, enabled=enabled))
            assert decision.start or decision.reason
