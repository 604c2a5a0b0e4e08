"""The CronTask guard over every backend: start once, early drop, retries, overlap, resume.

Runs are delivered the way the worker would run them (``apply`` with the task id and the
headers beat sets), eagerly in this process, against a store on ``db_url``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from celery import Celery
from celery.exceptions import TimeLimitExceeded
from timeline import at

from celery_cronstore.store import Claim, Claimer, Store, runs
from celery_cronstore.testing import FrozenClock
from celery_cronstore.worker.task import CronTask, use_store


class Env:
    def __init__(self, store: Store, clock: FrozenClock) -> None:
        self.store, self.clock = store, clock
        self.app = Celery("crontask-tests", set_as_current=False)
        self.claimer = Claimer(store, "beat-1")
        self.calls: list[dict[str, Any]] = []
        self.fail_times = 0
        calls = self.calls
        env = self

        @self.app.task(base=CronTask, bind=True, shared=False, name="tests.poll")
        def poll(self: CronTask, channel: int = 0, checkpoint: Any = None) -> dict[str, Any]:
            call = {
                "id": self.request.id,
                "retries": self.request.retries,
                "resume": self.resume_state,
                "deadline": self.deadline,
                "out_of_time": self.out_of_time(),
                "time_left": self.time_left(),
                "fire_time": self.fire_time,
            }
            calls.append(call)
            if env.fail_times > 0:
                env.fail_times -= 1
                raise ConnectionError("mail server down")
            if checkpoint is not None:
                call["checkpointed"] = self.checkpoint(checkpoint)
            return {"channel": channel, "handled": 3}

        self.task = poll

    def add(self, name: str = "poll", **fields: Any) -> None:
        self.store.add(name, task="tests.poll", timer="every 1m", **fields)

    def claim(self, when: datetime) -> Claim:
        self.clock.set(when)
        result = self.claimer.claim_due()
        self.claimer.mark_published(result.claims)
        (claim,) = result.claims
        return claim

    def deliver(self, claim: Claim, *, at_time: datetime | None = None, **kwargs: Any) -> Any:
        if at_time is not None:
            self.clock.set(at_time)
        headers = {
            "celery_beat_task": True,
            "cronstore_name": claim.name,
            "cronstore_fire_time": claim.fire_time.isoformat(),
            "cronstore_interval": claim.interval,
        }
        return self.task.apply(
            args=claim.args, kwargs=kwargs, task_id=claim.task_id, headers=headers
        )

    def fire(self, claim: Claim) -> Any:
        return self.store.fire_by_task_id(claim.task_id)


@pytest.fixture
def env(store: Store, clock: FrozenClock) -> Iterator[Env]:
    e = Env(store, clock)
    use_store(e.app, store)
    yield e
    use_store(e.app, None)


def test_a_run_records_start_node_and_result(env: Env) -> None:
    env.add()
    claim = env.claim(at(60))
    result = env.deliver(claim, at_time=at(62), channel=7)
    assert result.state == "SUCCESS"
    fire = env.fire(claim)
    assert (fire.state, fire.started_at, fire.finished_at) == ("succeeded", at(62), at(62))
    assert fire.node
    assert fire.result == '{"channel": 7, "handled": 3}'
    assert env.store.get("poll").last_run == at(62)
    (call,) = env.calls
    assert call["deadline"] == at(92)
    assert call["fire_time"] == at(60)
    assert call["time_left"] == 30.0
    status = env.store.status("poll")
    assert (status.state, status.last_run, status.node) == ("succeeded", at(62), fire.node)


def test_run_all_backfill_runs_every_missed_fire_each_time_boxed(env: Env) -> None:
    """Regression: after a 60-s outage of a 10-s timer under run_all, beat sent the 6
    missed fires and the guard ran one and dropped five as "early"."""
    env.store.add("burst", task="tests.poll", timer="every 10s", misfire_policy="run_all")
    env.clock.set(at(70))  # due since 10: 10, 20, ..., 70
    result = env.claimer.claim_due()
    env.claimer.mark_published(result.claims)
    assert [c.fire_time for c in result.claims] == [at(s) for s in range(10, 71, 10)]
    for offset, claim in enumerate(result.claims):  # back to back on one worker
        assert env.deliver(claim, at_time=at(70 + offset * 0.5)).state == "SUCCESS"
    assert len(env.calls) == 7
    assert all(call["deadline"] is not None for call in env.calls)  # each one time-boxed
    assert [env.fire(c).state for c in result.claims] == ["succeeded"] * 7


def test_an_early_run_is_dropped_and_recorded(env: Env) -> None:
    env.add()
    first = env.claim(at(60))
    second = env.claim(at(120))
    env.deliver(first, at_time=at(110))  # late start: last_run = 110
    result = env.deliver(second, at_time=at(130))  # 20 s later: early
    assert result.state == "IGNORED"
    assert len(env.calls) == 1
    fire = env.fire(second)
    assert fire.state == "dropped"
    assert fire.reason.startswith("early:")
    assert "tolerance 5s" in fire.reason
    assert env.store.get("poll").last_run == at(110)
    assert env.store.status("poll").state == "dropped"


def test_the_tolerance_column_wins_over_the_setting(env: Env) -> None:
    env.add(tolerance=30.0)
    first = env.claim(at(60))
    second = env.claim(at(120))
    env.deliver(first, at_time=at(110))
    assert env.deliver(second, at_time=at(140)).state == "SUCCESS"  # 30 s >= 60 - 30


def test_the_tolerance_setting_is_read_from_the_app(env: Env) -> None:
    env.app.conf.cronstore_tolerance = 45.0
    use_store(env.app, env.store)  # forget the cached setting
    env.add()
    first = env.claim(at(60))
    second = env.claim(at(120))
    env.deliver(first, at_time=at(110))
    assert env.deliver(second, at_time=at(130)).state == "SUCCESS"  # 20 s >= 60 - 45


def test_a_duplicate_delivery_is_dropped_without_touching_the_fire(env: Env) -> None:
    env.add()
    claim = env.claim(at(60))
    assert env.deliver(claim, at_time=at(61)).state == "SUCCESS"
    assert env.deliver(claim, at_time=at(140)).state == "IGNORED"  # broker redelivery
    assert len(env.calls) == 1
    fire = env.fire(claim)
    assert (fire.state, fire.started_at, fire.reason) == ("succeeded", at(61), None)
    assert env.store.get("poll").last_run == at(61)


def test_concurrent_deliveries_of_one_fire_start_once(env: Env) -> None:
    env.add()
    claim = env.claim(at(60))
    decisions: list[tuple[str, runs.RunStart]] = []
    barrier = threading.Barrier(6)

    def start(node: str) -> None:
        barrier.wait()
        decisions.append((node, runs.start_fire(env.store.db, claim.task_id, node=node)))

    threads = [threading.Thread(target=start, args=(f"w{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(d.outcome for _, d in decisions) == ["duplicate"] * 5 + ["started"]
    node, winner = next((n, d) for n, d in decisions if d.started)
    assert (env.fire(claim).state, env.fire(claim).node) == ("started", node)
    assert winner.deadline == at(90)
    assert env.store.get("poll").last_run == at(60)


def test_retries_are_the_same_fire_and_never_early(env: Env) -> None:
    env.add(max_retries=3)
    claim = env.claim(at(60))
    env.fail_times = 2
    result = env.deliver(claim, at_time=at(61))
    assert result.state == "SUCCESS"
    assert [(c["id"], c["retries"]) for c in env.calls] == [(claim.task_id, n) for n in range(3)]
    fire = env.fire(claim)
    assert (fire.state, fire.started_at, fire.reason) == ("succeeded", at(61), None)
    assert env.store.get("poll").last_run == at(61)  # the fire's start, not a retry's


def test_retries_give_up_as_failed_with_the_error(env: Env) -> None:
    env.add(max_retries=1)
    claim = env.claim(at(60))
    env.fail_times = 5
    result = env.deliver(claim, at_time=at(61))
    assert result.state == "FAILURE"
    assert len(env.calls) == 2
    fire = env.fire(claim)
    assert fire.state == "failed"
    assert fire.reason == "ConnectionError: mail server down"
    assert env.store.status("poll").reason == "ConnectionError: mail server down"


def test_without_retries_a_failure_is_recorded_once(env: Env) -> None:
    env.add()
    claim = env.claim(at(60))
    env.fail_times = 1
    assert env.deliver(claim, at_time=at(61)).state == "FAILURE"
    assert len(env.calls) == 1
    assert env.fire(claim).state == "failed"


def test_a_retry_message_waits_in_state_retrying(env: Env) -> None:
    env.add(max_retries=2)
    claim = env.claim(at(60))
    assert runs.start_fire(env.store.db, claim.task_id, node="w1").outcome == "started"
    assert runs.finish_fire(env.store.db, claim.task_id, "retrying", error="boom")
    assert env.fire(claim).state == "retrying"
    # The first message again (retries=0) is a duplicate; the retry message (retries=1)
    # starts the same fire although it is "early".
    assert runs.start_fire(env.store.db, claim.task_id, node="w2").outcome == "duplicate"
    decision = runs.start_fire(env.store.db, claim.task_id, node="w2", retries=1)
    assert decision.outcome == "retry"
    assert (env.fire(claim).state, env.fire(claim).node) == ("started", "w2")
    assert runs.start_fire(env.store.db, claim.task_id, node="w3", retries=1).outcome == (
        "duplicate"
    )


def test_overlap_skip_does_not_start_while_the_previous_fire_runs(env: Env) -> None:
    env.add(overlap_policy="skip", tolerance=60.0)
    first = env.claim(at(60))
    second = env.claim(at(120))  # claimed while the first was only published
    assert runs.start_fire(env.store.db, first.task_id, node="w1").started is True
    result = env.deliver(second, at_time=at(121))
    assert result.state == "IGNORED"
    fire = env.fire(second)
    assert fire.state == "skipped"
    assert fire.reason == (
        "not started: fire 2026-01-05T12:01:00+00:00 is still started (overlap policy skip)"
    )
    # Once the first ends, the next fire starts normally.
    assert runs.finish_fire(env.store.db, first.task_id, "succeeded", result=1)
    third = env.claim(at(180))
    assert env.deliver(third, at_time=at(181)).state == "SUCCESS"


def test_overlap_allow_runs_concurrently(env: Env) -> None:
    env.add(tolerance=60.0)
    first = env.claim(at(60))
    second = env.claim(at(120))
    assert runs.start_fire(env.store.db, first.task_id, node="w1").started is True
    assert env.deliver(second, at_time=at(121)).state == "SUCCESS"


def test_checkpoint_is_resumed_by_the_next_run(env: Env) -> None:
    env.add()
    first = env.claim(at(60))
    env.deliver(first, at_time=at(61), checkpoint={"uid": 41})
    second = env.claim(at(120))
    env.deliver(second, at_time=at(121))
    assert [c["resume"] for c in env.calls] == [None, {"uid": 41}]
    assert env.calls[0]["checkpointed"] is True
    assert env.store.get("poll").resume_state == {"uid": 41}  # kept until replaced


def test_checkpoint_is_fenced_on_a_running_fire(env: Env) -> None:
    env.add()
    claim = env.claim(at(60))
    assert runs.checkpoint(env.store.db, claim.task_id, {"x": 1}) is False  # not started
    runs.start_fire(env.store.db, claim.task_id, node="w1")
    assert runs.checkpoint(env.store.db, claim.task_id, {"x": 2}) is True
    runs.finish_fire(env.store.db, claim.task_id, "timed_out")
    assert runs.checkpoint(env.store.db, claim.task_id, {"x": 3}) is False  # a zombie
    assert env.store.get("poll").resume_state == {"x": 2}


def test_a_disabled_task_drops_its_pending_fire(env: Env) -> None:
    env.add()
    claim = env.claim(at(60))
    env.store.disable("poll")
    assert env.deliver(claim, at_time=at(61)).state == "IGNORED"
    assert (env.fire(claim).state, env.fire(claim).reason) == (
        "dropped",
        "periodic task is disabled",
    )


def test_a_removed_task_drops_the_run_without_a_ledger(env: Env) -> None:
    env.add()
    claim = env.claim(at(60))
    env.store.remove("poll")
    assert env.deliver(claim, at_time=at(61)).state == "IGNORED"
    assert env.calls == []


def test_the_interval_is_recomputed_when_the_header_lacks_it(env: Env) -> None:
    env.store.add("cal", task="tests.poll", timer="*-*-* *:*:00")  # calendar: every minute
    claim = env.claim(at(60))
    decision = runs.start_fire(env.store.db, claim.task_id, node="w1", interval=None)
    assert (decision.interval, decision.deadline) == (60.0, at(90))


def test_a_hard_time_limit_kill_is_recorded_as_timed_out(env: Env) -> None:
    from celery_cronstore.worker import runtime, signals

    env.add()
    claim = env.claim(at(60))
    runs.start_fire(env.store.db, claim.task_id, node="w1")
    # The worker's main process knows its node name from worker_init.
    signals._on_worker_init(sender=SimpleNamespace(app=env.app, hostname="w1"))
    try:
        # What the worker's main process calls after killing the child (no request
        # context): a kill 20 s into the run cannot be a 30 s limit's, so it ends nothing.
        env.clock.set(at(80))
        env.task.on_failure(TimeLimitExceeded(30), claim.task_id, (), {}, None)
        assert env.fire(claim).state == "started"
        env.clock.set(at(90))
        env.task.on_failure(TimeLimitExceeded(30), claim.task_id, (), {}, None)
    finally:
        runtime._nodes.pop(id(env.app), None)
    fire = env.fire(claim)
    assert fire.state == "timed_out"
    assert "hard time limit" in fire.reason


def test_a_direct_call_runs_with_no_guard(env: Env) -> None:
    env.add()
    claim = env.claim(at(60))
    env.task.delay  # noqa: B018 - the attribute exists; .delay() itself needs a broker
    assert env.task.apply(kwargs={"channel": 1}).state == "SUCCESS"  # a worker run, no headers
    assert env.task(channel=2) == {"channel": 2, "handled": 3}  # a plain call
    for call in env.calls:
        assert call["resume"] is None
        assert call["out_of_time"] is False
        assert call["deadline"] is None
        assert call["time_left"] is None
    assert env.store.get("poll").last_run is None
    assert env.fire(claim).state == "published"


def test_a_run_without_headers_gets_a_deadline_from_its_soft_limit(env: Env) -> None:
    env.task.soft_time_limit = 30
    try:
        assert env.task.apply().state == "SUCCESS"
    finally:
        env.task.soft_time_limit = None
    (call,) = env.calls
    assert call["deadline"] is not None
    assert 29 < call["time_left"] <= 30
    assert call["resume"] is None


def test_beat_sends_a_crontask_with_its_time_box(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    from celery_cronstore.beat.publish import publish

    env.add()
    claim = env.claim(at(60))
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(env.task, "apply_async", lambda **options: sent.append(options))
    publish(env.app, claim)
    (options,) = sent
    assert options["task_id"] == claim.task_id
    assert (options["soft_time_limit"], options["time_limit"]) == (30.0, 60.0)
    assert options["headers"]["cronstore_interval"] == 60.0
    # An explicit soft limit in the periodic task's options wins; the run still ends at
    # the next fire (the hard limit), or one second after a longer soft limit.
    sent.clear()
    publish(env.app, replace(claim, options={"soft_time_limit": 5}))
    assert (sent[0]["soft_time_limit"], sent[0]["time_limit"]) == (5, 60.0)
    sent.clear()
    publish(env.app, replace(claim, options={"soft_time_limit": 90}))
    assert (sent[0]["soft_time_limit"], sent[0]["time_limit"]) == (90, 91.0)
