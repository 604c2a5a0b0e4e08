"""A fire that left beat is sent at most once, and nothing runs after its task's disable.

Real `celery beat` and `celery worker` processes, PostgreSQL, and Redis (a private
`redis-server` of the test's own where the test must refuse writes or stop it; the shared
one is never touched). Each test is one fault from issues 27 and 30:

- SIGTERM to beat in the middle of a burst of plain and CronTask fires: beat exits within
  its bound, having marked what it sent and handed back what it did not; a second beat
  sends the rest. No plain fire runs twice, none is lost, no task is put in error.
- beat killed (``kill -9``) after the broker took a batch and before its mark: the
  replica that takes the lease over does not send those fires again.
- Redis refusing writes (``maxmemory``, ``noeviction``) for a while: the fires wait and go
  once Redis takes writes again; none runs twice, no task is put in error.
- a plain fire already queued when its task is disabled, or removed: the worker refuses
  it (recorded ``dropped``); a plain fire claimed while Redis is down and disabled
  meanwhile is never sent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from processes import HERE, beat, celery_env, deliveries, wait_for, worker
from redis_server import free_port, private_redis, start_redis

from celery_cronstore.policy.plain import DISABLED, GONE
from celery_cronstore.policy.takeover import MAYBE_SENT
from celery_cronstore.store import Store
from celery_cronstore.store.schema import fire

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

ROOT = HERE.parent.parent
#: Seconds beat may take to exit after SIGTERM, once its current chunk is sent (the
#: documented bound, docs/reliability.md).
STOP_BOUND = 5.0


def _redis(port: int, *args: str) -> str:
    import redis

    client = redis.Redis(port=port)
    try:
        return str(client.execute_command(*args))
    finally:
        client.close()


#: Bytes above what Redis holds that it may take before refusing writes: a few messages.
MARGIN = int(os.environ.get("AMO_MARGIN", "60000"))


def _used_memory(port: int) -> int:
    import redis

    client = redis.Redis(port=port)
    try:
        return int(client.info("memory")["used_memory"])
    finally:
        client.close()


def start(args: list[str], env: dict[str, str], logs: Path, name: str) -> subprocess.Popen[bytes]:
    """Start `python -m celery -A e2e_app ARGS` with its log in ``logs/name.log``."""
    with open(logs / f"{name}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "e2e_app", *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=logs,
            start_new_session=True,
        )


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def fresh_store(url: str) -> Store:
    store = Store(url)
    store.upgrade()
    for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
        with store.begin() as conn:
            conn.exec_driver_sql(f"DELETE FROM {table}")
    return store


def env_for(broker: str, url: str, record: Path, **extra: str) -> dict[str, str]:
    env = celery_env(broker, url, record, E2E_QUEUE=f"amo-{uuid.uuid4().hex[:8]}", **extra)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(ROOT)])
    return env


def states(store: Store) -> Counter[str]:
    with store.begin() as conn:
        rows = conn.exec_driver_sql("SELECT state, COUNT(*) FROM cronstore_fire GROUP BY state")
        return Counter({str(state): int(n) for state, n in rows})


def in_error(store: Store) -> list[str]:
    return [t.name for t in store.list() if t.error]


def runs_per_fire(record: Path, guarded: bool) -> Counter[str]:
    return Counter(d["task_id"] for d in deliveries(record) if bool(d.get("guarded")) == guarded)


@pytest.mark.parametrize("moment", ["mid-chunk", "first-delivery"])
def test_sigterm_mid_burst_sends_nothing_twice_and_exits_in_bound(
    postgres_url: str, redis_url: str, tmp_path: Path, moment: str
) -> None:
    store = fresh_store(postgres_url)
    at = (store.now() + timedelta(seconds=8)).replace(microsecond=0)
    instant = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    per_kind = 300
    for i in range(per_kind):
        store.add(f"p{i:03d}", task="e2e.record", timer=instant, args=[i])
        store.add(f"g{i:03d}", task="e2e.guarded", timer=instant, args=[i])
    record = tmp_path / "record.jsonl"
    faults = {"CRONSTORE_FAULTS": "mid_batch:#300:stall3"} if moment == "mid-chunk" else {}
    env = env_for(redis_url, postgres_url, record, E2E_LEASE="4", **faults)
    work = start(worker("w1", pool="prefork"), env, tmp_path, "worker")
    first = start(beat(), env, tmp_path, "beat1")
    second = None
    try:
        if moment == "mid-chunk":  # beat stalls inside its second chunk: stop it there
            stalled_log = tmp_path / "beat1.log"
            wait_for(
                lambda: "fault point mid_batch" in stalled_log.read_text(errors="replace"),
                40,
                "beat to stall in a chunk",
                tmp_path,
            )
        else:
            wait_for(lambda: deliveries(record), 40, "the first delivery", tmp_path)
        asked = time.monotonic()
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
        took = time.monotonic() - asked
        print(f"beat stopped {took:.2f}s after SIGTERM ({moment})")
        stalled = 3.0 if moment == "mid-chunk" else 0.0
        assert took <= stalled + STOP_BOUND, f"beat took {took:.1f}s to stop"
        assert states(store)["sending"] == 0, "beat stopped with fires half-sent"
        second = start(beat(), env, tmp_path, "beat2")
        fires = 2 * per_kind

        def settled() -> bool:
            counts = states(store)
            return counts["claimed"] + counts["sending"] + counts["published"] == 0 and (
                sum(counts.values()) == fires
            )

        wait_for(settled, 90, "every fire to be sent and run", tmp_path)
    finally:
        stop(*(p for p in (first, second, work) if p is not None))
    plain, guarded = runs_per_fire(record, False), runs_per_fire(record, True)
    twice = sum(1 for n in plain.values() if n > 1)
    assert max(plain.values()) == 1, f"{twice} plain fires run twice: {plain.most_common(3)}"
    assert max(guarded.values()) == 1
    assert len(plain) == per_kind, "a plain fire was lost"
    assert len(guarded) == per_kind
    assert in_error(store) == []
    store.close()


def test_kill_between_publish_and_mark_is_not_sent_again(
    postgres_url: str, redis_url: str, tmp_path: Path
) -> None:
    store = fresh_store(postgres_url)
    for i in range(20):
        store.add(f"p{i:02d}", task="e2e.record", timer="every 1s", args=[i])
    record = tmp_path / "record.jsonl"
    env = env_for(redis_url, postgres_url, record, E2E_LEASE="3")
    killed_env = dict(env, CRONSTORE_FAULTS="after_publish:#4:kill")
    # No worker yet: the fires the killed beat sent wait in Redis, unstarted, so the
    # replica finds them still ``sending`` when it takes the lease over.
    doomed = start(beat(), killed_env, tmp_path, "beat-killed")
    replica = work = None
    try:
        doomed.wait(timeout=40)  # killed by its fault point, the batch sent, none marked
        assert doomed.returncode == -signal.SIGKILL
        with store.begin() as conn:
            left = [
                str(task_id)
                for (task_id,) in conn.execute(
                    sa.select(fire.c.task_id).where(fire.c.state.in_(["claimed", "sending"]))
                )
            ]
        assert left, "the killed beat left nothing half-sent: the fault missed"
        replica = start(beat(), env, tmp_path, "beat-replica")
        wait_for(
            lambda: states(store)["sending"] + states(store)["claimed"] == 0,
            30,
            "the take-over",
            tmp_path,
        )
        with store.begin() as conn:
            settled = conn.execute(
                sa.select(fire.c.state, fire.c.reason).where(fire.c.task_id.in_(left))
            ).all()
        work = start(worker("w1", pool="prefork"), env, tmp_path, "worker")
        wait_for(lambda: set(left) <= set(runs_per_fire(record, False)), 30, "the runs", tmp_path)
        time.sleep(2)
    finally:
        stop(*(p for p in (doomed, replica, work) if p is not None))
    runs = runs_per_fire(record, False)
    assert max(runs.values()) == 1, f"run twice: {runs.most_common(3)}"
    # Sent before the kill and never again: each ran once, recorded published with why.
    assert [runs[task_id] for task_id in left] == [1] * len(left)
    assert {(state, reason) for state, reason in settled} == {("published", MAYBE_SENT)}
    assert in_error(store) == []
    store.close()


def test_redis_refusing_writes_delays_fires_and_sends_none_twice(
    postgres_url: str, tmp_path: Path
) -> None:
    """Redis runs at its ``maxmemory`` (``noeviction``) for 8 s: the limit sits a dozen
    messages above what it holds, so a batch of a tick's 30 fires is refused part of the
    way through (Redis reads a large pipeline in pieces and refuses each command once it
    is over the limit). Before the change, kombu's pipeline wrote the first messages and
    refused the rest, and beat sent the whole batch again: the first ones ran twice."""
    store = fresh_store(postgres_url)
    for i in range(30):  # 5 kB messages: Redis reads a tick's batch in several pieces
        store.add(f"p{i:02d}", task="e2e.record", timer="every 1s", args=[i, "x" * 5000])
    record = tmp_path / "record.jsonl"
    waited = 0
    with private_redis(tmp_path) as (broker, port):
        env = env_for(broker, postgres_url, record)
        work = start(worker("w1", pool="prefork"), env, tmp_path, "worker")
        first = start(beat(), env, tmp_path, "beat")
        try:
            wait_for(lambda: len(deliveries(record)) >= 60, 40, "fires before", tmp_path)
            _redis(port, "CONFIG", "SET", "maxmemory-policy", "noeviction")
            until = time.monotonic() + 8
            while time.monotonic() < until:  # room for a few messages, not a tick's 30
                _redis(port, "CONFIG", "SET", "maxmemory", str(_used_memory(port) + MARGIN))
                waited = max(waited, states(store)["claimed"])
                time.sleep(0.5)
            _redis(port, "CONFIG", "SET", "maxmemory", "0")
            wait_for(
                lambda: states(store)["claimed"] + states(store)["sending"] == 0,
                30,
                "the held fires to go",
                tmp_path,
            )
            time.sleep(3)
        finally:
            stop(first, work)
    runs = Counter(d["task_id"] for d in deliveries(record))
    assert max(runs.values()) == 1, f"run twice: {runs.most_common(3)}"
    assert waited > 0, "no fire waited while Redis refused writes"
    assert in_error(store) == []
    counts = states(store)
    assert counts["dropped"] == 0, counts
    store.close()


def test_worker_refuses_a_queued_plain_fire_after_disable_or_removal(
    postgres_url: str, redis_url: str, tmp_path: Path
) -> None:
    store = fresh_store(postgres_url)
    store.add("disabled", task="e2e.record", timer="every 1s", args=["d"])
    store.add("removed", task="e2e.record", timer="every 1s", args=["r"])
    store.add("kept", task="e2e.record", timer="every 1s", args=["k"])
    record = tmp_path / "record.jsonl"
    env = env_for(redis_url, postgres_url, record)
    first = start(beat(), env, tmp_path, "beat")  # no worker yet: the fires queue up
    work = None
    try:
        wait_for(lambda: states(store)["published"] >= 9, 30, "queued fires", tmp_path)
        stop(first)
        queued = [f.task_id for f in store.history("disabled") if f.state == "published"]
        assert queued
        store.disable("disabled")
        store.remove("removed")
        work = start(worker("w1"), env, tmp_path, "worker")
        wait_for(lambda: states(store)["published"] == 0, 30, "the queue to drain", tmp_path)
    finally:
        stop(*(p for p in (first, work) if p is not None))
    ran = {tuple(d["args"]) for d in deliveries(record)}
    assert ("d",) not in ran, "a fire ran after its task's disable"
    assert ("r",) not in ran, "a fire ran after its task's removal"
    assert ("k",) in ran
    refused = {f.task_id: f for f in store.history("disabled")}
    assert [refused[t].state for t in queued] == ["dropped"] * len(queued)
    assert {refused[t].reason for t in queued} == {DISABLED}
    log = (tmp_path / "worker.log").read_text()
    assert GONE in log  # the removed task's fires: refused, nothing left to record on
    store.close()


def test_a_fire_held_through_a_redis_outage_is_not_sent_after_a_disable_or_removal(
    postgres_url: str, tmp_path: Path
) -> None:
    store = fresh_store(postgres_url)
    store.add("plain", task="e2e.record", timer="every 1s", args=["p"])
    store.add("removed", task="e2e.record", timer="every 1s", args=["r"])
    store.add("kept", task="e2e.record", timer="every 1s", args=["k"])
    record = tmp_path / "record.jsonl"
    port = free_port()
    redis_proc = start_redis(port, tmp_path)
    env = env_for(f"redis://127.0.0.1:{port}/0", postgres_url, record)
    work = start(worker("w1"), env, tmp_path, "worker")
    first = start(beat(), env, tmp_path, "beat")
    try:
        wait_for(lambda: len(deliveries(record)) >= 6, 30, "first fires", tmp_path)
        redis_proc.kill()
        redis_proc.wait()
        wait_for(lambda: states(store)["claimed"] >= 3, 20, "fires held back", tmp_path)
        store.disable("plain")
        store.remove("removed")
        changed_at = time.time()
        redis_proc = start_redis(port, tmp_path)
        wait_for(
            lambda: any(d["args"] == ["k"] and d["at"] > changed_at for d in deliveries(record)),
            30,
            "the kept task to fire again",
            tmp_path,
        )
        time.sleep(2)
    finally:
        stop(first, work)
        redis_proc.kill()
        redis_proc.wait()
    late = [d["args"] for d in deliveries(record) if d["at"] > changed_at]
    assert ["p"] not in late, "a fire ran after its task's disable committed"
    assert ["r"] not in late, "a fire ran after its task's removal committed"
    assert [f.state for f in store.history("plain") if f.state in ("claimed", "sending")] == []
    assert "dropped" in {f.state for f in store.history("plain")}
    store.close()
