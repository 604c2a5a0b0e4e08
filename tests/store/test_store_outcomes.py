"""Per-task health read from the ledger on every backend: the facts, the bound on the walk,
the "failing" filter, fires by state, lateness, and a statement count that does not grow
with the number of tasks."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from timeline import T0

from celery_cronstore.policy.outcomes import OutcomeFacts, consecutive_failures, health
from celery_cronstore.store import Store
from celery_cronstore.store.outcomes import (
    CHUNK,
    failing_clause,
    health_facts,
    lateness,
    look_health,
    outcome_counts,
    outcome_totals,
)
from celery_cronstore.store.read import TaskQuery, task_page
from celery_cronstore.store.schema import fire, periodic_task

MINUTE = timedelta(minutes=1)


def ledger(store: Store, task_id: int, states: Sequence[str], *, late: float = 2.0) -> None:
    """Write fires of ``states``, oldest first, one a minute ending at T0 (``missed*3``:
    a missed row standing for three grid points)."""
    rows = []
    for i, text in enumerate(states):
        state, _, count = text.partition("*")
        when = T0 - MINUTE * (len(states) - 1 - i)
        sent = state not in ("missed", "expired", "skipped")
        rows.append(
            {
                "periodic_task_id": task_id,
                "fire_time": when,
                "task_id": f"{task_id}-{i}",
                "state": state,
                "fire_count": int(count or 1),
                "published_at": when + timedelta(seconds=late) if sent else None,
                "finished_at": when + timedelta(seconds=late + 3) if sent else None,
            }
        )
    if rows:
        with store.begin() as conn:
            conn.execute(sa.insert(fire), rows)


@contextmanager
def counted(store: Store) -> Iterator[list[str]]:
    """Collect the statements run on the store's engine."""
    seen: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):  # not BEGIN, SET, ...
            seen.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", before)


def facts_of(store: Store, task_id: int, walk: int = 50) -> OutcomeFacts:
    with store.engine.connect() as conn:
        return health_facts(conn, [task_id], walk=walk)[task_id].facts


def test_facts_of_a_failing_task(store: Store) -> None:
    task = store.add("t", task="app.t", timer="every 1m")
    ledger(store, task.id, ["failed", "succeeded", "failed", "skipped", "missed*3", "timed_out"])
    facts = facts_of(store, task.id)
    assert facts.bad_in_row == 5  # failed + 3 missed grid points + timed_out; not skipped
    assert facts.success_fire == T0 - 4 * MINUTE
    assert facts.success_at == T0 - 4 * MINUTE + timedelta(seconds=5)
    assert facts.newest_fire == T0
    assert facts.newest_sent == T0 + timedelta(seconds=2)
    assert facts.walk_start is None
    shown = health(facts, T0 + timedelta(seconds=10))
    assert (shown.consecutive_failures, shown.failing, shown.late_by) == (5, True, 2.0)


def test_a_task_without_fires_and_a_healthy_one(store: Store) -> None:
    empty = store.add("empty", task="app.t", timer="every 1m")
    fine = store.add("fine", task="app.t", timer="every 1m")
    ledger(store, fine.id, ["failed", "succeeded", "published"])
    assert facts_of(store, empty.id) == OutcomeFacts(enabled=True, next_run=empty.next_run)
    assert facts_of(store, fine.id).bad_in_row == 0


def test_the_walk_is_bounded_and_says_at_least(store: Store) -> None:
    task = store.add("t", task="app.t", timer="every 1m")
    ledger(store, task.id, ["succeeded"] + ["failed"] * 12)
    facts = facts_of(store, task.id, walk=5)
    assert facts.bad_in_row == 5
    assert facts.walk_start == T0 - 4 * MINUTE
    assert health(facts, T0).failures_text == "5+"
    # The success is found however old it is (one index lookup, not part of the walk).
    assert facts.success_fire == T0 - 12 * MINUTE
    assert health(facts_of(store, task.id, walk=13), T0).failures_text == "12"


def test_the_query_agrees_with_the_rule_on_random_ledgers(store: Store) -> None:
    """The SQL count is the pure rule (``consecutive_failures``) over the newest rows."""
    rng = random.Random(24)
    choices = ["succeeded", "failed", "missed*2", "skipped", "lost", "published", "started"]
    tasks = {}
    for n in range(12):
        task = store.add(f"r{n}", task="app.t", timer="every 1m")
        ledger(store, task.id, [rng.choice(choices) for _ in range(rng.randint(0, 9))])
        tasks[task.name] = task.id
    with store.engine.connect() as conn:
        found = health_facts(conn, list(tasks.values()), walk=4)
    for name, task_id in tasks.items():
        rows = [(f.state, f.fire_count) for f in store.history(name, limit=100)]
        count, at_least = consecutive_failures(rows, 4)
        got = health(found[task_id].facts, T0)
        assert (got.consecutive_failures, got.at_least) == (count, at_least), (name, rows)


def test_failing_filter_of_the_task_list(store: Store) -> None:
    failing = store.add("a-failing", task="app.t", timer="every 1m")
    recovered = store.add("b-recovered", task="app.t", timer="every 1m")
    store.add("c-new", task="app.t", timer="every 1m")
    ledger(store, failing.id, ["succeeded", "failed", "skipped"])
    ledger(store, recovered.id, ["failed", "succeeded"])
    with store.engine.connect() as conn:
        only = task_page(conn, TaskQuery(failing=True)).rows
        others = task_page(conn, TaskQuery(failing=False)).rows
        flagged = conn.execute(
            sa.select(periodic_task.c.name).where(failing_clause()).order_by(periodic_task.c.name)
        ).scalars()
        assert list(flagged) == ["a-failing"]
    assert [t.name for t in only] == ["a-failing"]
    assert [t.name for t in others] == ["b-recovered", "c-new"]


def test_fires_by_state_and_lateness(store: Store) -> None:
    a = store.add("a", task="app.t", timer="every 1m")
    b = store.add("b", task="app.t", timer="every 1m")
    ledger(store, a.id, ["succeeded", "missed*4", "failed"], late=0.5)
    ledger(store, b.id, ["succeeded", "succeeded"], late=20.0)
    with store.engine.connect() as conn:
        assert outcome_counts(conn, [a.id]) == {a.id: {"succeeded": 1, "missed": 4, "failed": 1}}
        assert outcome_totals(conn) == {"succeeded": 3, "missed": 4, "failed": 1}
        seen = lateness(conn, T0 - timedelta(hours=1), T0, (1.0, 10.0, 30.0))
    assert seen.count == 4  # the missed row was never sent
    assert seen.buckets == [(1.0, 2), (10.0, 2), (30.0, 4)]
    assert abs(seen.total - 41.0) < 0.01


def test_many_tasks_cost_a_bounded_number_of_statements(store: Store) -> None:
    """2,000 tasks: one statement for all of them, or one per CHUNK ids; never one each."""
    now = T0
    with store.begin() as conn:
        conn.execute(
            sa.insert(periodic_task),
            [
                {
                    "name": f"bulk-{n:05d}",
                    "task": "app.t",
                    "timer_kind": "interval",
                    "timer": "every 1m",
                    "next_run": now + MINUTE,
                    "created_at": now,
                    "updated_at": now,
                }
                for n in range(2000)
            ],
        )
        ids = list(conn.execute(sa.select(periodic_task.c.id)).scalars())
        conn.execute(
            sa.insert(fire),
            [
                {
                    "periodic_task_id": i,
                    "fire_time": now - MINUTE * k,
                    "task_id": f"{i}-{k}",
                    "state": "failed" if (i + k) % 3 else "succeeded",
                }
                for i in ids
                for k in range(3)
            ],
        )
    with counted(store) as seen, store.engine.connect() as conn:
        everyone = health_facts(conn)
    assert len(everyone) == 2000
    assert len(seen) == 1
    with counted(store) as seen:
        _, some = look_health(store.db, ids)
    assert some == everyone
    # The ids in chunks (and the clock's own statement, when the database keeps it).
    assert len(seen) <= -(-2000 // CHUNK) + 1
    failing = sum(1 for f in everyone.values() if f.facts.bad_in_row)
    with counted(store) as seen, store.engine.connect() as conn:
        page = task_page(conn, TaskQuery(failing=True, per_page=500))
    assert len(page.rows) == min(500, failing)
    assert len(seen) == 2
