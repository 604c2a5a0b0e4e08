"""Run liveness and the outbox: a started fire whose worker went silent is abandoned, a
live one is kept, and an end record the database refused is delivered later."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from timeline import at

from celery_cronstore import policy
from celery_cronstore.records import Fire
from celery_cronstore.store import Claimer, Store, runs
from celery_cronstore.store.schema import periodic_task
from celery_cronstore.store.seam import NullSeam
from celery_cronstore.testing import FrozenClock
from celery_cronstore.worker import Liveness

SILENT = "its worker w1 stopped reporting on the run (killed, or cut off from the database)"


class _Redeliverable(NullSeam):
    """A seam answering "may a fire of this task be published again?" one way for all."""

    def __init__(self, again: bool) -> None:
        self.again = again

    def redeliverable(self, name: str) -> bool:
        return self.again


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


# -- abandon policy rerun: a silent worker's fire published again once, same task id --------


def _running(
    store: Store, clock: FrozenClock, name: str, timer: str = "every 1h", **fields: object
) -> tuple[Claimer, str]:
    """Add ``name``, let its first fire fall due, claim, publish and start it on w1."""
    task = store.add(name, task="t.run", timer=timer, **fields)  # type: ignore[arg-type]
    assert task.next_run is not None
    clock.set(task.next_run)
    beat = Claimer(store, "beat")
    (claim,) = [c for c in beat.claim_due().claims if c.name == name]
    beat.mark_published([claim])
    assert runs.start_fire(store.db, claim.task_id, node="w1", abandon_after=30).started
    return beat, claim.task_id


def _fire(store: Store, task_id: str) -> Fire:
    fire = store.fire_by_task_id(task_id)
    assert fire is not None
    return fire


def test_abandon_policy_rerun_publishes_the_fire_again_once_under_its_task_id(
    store: Store, clock: FrozenClock
) -> None:
    beat, task_id = _running(store, clock, "again", abandon_policy="rerun")
    first_start = store.get("again").last_run
    clock.set(at(3600 + 31))  # the worker went silent: its lease (30 s) ran out
    assert beat.abandon_silent() == 1
    fire = _fire(store, task_id)
    assert (fire.state, fire.reruns) == ("claimed", 1)
    assert fire.reason == f"{SILENT}; published again under the same task id (abandon policy rerun)"
    # The path that re-publishes lapsed claims sends it again, under the same task id.
    (claim,) = beat.reclaim_expired()
    assert (claim.task_id, claim.attempt, claim.fire_time) == (task_id, 2, at(3600))
    beat.mark_published([claim])
    assert _fire(store, task_id).state == "published"
    # The guard starts the re-run once (not "early" against its own first start) ...
    rerun = runs.start_fire(store.db, task_id, node="w2", abandon_after=30)
    assert (rerun.started, rerun.rerun) == (True, 1)
    # ... and a duplicate delivery of it not again.
    assert runs.start_fire(store.db, task_id, node="w3", abandon_after=30).outcome == "duplicate"
    # The first worker coming back late cannot renew, end or checkpoint the re-run.
    assert runs.keep_alive(store.db, [task_id], 30, run=0) == 0
    assert not runs.checkpoint(store.db, task_id, {"stale": True}, run=0)
    assert not runs.finish_fire(store.db, task_id, "failed", error="late", run=0)
    assert runs.keep_alive(store.db, [task_id], 30, run=1) == 1
    assert runs.finish_fire(store.db, task_id, "succeeded", result="ok", run=1)
    fire = _fire(store, task_id)
    assert (fire.state, fire.node, fire.reruns, fire.attempts) == ("succeeded", "w2", 1, 2)
    assert fire.reason is not None
    assert "published again" in fire.reason  # kept: why it ran again
    # The re-run does not move last_run: the next on-time fire is not dropped as early.
    assert store.get("again").last_run == first_start
    clock.set(at(7200))
    (nxt,) = beat.claim_due().claims
    beat.mark_published([nxt])
    assert runs.start_fire(store.db, nxt.task_id, node="w1", abandon_after=30).started


def test_a_rerun_abandoned_in_turn_is_left(store: Store, clock: FrozenClock) -> None:
    beat, task_id = _running(store, clock, "twice", abandon_policy="rerun")
    clock.set(at(3600 + 31))
    assert beat.abandon_silent() == 1
    (claim,) = beat.reclaim_expired()
    beat.mark_published([claim])
    assert runs.start_fire(store.db, task_id, node="w2", abandon_after=30).started
    clock.set(at(3600 + 70))  # the re-run's worker went silent too
    assert beat.abandon_silent() == 1
    fire = _fire(store, task_id)
    assert (fire.state, fire.reruns) == ("abandoned", 1)
    assert fire.reason == (
        "its worker w2 stopped reporting on the run (killed, or cut off from the database); "
        "not re-run: it was already re-run 1 time(s) (at most 1)"
    )
    assert beat.reclaim_expired() == []


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"abandon_policy": "leave"}, None),
        ({"enabled": False}, "the task is disabled"),
        ({"start_deadline": 20.0}, "31.0s after its fire time, past the starting deadline of 20s"),
    ],
    ids=["leave", "disabled", "past-deadline"],
)
def test_an_abandoned_fire_the_rule_does_not_rerun_is_left(
    store: Store, clock: FrozenClock, change: dict[str, object], why: str | None
) -> None:
    beat, task_id = _running(store, clock, "left", abandon_policy="rerun")
    with store.begin() as conn:  # raw SQL: store.update would record/replan
        conn.execute(
            sa.update(periodic_task).where(periodic_task.c.name == "left").values(**change)
        )
    clock.set(at(3600 + 31))
    assert beat.abandon_silent() == 1
    fire = _fire(store, task_id)
    assert (fire.state, fire.reruns) == ("abandoned", 0)
    assert fire.reason == (SILENT if why is None else f"{SILENT}; not re-run: {why}")
    assert beat.reclaim_expired() == []


def test_an_abandoned_fire_superseded_by_a_later_one_is_left(
    store: Store, clock: FrozenClock
) -> None:
    beat, task_id = _running(store, clock, "moved-on", timer="every 1m", abandon_policy="rerun")
    clock.set(at(120))  # the next fire is claimed while the first one's worker is silent
    (later,) = beat.claim_due().claims
    clock.set(at(121))  # and the first one's lease (to 90 s) ran out
    assert beat.abandon_silent() == 1
    fire = _fire(store, task_id)
    assert fire.state == "abandoned"
    assert (
        fire.reason == f"{SILENT}; not re-run: superseded by the later fire {at(120).isoformat()}"
    )
    assert [c.task_id for c in beat.reclaim_expired()] == []
    assert later.task_id != task_id


def test_a_task_without_an_at_most_once_start_is_not_rerun(
    store: Store, clock: FrozenClock
) -> None:
    beat, task_id = _running(store, clock, "plain", abandon_policy="rerun")
    clock.set(at(3600 + 31))
    beat.inflight.seam = _Redeliverable(False)
    assert beat.abandon_silent() == 1
    fire = _fire(store, task_id)
    assert fire.state == "abandoned"
    assert fire.reason is not None
    assert fire.reason.endswith("could run it twice")


def test_leave_and_rerun_tasks_are_settled_in_one_pass(store: Store, clock: FrozenClock) -> None:
    beat, left = _running(store, clock, "a-leave")
    clock.set(at(0))  # both added at T0: both first fire at T0 + 1h
    _, again = _running(store, clock, "b-rerun", abandon_policy="rerun")
    clock.set(at(3600 + 31))
    assert beat.abandon_silent() == 2
    assert (_fire(store, left).state, _fire(store, again).state) == ("abandoned", "claimed")
    assert beat.abandon_silent() == 0


@pytest.mark.parametrize("bad", ["retry", "", None, "LEAVE"])
def test_a_bad_abandon_policy_is_refused_naming_the_value(store: Store, bad: object) -> None:
    allowed = r"\('leave', 'rerun'\)"
    with pytest.raises(ValueError, match=f"abandon_policy must be one of {allowed}, got {bad!r}"):
        store.add("x", task="t", timer="hourly", abandon_policy=bad)  # type: ignore[arg-type]
    store.add("x", task="t", timer="hourly")
    assert store.get("x").abandon_policy == "leave"
    with pytest.raises(ValueError, match=f"got {bad!r}"):
        store.update("x", abandon_policy=bad)
    assert store.update("x", abandon_policy="rerun").abandon_policy == "rerun"


def test_a_plain_task_s_late_end_cannot_overwrite_its_rerun(
    tmp_path: Path, clock: FrozenClock
) -> None:
    """Regression: a plain (acks_late) fire re-run after its worker went silent was
    fenced nowhere: the first worker coming back late recorded its end over the re-run's.
    Both runs go through the worker's signal handlers (an eager ``apply`` sends them)."""
    from celery import Celery

    from celery_cronstore.policy.messages import H_NAME
    from celery_cronstore.worker import plain, runtime, signals

    url = f"sqlite:///{tmp_path / 'plain.sqlite'}"
    store = Store(url, clock=clock)
    store.upgrade()
    app = Celery("plain", broker="memory://", set_as_current=False)
    app.conf.update(cronstore_url=url, cronstore_abandon_after=30)
    runtime.use_store(app, store)
    ends: list[str] = []

    @app.task(name="t.run", acks_late=True)
    def body(outcome: str) -> str:
        ends.append(outcome)
        return outcome

    try:
        beat, task_id = _running_plain(store, clock, "plain-late")
        # Run 0 starts on w1 (the plain-task guard); then w1 goes silent past abandon_after.
        assert plain.start(_Ran(body, task_id))
        assert runtime.liveness_for(app).runs == {task_id: 0}
        assert _fire(store, task_id).node == "w1"
        clock.set(at(3600 + 31))
        beat.inflight.seam = _Redeliverable(True)
        assert beat.abandon_silent() == 1
        (claim,) = beat.reclaim_expired()
        beat.mark_published([claim])
        # The re-run starts on another worker (a second process: its own fence, run 1).
        assert runs.record_start(store.db, task_id, node="w2", abandon_after=30) == 1
        assert runs.keep_alive(store.db, [task_id], 30, run=0) == 0
        # Run 0's late end, through the postrun signal handler: fenced, nothing recorded.
        signals._on_postrun(task=_Ran(body, task_id), retval="late", state="SUCCESS")
        fire = _fire(store, task_id)
        assert (fire.state, fire.node, fire.result) == ("started", "w2", None)
        # The re-run's own end is recorded (run 1).
        assert runs.finish_fire(store.db, task_id, "succeeded", result="ok", run=1)
        assert _fire(store, task_id).state == "succeeded"
        # And a fresh fire run whole through the guard and the signals is recorded as usual.
        assert plain.install(app) == 1
        clock.set(at(7200))
        (nxt,) = beat.claim_due().claims
        beat.mark_published([nxt])
        body.apply(args=("fresh",), task_id=nxt.task_id, headers={H_NAME: "plain-late"})
        assert ends == ["fresh"]
        fresh = _fire(store, nxt.task_id)
        assert (fresh.state, fresh.reruns) == ("succeeded", 0)
    finally:
        runtime.use_store(app, None)
        store.close()


class _Ran:
    """What the postrun signal carries: a task whose request is the one that ran."""

    def __init__(self, task: object, task_id: str) -> None:
        from types import SimpleNamespace

        from celery_cronstore.policy.messages import H_NAME

        self.app = task.app  # type: ignore[attr-defined]
        self.name = task.name  # type: ignore[attr-defined]
        self.acks_late = task.acks_late  # type: ignore[attr-defined]
        self.request = SimpleNamespace(id=task_id, hostname="w1", headers={H_NAME: "plain-late"})


def _running_plain(store: Store, clock: FrozenClock, name: str) -> tuple[Claimer, str]:
    """Add plain ``name`` (abandon policy rerun), claim and publish its first fire."""
    task = store.add(name, task="t.run", timer="every 1h", abandon_policy="rerun")
    assert task.next_run is not None
    clock.set(task.next_run)
    beat = Claimer(store, "beat")
    (claim,) = [c for c in beat.claim_due().claims if c.name == name]
    beat.mark_published([claim])
    return beat, claim.task_id


@pytest.mark.parametrize(
    ("rerun_node", "limit", "why"),
    [
        ("w1", 60, "the re-run on the same node started 29 s ago, not a 60 s limit ago"),
        ("w2", 20, "the re-run started 29 s ago (a 20 s limit passes) but on another node"),
    ],
)
def test_a_hard_limit_kill_recorded_late_cannot_end_the_rerun(
    store: Store, clock: FrozenClock, rerun_node: str, limit: float, why: str
) -> None:
    """Regression: the worker's main process records a hard time limit kill without
    knowing the run, and ended whichever run of the fire was in flight: a re-run started
    elsewhere meanwhile was recorded ``timed_out`` while it ran."""
    beat, task_id = _running(store, clock, "killed", abandon_policy="rerun")
    clock.set(at(3600 + 31))  # run 0 on w1 went silent (a hung child)
    assert beat.abandon_silent() == 1
    (claim,) = beat.reclaim_expired()
    beat.mark_published([claim])
    assert runs.start_fire(store.db, task_id, node=rerun_node, abandon_after=30).rerun == 1
    clock.set(at(3600 + 60))  # w1's pool kills the hung child of run 0
    ended = runs.finish_fire(
        store.db,
        task_id,
        "timed_out",
        error="killed by the hard time limit",
        node="w1",
        started_before=policy.killed_run_age(limit),
    )
    assert not ended, why
    fire = _fire(store, task_id)
    assert (fire.state, fire.node, fire.reruns) == ("started", rerun_node, 1)


def test_a_hard_limit_kill_of_the_run_itself_is_recorded(store: Store, clock: FrozenClock) -> None:
    _, task_id = _running(store, clock, "killed-once")
    clock.set(at(3600 + 60))
    fenced = {"node": "w1", "started_before": policy.killed_run_age(60)}
    assert not runs.finish_fire(store.db, task_id, "timed_out", **{**fenced, "node": "w9"})
    assert runs.finish_fire(store.db, task_id, "timed_out", error="killed", **fenced)
    assert _fire(store, task_id).state == "timed_out"


def test_a_start_that_overtakes_beat_s_mark_records_the_fire_published(
    store: Store, clock: FrozenClock
) -> None:
    """Beat marks a burst's fires published together, after they went: a worker may
    start one first. The start fills ``published_at`` (the mark then finds nothing to
    do); a fire beat did mark keeps its own."""
    store.add("quick", task="t.run", timer="every 1m")
    store.add("marked", task="t.run", timer="every 1m")
    clock.set(at(60))
    beat = Claimer(store, "beat")
    claims = {c.name: c for c in beat.claim_due().claims}
    beat.mark_published([claims["marked"]])
    clock.set(at(61))
    for claim in claims.values():
        assert runs.start_fire(store.db, claim.task_id, node="w1", abandon_after=30).started
    assert beat.mark_published([claims["quick"]]) == 0  # started: nothing to mark
    quick, marked = _fire(store, claims["quick"].task_id), _fire(store, claims["marked"].task_id)
    assert (quick.state, quick.published_at, quick.started_at) == ("started", at(61), at(61))
    assert (marked.published_at, marked.started_at) == (at(60), at(61))
