"""Beat prunes the fire ledger in its housekeeping: one small batch, then a pause."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from celery import Celery
from timeline import T0

from celery_cronstore import upkeep
from celery_cronstore.scheduler import Scheduler
from celery_cronstore.store import Store
from celery_cronstore.store.retention import Pruner
from celery_cronstore.store.schema import fire
from celery_cronstore.testing import FrozenClock


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cronstore.sqlite'}"


@pytest.fixture
def app(url: str) -> Celery:
    app = Celery("t", broker="memory://", set_as_current=False)
    app.conf.update(cronstore_url=url, task_default_queue="q")
    return app


@pytest.fixture
def store(url: str, clock: FrozenClock) -> Iterator[Store]:
    s = Store(url, clock=clock)
    s.upgrade()
    yield s
    s.close()


def write_history(store: Store, days_ago: float, count: int) -> None:
    """Write ``count`` ended fires of a disabled task, ``days_ago`` days back."""
    name = f"h{days_ago}-{count}"
    task = store.add(name, task="x.do", timer="every 1m", enabled=False)
    start = T0 - timedelta(days=days_ago)
    with store.begin() as conn:
        conn.execute(
            sa.insert(fire),
            [
                {
                    "periodic_task_id": task.id,
                    "fire_time": start + timedelta(minutes=i),
                    "task_id": f"{name}-{i}",
                    "state": "succeeded",
                }
                for i in range(count)
            ],
        )


def ledger_size(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(fire)).scalar_one())


def housekeep(scheduler: Scheduler) -> None:
    scheduler._next_housekeeping = 0.0  # as if HEARTBEAT_EVERY seconds went by
    scheduler.tick()


def make(app: Celery, store: Store, batch: int = 1000) -> Scheduler:
    scheduler = Scheduler(app, lazy=True)
    scheduler.store = store  # share the frozen clock
    scheduler._pruner = Pruner(store.db, batch=batch)
    return scheduler


def test_housekeeping_prunes_one_batch_at_a_time(
    app: Celery, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upkeep, "PRUNE_BUDGET", 0.0)  # no time for a second batch
    write_history(store, 40, 25)  # 24 may go (the newest stays)
    write_history(store, 1, 5)  # recent: stays
    scheduler = make(app, store, batch=10)
    sizes = []
    for _ in range(4):
        housekeep(scheduler)
        sizes.append(ledger_size(store))
    assert sizes == [20, 10, 6, 6]  # 10 rows read per housekeeping, never more
    scheduler.close()


def test_a_backlog_drains_in_batches_within_the_budget(
    app: Celery, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_history(store, 40, 25)
    write_history(store, 1, 5)
    scheduler = make(app, store, batch=10)
    housekeep(scheduler)  # three batches of 10 in one housekeeping (well under 0.5 s)
    assert ledger_size(store) == 6
    write_history(store, 39, 25)  # another task: 24 may go
    monkeypatch.setattr(upkeep, "PRUNE_BUDGET", 0.0)
    assert scheduler._pruner is not None
    scheduler._pruner.resume_at = 0.0  # a minute later
    housekeep(scheduler)
    # No budget: one batch of 10 rows read, the 6 kept ones first by id, 4 deleted.
    assert ledger_size(store) == 6 + 25 - 4
    scheduler.close()


def test_pruning_stops_short_of_the_next_fire(
    app: Celery, store: Store, clock: FrozenClock
) -> None:
    """The budget never runs into the next fire's claim: with a fire due in 0.1 s a
    housekeeping prunes one batch only, with none due it drains the backlog."""
    write_history(store, 40, 25)
    write_history(store, 1, 5)
    store.add("soon", task="x.do", timer=(T0 + timedelta(seconds=0.1)).isoformat())
    scheduler = make(app, store, batch=10)
    housekeep(scheduler)
    assert ledger_size(store) == 30 - 10  # one batch: the fire comes first
    store.disable("soon")
    assert scheduler._pruner is not None
    scheduler._pruner.resume_at = 0.0
    housekeep(scheduler)
    assert ledger_size(store) == 6
    scheduler.close()


def test_after_a_pass_beat_waits_before_pruning_again(app: Celery, store: Store) -> None:
    scheduler = make(app, store)
    housekeep(scheduler)  # an empty ledger: the pass ends at once
    write_history(store, 40, 3)
    housekeep(scheduler)
    assert ledger_size(store) == 3  # the idle pause: no prune query this time
    assert scheduler._pruner is not None
    scheduler._pruner.resume_at = 0.0  # a minute later
    housekeep(scheduler)
    assert ledger_size(store) == 1
    scheduler.close()


def test_history_days_zero_keeps_everything(app: Celery, store: Store) -> None:
    app.conf.cronstore_history_days = 0
    write_history(store, 400, 3)
    scheduler = make(app, store)
    housekeep(scheduler)
    assert ledger_size(store) == 3
    scheduler.close()


def test_a_failed_prune_never_stops_the_tick(
    app: Celery, store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = make(app, store)
    assert scheduler._pruner is not None

    def broken(*args: object, **kwargs: object) -> None:
        raise sa.exc.OperationalError("DELETE", {}, Exception("database is locked"))

    monkeypatch.setattr(scheduler._pruner, "step", broken)
    housekeep(scheduler)
    assert "pruning the fire ledger failed" in caplog.text
    assert scheduler._failures == 0
    scheduler.close()
