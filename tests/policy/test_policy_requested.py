"""A fire asked for by hand (run-now, backfill; the ``cronstore_requested`` header) and the
CronTask guard: table tests of :func:`policy.decide_start`. Scheduled fires keep the
superseded and early rules; a requested one is judged on the rest only."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from timeline import T0

from celery_cronstore import policy
from celery_cronstore.states import FireState

H = timedelta(hours=1)


def snap(
    requested: bool, later: datetime | None, last_run: datetime | None
) -> policy.StartSnapshot:
    return policy.StartSnapshot(
        task_id="x",
        now=T0 + 5 * H,
        retries=0,
        state=FireState.PUBLISHED,
        fire_time=T0 + H,  # an old grid point: backfilled
        enabled=True,
        start_deadline=None,
        overlap_policy="allow",
        misfire_policy="run_once",
        last_run=last_run,
        interval=3600.0,
        tolerance=5.0,
        running=lambda: None,
        later_started=lambda: later,
        previous_fire=lambda: T0,
        requested=requested,
    )


@pytest.mark.parametrize(
    ("requested", "later", "last_run", "outcome"),
    [
        (False, T0 + 5 * H, T0 + 5 * H, FireState.DROPPED),  # superseded
        (False, None, T0 + 5 * H - timedelta(minutes=1), FireState.DROPPED),  # early
        (False, None, T0 + 3 * H, FireState.STARTED),
        (True, T0 + 5 * H, T0 + 5 * H, FireState.STARTED),
        (True, None, T0 + 5 * H - timedelta(minutes=1), FireState.STARTED),
    ],
)
def test_a_requested_fire_is_neither_superseded_nor_early(
    requested: bool, later: datetime | None, last_run: datetime, outcome: str
) -> None:
    assert policy.decide_start(snap(requested, later, last_run)).outcome == outcome


def test_a_requested_fire_is_still_refused_when_disabled_or_a_duplicate() -> None:
    disabled = snap(True, None, None)
    object.__setattr__(disabled, "enabled", False)
    assert policy.decide_start(disabled).outcome == FireState.DROPPED
    done = snap(True, None, None)
    object.__setattr__(done, "state", FireState.SUCCEEDED)
    assert policy.decide_start(done).outcome == "duplicate"
