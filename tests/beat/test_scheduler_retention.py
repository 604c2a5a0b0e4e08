"""Beat prunes the fire ledger in its housekeeping: small batches within a budget, the rest
of a pass on a thread of its own, then a pause."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa
from celery import Celery
from timeline import T0

from celery_cronstore.beat import chores as upkeep
from celery_cronstore.beat.chores import Chores
from celery_cronstore.beat.scheduler import Scheduler
from celery_cronstore.errors import StoreUnavailableError
from celery_cronstore.store import Store
from celery_cronstore.store.retention import Pruner
from celery_cronstore.store.schema import fire
from celery_cronstore.testing import FrozenClock


@pytest.fixture
def app(sqlite_url: str) -> Celery:
    app = Celery("t", broker="memory://", set_as_current=False)
    app.conf.update(cronstore_url=sqlite_url, task_default_queue="q")
    return app


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    """The shared SQLite store (tests/conftest.py): beat here runs on the memory broker."""
    return sqlite_store


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


def chores_of(scheduler: Scheduler) -> Chores:
    assert scheduler.loop is not None
    return scheduler.loop.chores


def pruner_of(scheduler: Scheduler) -> Pruner:
    pruner = chores_of(scheduler).pruner
    assert pruner is not None
    return pruner


def housekeep(scheduler: Scheduler) -> None:
    chores_of(scheduler).next_due = 0.0  # as if HEARTBEAT_EVERY seconds went by
    scheduler.tick()


def make(app: Celery, store: Store, batch: int = 1000) -> Scheduler:
    scheduler = Scheduler(app, lazy=True)
    scheduler.store = store  # share the frozen clock
    scheduler.setup_schedule()  # open the store and build the parts, no tick yet
    chores_of(scheduler).pruner = Pruner(store.db, batch=batch)
    return scheduler


def finish(scheduler: Scheduler) -> None:
    """Wait for the prune thread, if housekeeping started one."""
    finisher = chores_of(scheduler).finisher
    if finisher is not None:
        assert finisher.wait(10), "the prune thread did not end"


def test_without_room_the_rest_of_the_pass_goes_on_off_the_beat_thread(
    app: Celery, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upkeep, "PRUNE_BUDGET", 0.0)  # no time for a second batch
    write_history(store, 40, 25)  # 24 may go (the newest stays)
    write_history(store, 1, 5)  # recent: stays
    scheduler = make(app, store, batch=10)
    threads: list[str] = []
    step = pruner_of(scheduler).step

    def watched(*args: object, **kwargs: object) -> object:
        threads.append(threading.current_thread().name)
        return step(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pruner_of(scheduler), "step", watched)
    housekeep(scheduler)
    finish(scheduler)
    assert ledger_size(store) == 6
    # One batch on beat's thread, the rest (three more batches of 10) on the prune thread.
    assert threads == ["MainThread", "cronstore-prune", "cronstore-prune", "cronstore-prune"]
    scheduler.close()


def test_beat_starts_no_pass_while_the_prune_thread_runs(
    app: Celery, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upkeep, "PRUNE_BUDGET", 0.0)
    write_history(store, 40, 25)
    scheduler = make(app, store, batch=10)
    calls: list[str] = []
    release = threading.Event()
    step = pruner_of(scheduler).step

    def held(*args: object, **kwargs: object) -> object:
        calls.append(threading.current_thread().name)
        if threading.current_thread().name == "cronstore-prune":
            release.wait(10)
        return step(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pruner_of(scheduler), "step", held)
    housekeep(scheduler)  # one batch here, then the thread holds in its first batch
    pruner_of(scheduler).resume_at = 0.0
    housekeep(scheduler)
    assert calls == ["MainThread", "cronstore-prune"]  # no second pass meanwhile
    release.set()
    finish(scheduler)
    assert ledger_size(store) == 1
    scheduler.close()


def test_an_in_memory_store_prunes_one_batch_per_housekeeping(
    monkeypatch: pytest.MonkeyPatch, clock: FrozenClock
) -> None:
    """One shared connection (``sqlite://``): no thread, one batch per housekeeping."""
    monkeypatch.setattr(upkeep, "PRUNE_BUDGET", 0.0)
    app = Celery("t", broker="memory://", set_as_current=False)
    app.conf.update(cronstore_url="sqlite://", task_default_queue="q")
    store = Store("sqlite://", clock=clock)
    store.upgrade()
    write_history(store, 40, 25)  # 24 may go (the newest stays)
    write_history(store, 1, 5)  # recent: stays
    scheduler = make(app, store, batch=10)
    sizes = []
    for _ in range(4):
        housekeep(scheduler)
        sizes.append(ledger_size(store))
    assert chores_of(scheduler).finisher is None
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
    pruner_of(scheduler).resume_at = 0.0  # a minute later
    housekeep(scheduler)
    finish(scheduler)
    # No budget: one batch here, the rest of the pass on the prune thread.
    assert ledger_size(store) == 6 + 1
    scheduler.close()


def test_pruning_stops_short_of_the_next_fire(
    app: Celery, store: Store, clock: FrozenClock
) -> None:
    """The budget never runs into the next fire's claim: with a fire due in 0.1 s beat
    prunes one batch and hands the rest to the prune thread; with none due it drains the
    backlog itself."""
    write_history(store, 40, 25)
    write_history(store, 1, 5)
    store.add("soon", task="x.do", timer=(T0 + timedelta(seconds=0.1)).isoformat())
    scheduler = make(app, store, batch=10)
    housekeep(scheduler)
    assert chores_of(scheduler).finisher is not None  # one batch here: the fire comes first
    finish(scheduler)
    assert ledger_size(store) == 6
    write_history(store, 39, 25)  # another task: 24 may go
    store.disable("soon")
    pruner_of(scheduler).resume_at = 0.0
    housekeep(scheduler)
    assert chores_of(scheduler).finisher is None  # room enough: no thread
    assert ledger_size(store) == 7
    scheduler.close()


def test_after_a_pass_beat_waits_before_pruning_again(app: Celery, store: Store) -> None:
    scheduler = make(app, store)
    housekeep(scheduler)  # an empty ledger: the pass ends at once
    write_history(store, 40, 3)
    housekeep(scheduler)
    assert ledger_size(store) == 3  # the idle pause: no prune query this time
    pruner_of(scheduler).resume_at = 0.0  # a minute later
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

    def broken(*args: object, **kwargs: object) -> None:
        raise StoreUnavailableError("sqlite:///cronstore.sqlite", "database is locked")

    monkeypatch.setattr(pruner_of(scheduler), "step", broken)
    housekeep(scheduler)
    assert "pruning the fire ledger failed" in caplog.text
    assert scheduler.loop is not None
    assert scheduler.loop.backoff.failures == 0
    scheduler.close()


def test_a_pass_that_deleted_a_batch_is_followed_at_the_next_housekeeping(
    app: Celery, store: Store
) -> None:
    """A ledger written fast keeps its history plus seconds of fires, not plus a minute."""
    write_history(store, 40, 25)  # 24 go: more than a batch of 10
    scheduler = make(app, store, batch=10)
    housekeep(scheduler)
    finish(scheduler)
    assert ledger_size(store) == 1
    write_history(store, 39, 5)  # 4 go, at once: no minute's pause
    housekeep(scheduler)
    finish(scheduler)
    assert ledger_size(store) == 2
    write_history(store, 38, 5)  # that pass deleted less than a batch: now it waits
    housekeep(scheduler)
    finish(scheduler)
    assert ledger_size(store) == 2 + 5
    scheduler.close()
