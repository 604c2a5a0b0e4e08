"""Real ``celery worker`` processes of any pool, for the fault tests of CronTask.

Used by ``test_crontask_hard_limit.py`` and ``test_crontask_pools.py``. A worker runs the
app below (written to a temporary directory) on a real broker (the filesystem transport,
or Redis, possibly through a TCP proxy that can cut it off) with a SQLite store. Fires are
claimed with ``Claimer.claim_due()`` and sent the way beat sends them (the ledger's task
id, the ``cronstore_*`` headers, the time limits); the worker's guard does the rest.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery
from whole_messages import URL as WHOLE_FILES

from celery_cronstore.records import Fire
from celery_cronstore.store import Claim, Claimer, Store

ROOT = Path(__file__).resolve().parents[2]

TERMINAL = ("succeeded", "failed", "timed_out", "dropped", "skipped", "abandoned")

APP_SOURCE = '''
"""The worker side of the CronTask fault tests (written to a temporary directory)."""

import os
import time
from pathlib import Path

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded

from celery_cronstore import CronTask

HERE = Path(os.environ["CT_DIR"])
BROKER = os.environ["CT_BROKER"]
app = Celery("pool_app")
app.conf.update(
    broker_url=BROKER,
    broker_connection_retry_on_startup=True,
    task_default_queue=os.environ["CT_QUEUE"],
    task_ignore_result=True,
    worker_prefetch_multiplier=1,
    cronstore_url=os.environ["CT_STORE"],
    cronstore_tolerance=1.0,
    cronstore_abandon_after=2.0,  # heartbeats every second (the liveness thread runs)
)
if BROKER == "filesystem://":
    app.conf.broker_transport_options = {
        "data_folder_in": str(HERE / "broker"),
        "data_folder_out": str(HERE / "broker"),
        "control_folder": str(HERE / "control"),
        "processed_folder": str(HERE / "processed"),
        "polling_interval": 0.1,
    }


def note(kind, token):
    with open(HERE / "notes.txt", "a", encoding="utf-8") as out:
        out.write(f"{kind} {token} {os.getpid()}\\n")


@app.task(base=CronTask, bind=True, name="ctp.stubborn")
def stubborn(self, seconds):
    """Ignores its soft time limit (catches it and sleeps on): the issue's reproduction."""
    note("stubborn", self.request.id)
    try:
        time.sleep(seconds)
    except SoftTimeLimitExceeded:
        time.sleep(seconds)
    return "overran"


@app.task(base=CronTask, bind=True, name="ctp.cooperative")
def cooperative(self):
    """Works in small steps until its time box is used up."""
    note("cooperative", self.request.id)
    while not self.out_of_time():
        time.sleep(0.05)
    return "ended cleanly"


@app.task(base=CronTask, bind=True, name="ctp.nap")
def nap(self, seconds):
    note("nap", self.request.id)
    time.sleep(seconds)
    return "rested"


@app.task(name="ctp.ping")
def ping(token):
    """A plain task sent with .delay(): proves that the worker still takes tasks."""
    note("ping", token)
    return token
'''


@dataclass
class Worker:
    """One ``celery worker`` process and what the test needs to drive and watch it."""

    dir: Path
    store: Store
    sender: Celery
    pool: str
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    claimer: Claimer = field(init=False)

    def __post_init__(self) -> None:
        self.claimer = Claimer(self.store, "test-beat")

    @property
    def log(self) -> Path:
        return self.dir / f"worker-{self.starts}.log"

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def start(self) -> None:
        self.starts += 1
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.dir,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait(lambda: " ready." in self.logs(), "the worker to be ready", 60)

    def stop(self, timeout: float = 30.0) -> int:
        """Warm shutdown (SIGTERM); return the exit code (killed after ``timeout``)."""
        proc = self.proc
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            raise AssertionError(f"no warm shutdown in {timeout}s:\n{self.tail()}") from None
        finally:
            self.proc = None

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.logs().splitlines()[-lines:])

    def wait(self, predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; worker log:\n{self.tail()}")

    def claim(self, name: str) -> Claim:
        """Claim the newest due fire of ``name`` (waiting for one to become due)."""

        def due() -> Claim | None:
            result = self.claimer.claim_due()
            self.claimer.mark_published(result.claims)
            mine = [c for c in result.claims if c.name == name]
            return mine[-1] if mine else None

        claim: Claim = self.wait(due, f"a due fire of {name}", 15)
        return claim

    def fire(self, name: str, *, interval: float, soft: float, hard: float) -> Claim:
        """Claim a fire of ``name`` and publish it like beat, with these time limits."""
        claim = self.claim(name)
        self.sender.send_task(
            claim.task,
            args=claim.args,
            kwargs=claim.kwargs,
            task_id=claim.task_id,
            headers={
                "celery_beat_task": True,
                "cronstore_name": claim.name,
                "cronstore_fire_time": claim.fire_time.isoformat(),
                "cronstore_interval": interval,
            },
            soft_time_limit=soft,
            time_limit=hard,
        )
        return claim

    def ended(self, claim: Claim, timeout: float = 30.0) -> Fire:
        def done() -> Fire | None:
            fire = self.store.fire_by_task_id(claim.task_id)
            return fire if fire is not None and fire.state in TERMINAL else None

        fire: Fire = self.wait(done, f"fire {claim.task_id} ({claim.name}) to end", timeout)
        return fire

    def notes(self, kind: str) -> dict[str, int]:
        """Token -> process id of the ``kind`` runs noted so far."""
        path = self.dir / "notes.txt"
        words = path.read_text().split("\n") if path.exists() else []
        found = [line.split() for line in words if line.startswith(kind + " ")]
        return {parts[1]: int(parts[2]) for parts in found if len(parts) == 3}

    def ping(self, token: str, timeout: float = 20.0) -> int:
        """Send a plain task; return the pid that ran it (fail if nobody takes it)."""
        self.sender.send_task("ctp.ping", args=[token])
        pid: int = self.wait(
            lambda: self.notes("ping").get(token), f"ping {token} to run (a stuck worker?)", timeout
        )
        return pid


def make_worker(
    tmp: Path,
    *,
    pool: str,
    concurrency: int,
    broker: str,
    sender_broker: str | None = None,
) -> Worker:
    """Prepare (not start) a worker of ``pool`` on ``broker`` with a fresh SQLite store.

    ``broker`` is ``filesystem://`` or a Redis URL (the worker's; ``sender_broker`` is the
    test's own way to the same Redis, when the worker's goes through a proxy).
    """
    for folder in ("broker", "processed", "control"):
        (tmp / folder).mkdir(exist_ok=True)
    (tmp / "pool_app.py").write_text(textwrap.dedent(APP_SOURCE))
    url = f"sqlite:///{tmp / 'store.sqlite'}"
    store = Store(url)
    store.upgrade()
    queue = f"ctp-{os.getpid()}-{tmp.name}"
    sender = Celery("pool-sender", set_as_current=False)
    # On the filesystem broker the sender writes whole messages only: see whole_messages.py.
    sending = WHOLE_FILES if broker == "filesystem://" else broker
    sender.conf.update(broker_url=sender_broker or sending, task_default_queue=queue)
    if broker == "filesystem://":
        sender.conf.broker_transport_options = {
            "data_folder_in": str(tmp / "broker"),
            "data_folder_out": str(tmp / "broker"),
            "control_folder": str(tmp / "control"),
        }
    env = dict(os.environ, CT_DIR=str(tmp), CT_STORE=url, CT_BROKER=broker, CT_QUEUE=queue)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp), str(ROOT), env.get("PYTHONPATH", "")])
    argv = [
        *(sys.executable, "-m", "celery", "-A", "pool_app", "worker"),
        *("--pool", pool, "-c", str(concurrency), "--loglevel", "INFO"),
        *("-n", f"ctp-{pool}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat"),
    ]
    return Worker(tmp, store, sender, pool, argv, env)


def close(worker: Worker) -> None:
    if worker.proc is not None and worker.proc.poll() is None:
        with contextlib.suppress(AssertionError):  # the test's own failure says more
            worker.stop(timeout=20)
    worker.sender.close()
    worker.store.close()
