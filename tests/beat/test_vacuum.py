"""PostgreSQL: beat vacuums its hot tables itself when autovacuum has not (it may be off,
as on this project's CI server, or behind); a dead-row pile-up in the due index made the
idle tick 60x dearer after 2,000,000 fires (benchmarks/churn.py)."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from celery_cronstore.beat.threads import Vacuumer
from celery_cronstore.policy import vacuum as rule
from celery_cronstore.store import Store
from celery_cronstore.store.schema import periodic_task
from celery_cronstore.store.vacuum import table_stats, vacuum

# serial: waits on PostgreSQL's statistics and a VACUUM within fixed times.
pytestmark = pytest.mark.serial


def _dead(store: Store) -> int:
    (tasks,) = [t for t in table_stats(store.db) if t.name == periodic_task.name]
    return tasks.dead


def _wait_for(check: object, what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_beat_vacuums_a_table_autovacuum_left_alone(
    direct: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rule, "DEAD_MIN", 200)
    monkeypatch.setattr(rule, "QUIET", 0.0)
    for n in range(20):
        direct.add(f"v{n}", task="x.do", timer="every 1h")
    for _ in range(15):  # 300 dead versions of the due index's rows
        with direct.begin() as conn:
            conn.execute(
                sa.update(periodic_task).values(
                    next_run=periodic_task.c.next_run + sa.text("interval '1 second'")
                )
            )
    _wait_for(lambda: _dead(direct) >= 200, "the statistics to count the dead rows")
    before = _dead(direct)
    vacuumer = Vacuumer(direct.db, str)
    assert vacuumer.look(1000.0)
    assert vacuumer.wait(60), "the vacuum did not end"
    assert periodic_task.name in vacuumer.vacuumed
    _wait_for(lambda: _dead(direct) < before, "the vacuum to show in the statistics")
    assert not vacuumer.look(1000.0 + rule.LOOK_EVERY - 1)  # once a minute at most
    assert vacuumer.look(1000.0 + rule.LOOK_EVERY)
    assert vacuumer.wait(60)


def test_only_the_store_s_tables_are_vacuumed(direct: Store) -> None:
    with pytest.raises(ValueError, match="not one of the store's hot tables"):
        vacuum(direct.db, "pg_class; DROP TABLE cronstore_fire")
    # The session goes back to the pool with its statement timeout.
    with direct.engine.connect() as conn:
        limit = conn.exec_driver_sql("SHOW statement_timeout").scalar_one()
    vacuum(direct.db, periodic_task.name)
    with direct.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW statement_timeout").scalar_one() == limit
