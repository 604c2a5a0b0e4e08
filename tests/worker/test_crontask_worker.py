"""CronTask in a REAL prefork worker process (filesystem broker: no server needed).

Fires are claimed with ``Claimer.claim_due()`` and sent the way beat sends them
(``apply_async`` with the ledger's task id, the ``cronstore_*`` headers and the time box
as ``soft_time_limit``/``time_limit``); the worker's guard does the rest. The store is a
SQLite file, or PostgreSQL when it is reachable.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery
from whole_messages import URL as WHOLE_FILES

from celery_cronstore.records import Fire
from celery_cronstore.store import Claim, Claimer, Store
from celery_cronstore.store.schema import periodic_task

# serial: a time box struck within 2-4 s, heartbeats against a 2 s abandon limit, and one
# module-scoped prefork worker shared by every test.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

ROOT = Path(__file__).resolve().parents[2]

APP_SOURCE = '''
"""The worker side of test_crontask_worker.py (written to a temporary directory)."""

import os
import time
from pathlib import Path

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded

from celery_cronstore import CronTask

HERE = Path(os.environ["CT_DIR"])
app = Celery("crontask_worker_app")
app.conf.update(
    broker_url="filesystem://",
    broker_transport_options={
        "data_folder_in": str(HERE / "broker"),
        "data_folder_out": str(HERE / "broker"),
        "control_folder": str(HERE / "control"),
        "processed_folder": str(HERE / "processed"),
    },
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    worker_prefetch_multiplier=1,
    cronstore_url=os.environ["CT_STORE"],
    cronstore_tolerance=1.0,
    # Heartbeats every second; a fire silent for 2 s counts as abandoned.
    cronstore_abandon_after=2.0,
)


@app.task(base=CronTask, bind=True, name="ct.slow")
def slow(self):
    """Works until the soft time limit strikes, then checkpoints; resumes next time."""
    if self.resume_state:
        return {"resumed": self.resume_state}
    steps = 0
    try:
        while True:
            time.sleep(0.05)
            steps += 1
    except SoftTimeLimitExceeded:
        self.checkpoint({"steps": steps, "out_of_time": self.out_of_time()})
        raise


@app.task(base=CronTask, bind=True, name="ct.sleepy")
def sleepy(self, seconds):
    """Notes its process id, then sleeps (long runs, and a child to kill)."""
    with open(HERE / "sleepy.txt", "a", encoding="utf-8") as out:
        out.write(f"{self.request.id} {os.getpid()}\\n")
    time.sleep(seconds)
    return "slept"


@app.task(bind=True, name="ct.plain")
def plain(self, fail=False):
    """A plain task (no CronTask guard): its runs are recorded from the worker's signals."""
    if fail:
        raise ValueError("plain task failed on purpose")
    return {"plain": True}


@app.task(base=CronTask, bind=True, name="ct.flaky_host")
def flaky_host(self):
    """The first run of a fire notes its process id and sleeps (a child to kill); a
    re-run of the same fire notes it too and ends at once."""
    log = HERE / "flaky.txt"
    seen = log.read_text().split().count(self.request.id) if log.exists() else 0
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"{self.request.id} {os.getpid()}\\n")
    if not seen:
        time.sleep(60)
    return "done"


@app.task(base=CronTask, bind=True, name="ct.count")
def count(self):
    """Appends one line per body execution (to count runs of the body)."""
    with open(HERE / "runs.txt", "a", encoding="utf-8") as out:
        out.write(f"{self.request.id} {os.getpid()}\\n")
    time.sleep(0.5)
    return "counted"
'''

TERMINAL = ("succeeded", "failed", "timed_out", "dropped", "skipped", "abandoned")


def _store_url(kind: str, request: pytest.FixtureRequest, tmp: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'store.sqlite'}"
    return str(request.getfixturevalue(f"{kind}_url"))


@dataclass
class Worker:
    dir: Path
    store: Store
    app: Celery
    log: Path
    proc: subprocess.Popen[bytes]

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        tail = "\n".join(self.logs().splitlines()[-40:])
        raise AssertionError(f"timed out waiting for {what}; worker log:\n{tail}")

    def claim(self, name: str, timeout: float = 15.0) -> Claim:
        """Claim the next due fire of ``name`` (waiting for it to become due)."""
        claimer = Claimer(self.store, "test-beat")

        def due() -> Claim | None:
            result = claimer.claim_due()
            claimer.mark_published(result.claims)
            mine = [c for c in result.claims if c.name == name]
            return mine[0] if mine else None

        claim: Claim = self.wait(due, f"a due fire of {name}", timeout)
        return claim

    def send(self, claim: Claim) -> None:
        """Publish like beat: ledger task id, cronstore headers, time box."""
        assert claim.interval is not None
        self.app.send_task(
            claim.task,
            args=claim.args,
            kwargs=claim.kwargs,
            task_id=claim.task_id,
            headers={
                "celery_beat_task": True,
                "cronstore_name": claim.name,
                "cronstore_fire_time": claim.fire_time.isoformat(),
                "cronstore_interval": claim.interval,
            },
            soft_time_limit=claim.interval / 2,
            time_limit=claim.interval,
        )

    def ended(self, claim: Claim, timeout: float = 30.0) -> Fire:
        def done() -> Fire | None:
            fire = self.store.fire_by_task_id(claim.task_id)
            return fire if fire is not None and fire.state in TERMINAL else None

        fire: Fire = self.wait(done, f"fire {claim.task_id} to end", timeout)
        return fire

    def runs(self) -> list[str]:
        path = self.dir / "runs.txt"
        return path.read_text().split("\n")[:-1] if path.exists() else []


@pytest.fixture(
    scope="module",
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def worker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Worker]:
    tmp = tmp_path_factory.mktemp("crontask-worker")
    for folder in ("broker", "processed"):
        (tmp / folder).mkdir()
    (tmp / "crontask_worker_app.py").write_text(textwrap.dedent(APP_SOURCE))
    url = _store_url(request.param, request, tmp)
    store = Store(url)
    store.upgrade()
    with store.begin() as conn:
        for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    app = Celery("crontask-sender", set_as_current=False)
    app.conf.update(
        broker_url=WHOLE_FILES,  # whole messages only: see whole_messages.py
        broker_transport_options={
            "data_folder_in": str(tmp / "broker"),
            "data_folder_out": str(tmp / "broker"),
            "control_folder": str(tmp / "control"),
        },
    )
    env = dict(os.environ, CT_DIR=str(tmp), CT_STORE=url)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp), str(ROOT), env.get("PYTHONPATH", "")])
    log = tmp / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "crontask_worker_app",
                "worker",
                "--pool",
                "prefork",
                "-c",
                "2",
                "--loglevel",
                "INFO",
                "-n",
                f"ct-{request.param}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=tmp,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    w = Worker(tmp, store, app, log, proc)
    try:
        w.wait(lambda: " ready." in w.logs(), "the worker to be ready", 30)
        yield w
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        app.close()
        store.close()


def test_an_overrunning_run_times_out_and_the_next_run_resumes(worker: Worker) -> None:
    worker.store.add("slow", task="ct.slow", timer="every 4s")
    first = worker.claim("slow")
    assert first.interval == 4.0
    worker.send(first)
    fire = worker.ended(first)
    assert fire.state == "timed_out", worker.logs()
    assert fire.reason == "time box of 2s exceeded (SoftTimeLimitExceeded)"
    assert fire.node is not None
    assert fire.node.startswith("ct-")
    assert fire.started_at is not None
    assert fire.finished_at is not None
    # The soft limit struck at about start + interval / 2 (prefork: 0.4-0.9 s late).
    # Celery's soft limit counts from the run's start in the pool, a little before the
    # guard records started_at (its transaction; 0.14 s on a loaded CI machine).
    ran = fire.finished_at - fire.started_at
    assert timedelta(seconds=1.5) <= ran < timedelta(seconds=4)
    task = worker.store.get("slow")
    assert task.last_run == fire.started_at  # last_run stays the start time
    assert task.resume_state["out_of_time"] is True
    assert task.resume_state["steps"] > 10

    second = worker.claim("slow")
    worker.send(second)
    fire2 = worker.ended(second)
    assert fire2.state == "succeeded", worker.logs()
    assert fire2.result == '{"resumed": ' + _json(task.resume_state) + "}"
    assert worker.store.get("slow").last_run == fire2.started_at


def test_a_duplicate_delivery_of_a_fire_is_dropped(worker: Worker) -> None:
    worker.store.add("dup", task="ct.count", timer="every 2s")
    claim = worker.claim("dup")
    worker.send(claim)
    worker.send(claim)  # a re-publish of the same fire (lost dispatch, redelivery)
    fire = worker.ended(claim)
    worker.wait(lambda: "duplicate" in worker.logs(), "the duplicate to be refused")
    assert fire.state == "succeeded"
    assert [line.split()[0] for line in worker.runs()].count(claim.task_id) == 1
    assert f"ct.count[{claim.task_id}] duplicate (dup)" in worker.logs()
    assert worker.store.fire_by_task_id(claim.task_id) == fire  # untouched by the duplicate


def test_an_early_run_is_dropped_and_recorded(worker: Worker) -> None:
    worker.store.add("early", task="ct.count", timer="every 1m")
    # As if the previous fire started just now and this fire was overdue: put next_run on
    # the last grid point and last_run at the database's now.
    now = worker.store.now()
    grid = now.replace(second=0, microsecond=0)
    with worker.store.begin() as conn:
        conn.execute(
            sa.update(periodic_task)
            .where(periodic_task.c.name == "early")
            .values(next_run=grid, last_run=now)
        )
    claim = worker.claim("early")
    assert claim.interval == 60.0
    worker.send(claim)
    fire = worker.ended(claim)
    assert fire.state == "dropped", worker.logs()
    assert fire.reason is not None
    assert fire.reason.startswith("early: started at ")
    assert "interval 60s - tolerance 1s" in fire.reason
    assert fire.node is not None
    assert claim.task_id not in {line.split()[0] for line in worker.runs()}
    assert worker.store.get("early").last_run == now
    assert f"ct.count[{claim.task_id}] dropped (early)" in worker.logs()


def test_a_plain_task_records_its_start_node_and_outcome(worker: Worker) -> None:
    """Regression: plain tasks showed "LAST STATE published" forever (only CronTask
    recorded starts and outcomes)."""
    worker.store.add("plain-ok", task="ct.plain", timer="every 2s")
    worker.store.add("plain-bad", task="ct.plain", timer="every 2s", kwargs={"fail": True})
    ok = worker.claim("plain-ok")
    bad = worker.claim("plain-bad")
    worker.send(ok)
    worker.send(bad)
    done = worker.ended(ok)
    assert (done.state, done.result) == ("succeeded", '{"plain": true}'), worker.logs()
    assert done.node is not None
    assert done.node.startswith("ct-")
    assert done.started_at is not None
    assert worker.store.get("plain-ok").last_run == done.started_at
    failed = worker.ended(bad)
    assert failed.state == "failed"
    assert failed.reason == "ValueError: plain task failed on purpose"


def test_a_killed_child_leaves_its_fire_abandoned_and_a_live_one_is_kept(worker: Worker) -> None:
    """Regression: kill -9 of a prefork child left its fire "started" for ever, and a task
    with overlap policy skip was then held back for six hours."""
    worker.store.add("victim", task="ct.sleepy", timer="every 5s", args=[30])
    worker.store.add("alive", task="ct.sleepy", timer="every 10s", args=[4])
    victim, alive = worker.claim("victim"), worker.claim("alive")
    for claim in (victim, alive):
        worker.send(claim)
    sleepy = worker.dir / "sleepy.txt"

    def pids() -> dict[str, int]:
        lines = sleepy.read_text().split() if sleepy.exists() else []
        return {lines[i]: int(lines[i + 1]) for i in range(0, len(lines) - 1, 2)}

    worker.wait(lambda: {victim.task_id, alive.task_id} <= set(pids()), "both runs to start")
    os.kill(pids()[victim.task_id], signal.SIGKILL)
    beat = Claimer(worker.store, "test-beat")

    def abandoned() -> Fire | None:
        beat.abandon_silent()
        fire = worker.store.fire_by_task_id(victim.task_id)
        return fire if fire is not None and fire.state == "abandoned" else None

    fire: Fire = worker.wait(abandoned, "the killed run to be recorded abandoned", 15)
    assert fire.reason is not None
    assert "stopped reporting on the run" in fire.reason
    # The other run kept heartbeating past abandon_after (2 s) and ends normally.
    assert worker.ended(alive).state == "succeeded"


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def test_abandon_policy_rerun_publishes_a_killed_child_s_fire_again_once(worker: Worker) -> None:
    """A real beat and a real prefork worker: kill -9 of the child running a fire of a task
    with abandon policy ``rerun`` gets it recorded abandoned, published again by beat under
    the same task id, started exactly once more (a duplicate delivery is refused) and
    finished; with ``leave`` the killed fire stays abandoned and never runs again."""
    store = worker.store
    for task in store.list():  # beat publishes what is due: only this test's tasks
        store.disable(task.name)
    start = store.now() + timedelta(seconds=3)
    once = start.strftime("%Y-%m-%d %H:%M:%S.%f")
    store.add("rerun-me", task="ct.flaky_host", timer=once, abandon_policy="rerun")
    store.add("leave-me", task="ct.flaky_host", timer=once)
    log = worker.dir / "flaky.txt"

    def runs() -> list[tuple[str, int]]:
        words = log.read_text().split() if log.exists() else []
        return [(words[i], int(words[i + 1])) for i in range(0, len(words) - 1, 2)]

    url = store.engine.url.render_as_string(hide_password=False)
    env = dict(os.environ, CT_DIR=str(worker.dir), CT_STORE=url)
    env["PYTHONPATH"] = os.pathsep.join([str(worker.dir), str(ROOT), env.get("PYTHONPATH", "")])
    beat_log = worker.dir / "beat.log"
    with open(beat_log, "wb") as out:
        beat = subprocess.Popen(
            [
                *(sys.executable, "-m", "celery", "-A", "crontask_worker_app", "beat"),
                *("-S", "celery_cronstore.Scheduler", "--loglevel", "INFO"),
            ],
            cwd=worker.dir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        first = worker.wait(lambda: len(runs()) >= 2 and runs(), "both first runs to start", 30)
        ids = {store.get(name).id: name for name in ("rerun-me", "leave-me")}
        fires = {ids[f.periodic_task_id]: f for f in map(_fire_of(store), first)}
        for _task_id, pid in first:
            os.kill(pid, signal.SIGKILL)
        again, left = fires["rerun-me"].task_id, fires["leave-me"].task_id

        def rerun_done() -> Fire | None:
            fire = store.fire_by_task_id(again)
            return fire if fire is not None and fire.state == "succeeded" else None

        fire: Fire = worker.wait(rerun_done, "the re-run to succeed", 40)
        assert (fire.reruns, fire.attempts, fire.result) == (1, 2, "done")
        assert fire.reason is not None
        assert "published again under the same task id" in fire.reason
        # A duplicate delivery of the re-run is refused by the guard.
        worker.app.send_task(
            "ct.flaky_host",
            task_id=again,
            headers={"cronstore_name": "rerun-me", "cronstore_fire_time": once},
        )
        worker.wait(lambda: f"[{again}] duplicate" in worker.logs(), "the duplicate refused")
        kept = store.fire_by_task_id(left)
        assert kept is not None
        assert (kept.state, kept.reruns, kept.attempts) == ("abandoned", 0, 1)
        assert kept.reason == (
            f"its worker {kept.node} stopped reporting on the run "
            "(killed, or cut off from the database)"
        )
        # The body ran twice for the re-run fire (killed, then once more), once for the other.
        assert [task_id for task_id, _ in runs()].count(again) == 2
        assert [task_id for task_id, _ in runs()].count(left) == 1
    finally:
        beat.send_signal(signal.SIGTERM)
        try:
            beat.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(beat.pid, signal.SIGKILL)
            beat.wait(timeout=10)


def _fire_of(store: Store) -> Callable[[tuple[str, int]], Fire]:
    def fire_of(run: tuple[str, int]) -> Fire:
        fire = store.fire_by_task_id(run[0])
        assert fire is not None
        return fire

    return fire_of
