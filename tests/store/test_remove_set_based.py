"""``Store.remove_owned_by`` is set-based and keeps its documented semantics (issue 30).

Removing 100,000 tasks took 82.5 s: each task's history went in transactions of its
own. Now one statement disables all of an owner's tasks, their ledgers go in bounded
batches across the tasks, then the task rows in batches. On SQLite, PostgreSQL and
MariaDB: the history goes, other owners keep everything, the ledger goes each task's
oldest fire first and at most ``batch`` rows per transaction, a removal killed half-way
leaves its tasks disabled (nothing is claimed for them) and running it again finishes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from timeline import T0

from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.testing import FrozenClock

REPO = Path(__file__).resolve().parents[2]


def populate(store: Store, owner: tuple[str, str], tasks: int, fires: int) -> list[int]:
    """Add ``tasks`` tasks of ``owner`` (every minute, enabled), each with ``fires``
    ledger rows (written newest first, so key order is not fire-time order)."""
    ids = [
        store.add(
            f"{owner[0]}-{owner[1]}-{n}", task="t.x", timer="every 1m", owner=owner, tz="UTC"
        ).id
        for n in range(tasks)
    ]
    rows = [
        {
            "periodic_task_id": task_id,
            "fire_time": T0 - timedelta(minutes=m),
            "task_id": uuid.uuid4().hex,
            "state": "succeeded",
        }
        for task_id in ids
        for m in range(1, fires + 1)
    ]
    with store.begin() as conn:
        conn.execute(sa.insert(fire), rows)
    return ids


def ledger_of(store: Store, task_ids: list[int], *, state: str | None = None) -> int:
    """Return how many ledger rows ``task_ids`` have (in ``state``, if given)."""
    query = sa.select(sa.func.count()).where(fire.c.periodic_task_id.in_(task_ids))
    if state is not None:
        query = query.where(fire.c.state == state)
    with store.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def tasks_of(store: Store, owner_id: str) -> list[tuple[str, bool]]:
    """Return (name, enabled) of every task of ``("team", owner_id)``."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(periodic_task.c.name, periodic_task.c.enabled)
            .where(periodic_task.c.owner_type == "team", periodic_task.c.owner_id == owner_id)
            .order_by(periodic_task.c.id)
        ).all()
    return [(name, bool(enabled)) for name, enabled in rows]


class Recorder:
    """Watch the statements a removal sends: the rows each transaction deleted from the
    ledger, the UPDATEs of the task table."""

    def __init__(self) -> None:
        self.per_transaction: list[int] = [0]
        self.updates = 0

    def after(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        text = statement.lstrip().upper()
        if text.startswith("DELETE FROM CRONSTORE_FIRE"):
            self.per_transaction[-1] += max(cursor.rowcount, 0)
        elif text.startswith("UPDATE CRONSTORE_PERIODIC_TASK"):
            self.updates += 1

    def commit(self, conn: Any) -> None:
        self.per_transaction.append(0)


@pytest.fixture
def recorder(store: Store) -> Iterator[Recorder]:
    rec = Recorder()
    hooks = [("after_cursor_execute", rec.after), ("commit", rec.commit)]
    for name, hook in hooks:
        sa.event.listen(store.engine, name, hook)
    try:
        yield rec
    finally:
        for name, hook in hooks:
            sa.event.remove(store.engine, name, hook)


def test_removes_the_owners_tasks_and_history_and_nothing_else(
    store: Store, recorder: Recorder
) -> None:
    gone = populate(store, ("team", "a"), tasks=30, fires=4)
    kept = populate(store, ("team", "b"), tasks=5, fires=3)
    free = store.add("free", task="t.x", timer="every 1m").id
    with store.begin() as conn:
        conn.execute(
            sa.insert(fire).values(
                periodic_task_id=free, fire_time=T0, task_id="free-1", state="succeeded"
            )
        )
    assert store.remove_owned_by("team", "a", batch=7) == 30

    assert tasks_of(store, "a") == []
    assert ledger_of(store, gone) == 0
    assert tasks_of(store, "b") == [(f"team-b-{n}", True) for n in range(5)]
    assert ledger_of(store, kept) == 15
    assert ledger_of(store, [free]) == 1
    assert store.get("free").enabled
    # Set-based: one UPDATE disables all 30; the 120 ledger rows go 7 per transaction
    # across the tasks (17 full batches and the last row), not one transaction per task.
    assert recorder.updates == 1
    assert [n for n in recorder.per_transaction if n] == [7] * 17 + [1]


def test_removing_an_owner_with_no_tasks_removes_nothing(store: Store) -> None:
    populate(store, ("team", "b"), tasks=2, fires=1)
    assert store.remove_owned_by("team", "nobody") == 0
    assert len(tasks_of(store, "b")) == 2


@pytest.mark.parametrize("batch", [0, -1, 1.5, True])
def test_a_bad_batch_is_refused_before_anything_changes(store: Store, batch: Any) -> None:
    populate(store, ("team", "a"), tasks=1, fires=1)
    with pytest.raises(ValueError, match="batch must be a positive number of rows"):
        store.remove_owned_by("team", "a", batch=batch)
    assert tasks_of(store, "a") == [("team-a-0", True)]


def assert_oldest_went_first(store: Store, task_ids: list[int], fires: int) -> None:
    """Assert what an interrupted removal left: tasks in id order, each one's oldest fires
    first, so the first tasks have no history left, then one task has its newest fires,
    and the rest have all of theirs."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(fire.c.periodic_task_id, fire.c.fire_time).where(
                fire.c.periodic_task_id.in_(task_ids)
            )
        ).all()
    ages: dict[int, set[int]] = {task_id: set() for task_id in task_ids}
    for task_id, when in rows:
        ages[task_id].add(round((T0 - when).total_seconds() / 60))
    counts = [len(ages[task_id]) for task_id in sorted(task_ids)]
    cut = next(i for i, n in enumerate(counts) if n)
    assert counts[cut + 1 :] == [fires] * (len(counts) - cut - 1), counts
    assert ages[sorted(task_ids)[cut]] == set(range(1, counts[cut] + 1)), "newest are left"


#: The removal a killed process was running: one ledger row per transaction, so slow.
REMOVER = """\
import os
from celery_cronstore.store import Store

Store(os.environ["REMOVE_STORE"]).remove_owned_by("team", "a", batch=1)
"""


@pytest.mark.slow
def test_a_killed_removal_leaves_its_tasks_disabled_and_finishes_when_run_again(
    store: Store, db_url: str, clock: FrozenClock
) -> None:
    gone = populate(store, ("team", "a"), tasks=40, fires=100)
    kept = populate(store, ("team", "b"), tasks=3, fires=2)
    total = ledger_of(store, gone)
    env = {**os.environ, "REMOVE_STORE": db_url}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    remover = subprocess.Popen([sys.executable, "-c", REMOVER], env=env)
    try:
        deadline = time.monotonic() + 60
        while ledger_of(store, gone) == total:  # the disable has committed by then
            assert remover.poll() is None, "the removal ended before its ledger went"
            assert time.monotonic() < deadline, "the removal never started on the ledger"
            time.sleep(0.01)

        # Mid-removal: due, but disabled, so not claimed; the other owner's tasks are.
        clock.advance(minutes=5)
        claims = Claimer(store, "beat").claim_due().claims
        assert remover.poll() is None, "the removal ended before the claim: make it slower"
        assert sorted(c.name for c in claims) == [f"team-b-{n}" for n in range(3)]

        remover.send_signal(signal.SIGKILL)
        remover.wait(timeout=30)
    finally:
        if remover.poll() is None:
            remover.kill()
            remover.wait()

    left = ledger_of(store, gone)
    assert 0 < left < total, "killed half-way: part of the history is left"
    assert_oldest_went_first(store, gone, fires=100)
    assert tasks_of(store, "a") == [(f"team-a-{n}", False) for n in range(40)]
    clock.advance(minutes=5)
    claims = Claimer(store, "beat").claim_due().claims
    assert {c.name for c in claims} == {f"team-b-{n}" for n in range(3)}

    assert store.remove_owned_by("team", "a") == 40  # running it again finishes
    assert tasks_of(store, "a") == []
    assert ledger_of(store, gone) == 0
    assert ledger_of(store, kept, state="succeeded") == 3 * 2  # their history is all there
