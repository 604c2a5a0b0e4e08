"""When beat vacuums its own tables: a table of cases for ``policy.vacuum.to_vacuum``."""

from __future__ import annotations

import pytest

from celery_cronstore.policy.vacuum import DEAD_MIN, QUIET, TableStats, out_of_reach, to_vacuum


@pytest.mark.parametrize(
    ("live", "dead", "since", "allowed", "vacuum"),
    [
        (1_000_000, 60_000, None, True, True),  # never vacuumed, 6% dead
        (1_000_000, 60_000, QUIET + 1, True, True),  # the last vacuum is a while ago
        (1_000_000, 60_000, QUIET - 1, True, False),  # one just ended: leave it
        (1_000_000, 40_000, None, True, False),  # under 5% of the live rows
        (1_000, DEAD_MIN - 1, None, True, False),  # a small table: under the floor
        (1_000, DEAD_MIN, None, True, True),  # ... at the floor
        (1_000_000, 900_000, None, False, False),  # not the owner: nothing to try
    ],
    ids=["never", "quiet", "recent", "few", "under-floor", "floor", "not-allowed"],
)
def test_to_vacuum(live: int, dead: int, since: float | None, allowed: bool, vacuum: bool) -> None:
    tables = [TableStats("cronstore_periodic_task", live, dead, since, allowed)]
    assert to_vacuum(tables) == (["cronstore_periodic_task"] if vacuum else [])


@pytest.mark.parametrize(
    ("dead", "since", "allowed", "warned"),
    [
        (900_000, None, False, True),  # needs a vacuum beat may not run: say so
        (900_000, QUIET - 1, False, False),  # someone (autovacuum, the owner) just did
        (DEAD_MIN - 1, None, False, False),  # not enough dead rows to matter
        (900_000, None, True, False),  # beat vacuums it itself
    ],
    ids=["blocked", "recent", "few", "allowed"],
)
def test_out_of_reach(dead: int, since: float | None, allowed: bool, warned: bool) -> None:
    table = TableStats("cronstore_fire", 1_000_000, dead, since, allowed)
    assert out_of_reach([table]) == ([table] if warned else [])


def test_each_table_is_judged_on_its_own() -> None:
    tables = [
        TableStats("cronstore_periodic_task", 100_000, 50, 10.0, True),
        TableStats("cronstore_fire", 200_000, 150_000, None, True),
    ]
    assert to_vacuum(tables) == ["cronstore_fire"]
