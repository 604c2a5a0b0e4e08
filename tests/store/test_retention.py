"""Retention on every backend: what pruning deletes and keeps, batches, removal, the CLI."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner, Result
from timeline import T0

from celery_cronstore.cli import cronstore
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store import runs as guard_runs
from celery_cronstore.store.retention import Pruner
from celery_cronstore.store.schema import fire

DAY = timedelta(days=1)
KEEP = 30 * DAY

#: (offset from now, state, leased, label): one ledger row; the label names it in asserts.
Row = tuple[timedelta, str, bool, str]


def ledger(store: Store, name: str, rows: Sequence[Row], now: datetime = T0) -> int:
    """Add task ``name`` (disabled: beat leaves it alone) and write ``rows`` to its ledger."""
    task = store.add(name, task="t.x", timer="every 1m", enabled=False)
    with store.begin() as conn:
        conn.execute(
            sa.insert(fire),
            [
                {
                    "periodic_task_id": task.id,
                    "fire_time": now + offset,
                    "task_id": f"{label}-{uuid.uuid4().hex[:12]}",
                    "state": state,
                    "lease_until": now + timedelta(minutes=5) if leased else None,
                    "reason": label,
                }
                for offset, state, leased, label in rows
            ],
        )
    return task.id


def labels(store: Store, name: str | None = None) -> set[str]:
    """Return the labels (reasons) of the ledger rows left, of one task or of all."""
    query = sa.select(fire.c.reason)
    if name is not None:
        query = query.where(fire.c.periodic_task_id == store.get(name).id)
    with store.engine.connect() as conn:
        return set(conn.execute(query).scalars())


def old(minutes: int, state: str, label: str, *, leased: bool = False, days: int = 40) -> Row:
    return (-days * DAY + timedelta(minutes=minutes), state, leased, label)


#: Every case of the rule, one task each: what goes and what stays.
CASES: dict[str, list[Row]] = {
    # Ended fires older than the cutoff go, whatever way they ended; newer ones stay.
    "ended": [
        old(0, "succeeded", "e-succeeded"),
        old(1, "failed", "e-failed"),
        old(2, "missed", "e-missed"),
        old(3, "skipped", "e-skipped"),
        old(4, "dropped", "e-dropped"),
        old(5, "expired", "e-expired"),
        old(6, "timed_out", "e-timed_out"),
        old(7, "published", "e-published"),  # a plain task's fire: nobody acts on it again
        (-29 * DAY, "succeeded", False, "e-recent"),
        (-DAY, "succeeded", False, "e-newest"),
    ],
    # A fire in flight stays, and so do the guard's reads around it: the one before it
    # (its previous fire) and every later one (did a later fire start?).
    "in-flight": [
        old(0, "succeeded", "f-gone-1"),
        old(1, "succeeded", "f-gone-2"),
        old(2, "succeeded", "f-previous"),
        old(3, "started", "f-started"),
        old(4, "succeeded", "f-later"),
        old(5, "succeeded", "f-newest"),
    ],
    # A CronTask fire waiting for its start (published with a start lease) is in flight.
    "leased": [
        old(0, "succeeded", "l-gone"),
        old(1, "succeeded", "l-previous"),
        old(2, "published", "l-waiting", leased=True),
        old(3, "claimed", "l-claimed", leased=True),
    ],
    # A task that stopped firing keeps its newest fire, however old.
    "dormant": [
        old(0, "succeeded", "d-gone", days=90),
        old(1, "succeeded", "d-newest", days=90),
    ],
    # A monthly task: its previous fire is older than the cutoff and the guard reads it.
    "monthly": [
        (-62 * DAY, "succeeded", False, "m-gone"),
        (-31 * DAY, "succeeded", False, "m-previous"),
        (timedelta(0), "claimed", True, "m-due"),
    ],
}

GONE = {
    "e-succeeded",
    "e-failed",
    "e-missed",
    "e-skipped",
    "e-dropped",
    "e-expired",
    "e-timed_out",
    "e-published",
    "f-gone-1",
    "f-gone-2",
    "l-gone",
    "d-gone",
    "m-gone",
}
ALL = {label for rows in CASES.values() for *_, label in rows}


@pytest.fixture
def cases(store: Store) -> Store:
    for name, rows in CASES.items():
        ledger(store, name, rows)
    return store


def test_prune_keeps_in_flight_newest_and_what_the_guard_reads(cases: Store) -> None:
    deleted = cases.prune(KEEP)
    assert labels(cases) == ALL - GONE
    assert sum(deleted.values()) == len(GONE)
    assert deleted["published"] == 1
    assert cases.prune(KEEP) == {}  # nothing more to do


def test_dry_run_counts_per_state_and_deletes_nothing(cases: Store) -> None:
    counts = cases.prune(KEEP, dry_run=True)
    assert labels(cases) == ALL
    assert counts == {
        "dropped": 1,
        "expired": 1,
        "failed": 1,
        "missed": 1,
        "published": 1,
        "skipped": 1,
        "succeeded": 6,
        "timed_out": 1,
    }
    assert cases.prune(KEEP) == counts


def test_prune_goes_in_batches_of_the_size_asked(cases: Store) -> None:
    pruner = Pruner(cases.db, batch=4)
    steps = []
    while True:
        step = pruner.step(KEEP)
        steps.append(step)
        assert step.scanned <= 4
        assert step.deleted <= 4
        if step.done:
            break
    assert len(steps) >= len(ALL) // 4
    assert sum(s.deleted for s in steps) == len(GONE)
    assert labels(cases) == ALL - GONE


def test_keep_forever_and_a_shorter_horizon(cases: Store) -> None:
    assert cases.prune(None) == {}
    assert labels(cases) == ALL
    cases.prune(2 * DAY)  # e-recent (29 days old) goes too; e-newest stays (newest)
    assert labels(cases, "ended") == {"e-newest"}


def test_a_pass_ends_at_rows_written_after_the_cutoff(store: Store) -> None:
    """The walk stops at the first batch with nothing older than the cutoff: an idle
    ledger costs one small read, however many recent rows it holds."""
    ledger(store, "busy", [(-timedelta(minutes=m), "succeeded", False, f"b{m}") for m in range(50)])
    pruner = Pruner(store.db, batch=10)
    step = pruner.step(KEEP)
    assert (step.done, step.scanned, step.deleted) == (True, 10, 0)
    assert pruner.after == 0


def count_deletes(store: Store) -> Iterator[list[int]]:
    """Collect the row count of every DELETE on the ledger while the generator runs."""
    counts: list[int] = []

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM CRONSTORE_FIRE"):
            counts.append(cursor.rowcount)

    sa.event.listen(store.engine, "after_cursor_execute", after)
    try:
        yield counts
    finally:
        sa.event.remove(store.engine, "after_cursor_execute", after)


@pytest.fixture
def deletes(store: Store) -> Iterator[list[int]]:
    yield from count_deletes(store)


def test_remove_deletes_a_big_history_in_batches(store: Store, deletes: list[int]) -> None:
    rows = [(-timedelta(minutes=m), "succeeded", False, f"h{m}") for m in range(25)]
    ledger(store, "big", rows)
    ledger(store, "other", rows[:3])
    store.remove("big", batch=10)
    assert deletes[:3] == [10, 10, 5]  # three transactions of at most 10 rows, oldest first
    assert max(deletes) <= 10
    assert [t.name for t in store.list()] == ["other"]
    assert len(labels(store, "other")) == 3


def test_remove_owned_by_deletes_in_batches(store: Store, deletes: list[int]) -> None:
    rows = [(-timedelta(minutes=m), "succeeded", False, f"o{m}") for m in range(12)]
    for name in ("a", "b"):
        task = ledger(store, name, rows)
        with store.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE cronstore_periodic_task SET owner_type = 'team', owner_id = '7' "
                f"WHERE id = {task}"
            )
    assert store.remove_owned_by("team", 7, batch=5) == 2
    assert max(deletes) <= 5
    assert store.list() == []
    assert labels(store) == set()


def test_a_removed_tasks_fire_is_unknown_to_the_guard(store: Store) -> None:
    from celery_cronstore.testing import FrozenClock

    assert isinstance(store.clock, FrozenClock)
    store.add("a", task="t.x", timer="every 1m")
    store.clock.advance(minutes=1)
    (claim,) = Claimer(store, "beat").claim_due().claims
    store.remove("a", batch=1)
    start = guard_runs.start_fire(store.db, claim.task_id, node="w")
    assert (start.started, start.outcome) == (False, "unknown")


def test_remove_disables_the_task_before_its_history_goes(store: Store) -> None:
    """Interrupted mid-way, a removal leaves the task disabled: nothing fires meanwhile."""
    rows = [(-timedelta(minutes=m), "succeeded", False, f"x{m}") for m in range(5)]
    ledger(store, "a", rows)
    store.update("a", enabled=True)
    seen: list[bool] = []

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM CRONSTORE_FIRE") and not seen:
            with store.engine.connect() as other:
                enabled = other.execute(
                    sa.text("SELECT enabled FROM cronstore_periodic_task WHERE name = 'a'")
                ).scalar_one()
            seen.append(bool(enabled))

    sa.event.listen(store.engine, "after_cursor_execute", after)
    try:
        store.remove("a", batch=2)
    finally:
        sa.event.remove(store.engine, "after_cursor_execute", after)
    assert seen == [False]


# -- the command line ---------------------------------------------------------------------


def run(db_url: str, *args: str, code: int = 0, **conf: Any) -> Result:
    app = Celery(f"prune-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.update(cronstore_url=db_url, **conf)
    result = CliRunner().invoke(
        cronstore, list(args), obj=CLIContext(app=app, no_color=True, workdir=None)
    )
    assert "Traceback" not in result.output
    assert result.exit_code == code, result.output
    return result


@pytest.fixture
def real(db_url: str) -> Iterator[Store]:
    """A store on the database's own clock, as the CLI reads it."""
    s = Store(db_url)
    now = s.now()
    for name, rows in CASES.items():
        ledger(s, name, rows, now)
    yield s
    s.close()


def test_cli_prune_dry_run_then_prune(db_url: str, real: Store) -> None:
    out = run(db_url, "prune", "--dry-run").output
    assert out.splitlines()[0].startswith(f"would delete {len(GONE)} ledger row(s) of fires")
    assert "  succeeded  6" in out.splitlines()
    assert labels(real) == ALL
    out = run(db_url, "prune", "--older-than", "30d", "--batch", "3").output
    assert out.startswith(f"deleted {len(GONE)} ledger row(s)")
    assert labels(real) == ALL - GONE
    data = run(db_url, "--json", "prune").stdout
    assert '"total": 0' in data


def test_cli_prune_reads_the_setting_and_checks_its_input(db_url: str, real: Store) -> None:
    out = run(db_url, "prune", "--dry-run", cronstore_history_days=1).output
    assert out.startswith(f"would delete {len(GONE) + 1} ledger row(s)")  # e-recent too
    err = run(db_url, "prune", code=1, cronstore_history_days=0).output
    assert "keep history forever" in err
    assert "--older-than" in run(db_url, "prune", "--older-than", "soon", code=2).output
    assert labels(real) == ALL
