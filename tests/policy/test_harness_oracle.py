"""The fault harness's oracle on hand-made ledgers: it must pass the legal cases and flag
the illegal ones (a wrong oracle turns CI red for a correct scheduler, or hides a bug)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from celery_cronstore.store.schema import fire, metadata, periodic_task
from harness.app import events
from harness.app import metadata as harness_metadata
from harness.oracle import AHEAD, judge

CREATED = datetime(2026, 11, 24, 11, 57, 30, 400_000, tzinfo=timezone.utc)
#: The disable committed 50 ms before the 11:57:38 grid point (inside the claim-ahead).
DISABLED = datetime(2026, 11, 24, 11, 57, 37, 950_000, tzinfo=timezone.utc)


def _ledger(rows: list[dict[str, object]]) -> sa.Engine:
    engine = sa.create_engine("sqlite://")
    metadata.create_all(engine)
    harness_metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            periodic_task.insert().values(
                id=1,
                name="cal-1s",
                task="harness.app.plain",
                timer_kind="calendar",
                timer="*-*-* *:*:*",
                tz="UTC",
                enabled=False,
                created_at=CREATED,
                updated_at=DISABLED,
            )
        )
        for n, row in enumerate(rows):
            values = {"periodic_task_id": 1, "task_id": f"t{n}", **row}
            conn.execute(fire.insert().values(**values))
            if row["state"] == "succeeded":
                conn.execute(
                    events.insert().values(
                        kind="delivery",
                        task_id=f"t{n}",
                        name="cal-1s",
                        fire_time=row["fire_time"],
                        at=row["fire_time"],
                    )
                )
    return engine


def _on_time() -> list[dict[str, object]]:
    """Every grid point from 11:57:31 to 11:57:37, delivered on time."""
    start = datetime(2026, 11, 24, 11, 57, 31, tzinfo=timezone.utc)
    return [
        {"fire_time": start + timedelta(seconds=s), "state": "succeeded", "claimed_at": None}
        for s in range(7)
    ]


def test_a_fire_claimed_ahead_of_the_disable_and_dropped_is_legal() -> None:
    after = datetime(2026, 11, 24, 11, 57, 38, tzinfo=timezone.utc)
    assert after - DISABLED < AHEAD
    dropped = {
        "fire_time": after,
        "state": "dropped",
        "reason": "the task was disabled before its fire was published",
        "claimed_at": after - timedelta(milliseconds=80),
    }
    result = judge("t", _ledger([*_on_time(), dropped]), {"cal-1s": DISABLED})
    assert result.violations == []
    assert result.expected == 5  # the last 2 s before the disable are not expected
    assert result.delivered == 5


@pytest.mark.parametrize(
    ("row", "violation"),
    [
        (
            {"fire_time": datetime(2026, 11, 24, 11, 57, 38, tzinfo=timezone.utc)},
            "claimed after the disable",
        ),
        (
            {
                "fire_time": datetime(2026, 11, 24, 11, 57, 38, 10_000, tzinfo=timezone.utc),
                "state": "dropped",
                "reason": "the task was disabled",
            },
            "is not on the grid",
        ),
        (
            {
                "fire_time": datetime(2026, 11, 24, 11, 57, 40, tzinfo=timezone.utc),
                "state": "dropped",
                "reason": "the task was disabled",
            },
            "claimed after the disable",
        ),
    ],
    ids=["published-after-disable", "off-grid-drop", "drop-beyond-claim-ahead"],
)
def test_rows_after_the_disable_are_flagged(row: dict[str, object], violation: str) -> None:
    late = {"state": "succeeded", "claimed_at": None, **row}
    result = judge("t", _ledger([*_on_time(), late]), {"cal-1s": DISABLED})
    assert any(violation in v for v in result.violations), result.violations


def test_a_missing_grid_point_is_lost() -> None:
    gap = datetime(2026, 11, 24, 11, 57, 33, tzinfo=timezone.utc)
    rows = [r for r in _on_time() if r["fire_time"] != gap]
    result = judge("t", _ledger(rows), {"cal-1s": DISABLED})
    assert result.lost == 1
    assert any("has no ledger row" in v for v in result.violations)
