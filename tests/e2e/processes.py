"""Start and stop real celery beat / worker processes for end-to-end tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def celery_env(broker: str, store: str, record: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        E2E_BROKER=broker,
        E2E_STORE=store,
        E2E_RECORD=str(record),
        PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]),
        **extra,
    )
    return env


@contextmanager
def running(
    commands: list[list[str]], env: dict[str, str], logs: Path
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Run each command as a `python -m celery -A e2e_app ...` process; stop all after."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for index, args in enumerate(commands):
            with open(logs / f"proc{index}-{args[0]}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "celery", "-A", "e2e_app", *args],
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        cwd=logs,
                        start_new_session=True,
                    )
                )
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def beat(extra: tuple[str, ...] = (), scheduler: str = "celery_cronstore.Scheduler") -> list[str]:
    return ["beat", "-S", scheduler, "--loglevel", "INFO", *extra]


def worker(name: str, pool: str = "solo") -> list[str]:
    """A worker's arguments; its node name is ``name`` and this test process's id.

    Node names must be unique per broker: on RabbitMQ a worker's mailbox queue
    (``<node>.celery.pidbox``) is exclusive, and a second worker of the same name (another
    xdist worker's test, run at the same time) fails to start with RESOURCE_LOCKED.
    """
    return [
        "worker",
        "--pool",
        pool,
        "--loglevel",
        "INFO",
        "-n",
        f"{name}-{os.getpid()}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]


def deliveries(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]


def wait_for(predicate: Any, timeout: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    tails = "\n".join(
        f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-25:])
        for p in sorted(logs.glob("*.log"))
    )
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{tails}")


def window_delivered(
    store: Any, names: Iterable[str], record: Path, start: datetime, end: datetime
) -> bool:
    """Whether every fire of tasks ``names`` the ledger holds between ``start`` and
    ``end`` was delivered (is in the record file)."""
    delivered = {d["task_id"] for d in deliveries(record)}
    return all(
        f.task_id in delivered
        for name in names
        for f in store.history(name, 10_000)
        if start <= f.fire_time <= end
    )
