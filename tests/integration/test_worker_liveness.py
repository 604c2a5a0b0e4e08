"""Run liveness and the outbox: a started fire whose worker went silent is abandoned, a
live one is kept, and an end record the database refused is delivered later."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from timeline import at

from celery_cronstore.store import Claimer, Store, runs
from celery_cronstore.testing import FrozenClock
from celery_cronstore.worker import Liveness


def _started(
    store: Store, clock: FrozenClock, name: str, abandon_after: float = 30, **fields: object
) -> str:
    store.add(name, task="t.run", timer="every 1m", **fields)  # type: ignore[arg-type]
    clock.set(at(60))
    claimer = Claimer(store, "beat")
    (claim,) = [c for c in claimer.claim_due().claims if c.name == name]
    claimer.mark_published([claim])
    decision = runs.start_fire(store.db, claim.task_id, node="w1", abandon_after=abandon_after)
    assert decision.started
    return claim.task_id


def test_a_silent_worker_s_fire_is_abandoned_and_no_longer_blocks_skip(
    store: Store, clock: FrozenClock
) -> None:
    """Regression: a killed worker's fire stayed "started" and held an overlap-skip task
    back for six hours (every fire in between recorded skipped)."""
    task_id = _started(store, clock, "solo", abandon_after=90, overlap_policy="skip")
    beat = Claimer(store, "beat")
    clock.set(at(120))  # the next fire is due while the run's lease (to 150) holds
    assert [c.name for c in beat.claim_due().claims] == []
    assert store.history("solo")[0].state == "skipped"
    assert beat.abandon_silent() == 0
    clock.set(at(180))  # the worker never reported again
    assert beat.abandon_silent() == 1
    fire = store.fire_by_task_id(task_id)
    assert fire is not None
    assert fire.state == "abandoned"
    assert (
        fire.reason
        == "its worker w1 stopped reporting on the run (killed, or cut off from the database)"
    )
    assert [c.fire_time for c in beat.claim_due().claims] == [at(180)]


def test_heartbeats_keep_a_long_run_alive(store: Store, clock: FrozenClock) -> None:
    task_id = _started(store, clock, "long")
    beat = Claimer(store, "beat")
    for second in range(80, 300, 20):  # a worker renewing every 20 s
        clock.set(at(second))
        assert runs.keep_alive(store.db, [task_id], 30) == 1
        assert beat.abandon_silent() == 0
    assert runs.finish_fire(store.db, task_id, "succeeded", result="done")
    assert runs.keep_alive(store.db, [task_id], 30) == 0  # ended fires are not touched


def test_a_retrying_fire_waits_for_its_retry_not_for_heartbeats(
    store: Store, clock: FrozenClock
) -> None:
    task_id = _started(store, clock, "flaky")
    assert runs.finish_fire(store.db, task_id, "retrying", error="boom", hold=600)
    clock.set(at(600))
    assert Claimer(store, "beat").abandon_silent() == 0
    clock.set(at(60 + 601))
    assert Claimer(store, "beat").abandon_silent() == 1


def test_an_end_record_the_database_refused_is_delivered_later(tmp_path: Path) -> None:
    """Regression: database restarts left finished runs "started" (the worker logged
    "could not record succeeded" and never tried again)."""
    path = tmp_path / "store.sqlite"
    clock = FrozenClock(at(0))
    store = Store(f"sqlite:///{path}", clock=clock)
    store.upgrade()
    task_id = _started(store, clock, "job")
    live = Liveness(store, abandon_after=30)
    live.started(task_id)
    away = tmp_path / "away.sqlite"
    store.engine.dispose()
    os.rename(path, away)  # the database is gone: new connections find no tables
    try:
        assert live.finish(task_id, "succeeded", result={"n": 1}) is None
        assert len(live.outbox) == 1
        with pytest.raises(Exception, match="no such table"):
            live.beat()
    finally:
        store.engine.dispose()
        os.replace(away, path)
    live.beat()
    assert not live.outbox
    fire = store.fire_by_task_id(task_id)
    assert fire is not None
    assert (fire.state, fire.result) == ("succeeded", '{"n": 1}')
    assert fire.finished_at is not None
    assert fire.finished_at - at(60) < timedelta(minutes=5)
    store.close()
