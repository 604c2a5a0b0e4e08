"""What becomes of a started fire whose worker went silent, as a table: no database, no clock.

Each row is one :class:`~celery_cronstore.policy.AbandonSnapshot` (a base one, changed)
and what :func:`~celery_cronstore.policy.decide_abandoned` must answer: re-run or left,
and the reason written to the fire's ledger row.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from timeline import T0, at

from celery_cronstore.policy import (
    KILL_SLACK,
    AbandonSnapshot,
    abandoned_reason,
    decide_abandoned,
    killed_run_age,
)
from celery_cronstore.records import ABANDON_POLICIES

SILENT = "its worker w1 stopped reporting on the run (killed, or cut off from the database)"
#: The fire: due at T0, its worker silent since; beat looks 130 s later.
NOW = at(130)


def snapshot(**changes: Any) -> AbandonSnapshot:
    """Return the snapshot of a fire the rule re-runs, changed."""
    base = AbandonSnapshot(
        now=NOW,
        fire_time=T0,
        node="w1",
        policy="rerun",
        reruns=0,
        enabled=True,
        start_deadline=None,
        later=None,
        redeliverable=True,
    )
    return dataclasses.replace(base, **changes)


#: (id, snapshot changes, re-run?, reason)
TABLE: list[tuple[str, dict[str, Any], bool, str]] = [
    # 1. The default policy leaves it, with today's reason, whatever else holds.
    ("leave", {"policy": "leave"}, False, SILENT),
    ("leave-even-if-rerunnable", {"policy": "leave", "reruns": 0}, False, SILENT),
    ("leave-unknown-node", {"policy": "leave", "node": None}, False, abandoned_reason(None)),
    ("unknown-policy-is-left", {"policy": "RERUN"}, False, SILENT),
    # 2. At most one re-run: a re-run abandoned in turn is left.
    (
        "already-rerun",
        {"reruns": 1},
        False,
        f"{SILENT}; not re-run: it was already re-run 1 time(s) (at most 1)",
    ),
    # 3. Nothing runs after a disable (or a removal, which disables first).
    ("disabled", {"enabled": False}, False, f"{SILENT}; not re-run: the task is disabled"),
    # 4. Past the starting deadline: the guard would refuse it as expired.
    (
        "past-the-starting-deadline",
        {"start_deadline": 120.0},
        False,
        f"{SILENT}; not re-run: 130.0s after its fire time, past the starting deadline of 120s",
    ),
    ("deadline-boundary-is-in-time", {"start_deadline": 130.0}, True, ""),
    ("within-the-starting-deadline", {"start_deadline": 600.0}, True, ""),
    # 5. Superseded: a later fire started, or is claimed / published and will.
    (
        "superseded",
        {"later": T0 + timedelta(minutes=1)},
        False,
        f"{SILENT}; not re-run: superseded by the later fire 2026-01-05T12:01:00+00:00",
    ),
    # 6. A second publish must start at most once: a guard, or acks late.
    (
        "not-redeliverable",
        {"redeliverable": False},
        False,
        f"{SILENT}; not re-run: the task is not a CronTask and does not acknowledge late: "
        "publishing it again could run it twice",
    ),
    # The first that applies is the reason given.
    (
        "first-reason-wins",
        {"reruns": 1, "enabled": False, "start_deadline": 1.0, "redeliverable": False},
        False,
        f"{SILENT}; not re-run: it was already re-run 1 time(s) (at most 1)",
    ),
    (
        "disabled-before-deadline",
        {"enabled": False, "start_deadline": 1.0, "later": at(60)},
        False,
        f"{SILENT}; not re-run: the task is disabled",
    ),
    # 7. Otherwise: re-run, and the ledger says why it runs again.
    (
        "rerun",
        {},
        True,
        f"{SILENT}; published again under the same task id (abandon policy rerun)",
    ),
]


@pytest.mark.parametrize(
    ("changes", "rerun", "reason"),
    [pytest.param(*row[1:], id=row[0]) for row in TABLE],
)
def test_abandon_decision(changes: dict[str, Any], rerun: bool, reason: str) -> None:
    decision = decide_abandoned(snapshot(**changes))
    assert decision.rerun is rerun
    if reason:
        assert decision.reason == reason
    assert decision.reason.startswith(SILENT if changes.get("node", "w1") else "its worker ?")


def test_the_policies() -> None:
    assert ABANDON_POLICIES == ("leave", "rerun")
    assert ABANDON_POLICIES[0] == "leave"  # the default: today's behaviour


@pytest.mark.parametrize(
    ("time_limit", "age"),
    [
        (60, 55.0),  # the slack off a limit well over it
        (3600, 3600 - KILL_SLACK),
        (2 * KILL_SLACK, KILL_SLACK),  # from here down, half the limit
        (4, 2.0),
        (0.5, 0.25),
        (0, 0.0),
        (-3, 0.0),  # nonsense from the pool: no age fence beyond "started by now"
    ],
)
def test_a_hard_limit_kill_fences_on_a_run_that_started_most_of_the_limit_ago(
    time_limit: float, age: float
) -> None:
    assert killed_run_age(time_limit) == timedelta(seconds=age)
