"""The processes of one harness run: beat replicas, workers, and the proxies in front of
the database and the broker (so an outage never stops a server other people use)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.tcp_proxy import Proxy

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["FAKETIME", "Cluster", "Proc", "Proxy"]

#: libfaketime (Debian: ``apt install faketime``): shifts every wall-clock read of a
#: process, C code included. Without it the skew scenario shifts ``time.time`` only.
FAKETIME = next(
    (
        p
        for p in (
            Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"),
            Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"),
            Path("/usr/lib/faketime/libfaketime.so.1"),
        )
        if p.exists()
    ),
    None,
)


@dataclass
class Proc:
    """One celery process the harness can kill, pause and restart."""

    name: str
    args: list[str]
    env: dict[str, str]
    logs: Path
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0
    stopped: bool = False  # SIGSTOPped right now
    kills: int = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.logs / f"{self.name}.log", "ab")  # noqa: SIM115 (the child owns it)
        log.write(f"\n===== start {self.starts} at {time.time():.3f}\n".encode())
        log.flush()
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "harness.app", *self.args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.logs,
            start_new_session=True,
        )
        log.close()
        self.stopped = False

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive:
            assert self.popen is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)

    def kill9(self) -> None:
        self.kills += 1
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait()
        self.stopped = False

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.stopped = False

    def stop(self, timeout: float = 10.0) -> None:
        if not self.alive:
            return
        assert self.popen is not None
        self.resume()
        self.signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.popen.wait()


@dataclass
class Cluster:
    """Three (by default) beat replicas and the recording workers of one scenario."""

    logs: Path
    base_env: dict[str, str]
    beats: list[Proc] = field(default_factory=list)
    workers: list[Proc] = field(default_factory=list)

    def add_beat(self, extra_env: dict[str, str]) -> Proc:
        env = {**self.base_env, **extra_env}
        args = ["beat", "-S", "celery_cronstore.Scheduler", "--loglevel", "INFO"]
        proc = Proc(f"beat{len(self.beats)}", args, env, self.logs)
        self.beats.append(proc)
        return proc

    def add_worker(self, extra_env: dict[str, str], concurrency: int = 4) -> Proc:
        name = f"worker{len(self.workers)}"
        args = [
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            str(concurrency),
            "--loglevel",
            "INFO",
            "-n",
            f"{name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        proc = Proc(name, args, {**self.base_env, **extra_env}, self.logs)
        self.workers.append(proc)
        return proc

    @property
    def procs(self) -> list[Proc]:
        return [*self.workers, *self.beats]

    def start(self) -> None:
        for proc in self.procs:
            proc.start()

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until every worker logged ``ready`` and every beat logged its node name."""
        deadline = time.monotonic() + timeout
        pending = {p.name: ("ready." if p in self.workers else "ready as") for p in self.procs}
        while pending and time.monotonic() < deadline:
            for name, marker in list(pending.items()):
                path = self.logs / f"{name}.log"
                if path.exists() and marker in path.read_text(errors="replace"):
                    del pending[name]
            dead = [p.name for p in self.procs if not p.alive]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited at start; see {self.logs}")
            time.sleep(0.2)
        if pending:
            raise RuntimeError(f"{', '.join(pending)} not ready after {timeout}s; see {self.logs}")

    def restart_dead_beats(self) -> int:
        """Start every beat replica that died (kill -9, a ``kill`` fault); return how many."""
        dead = [p for p in self.beats if p.popen is not None and not p.alive]
        for proc in dead:
            proc.start()
        return len(dead)

    def stop(self) -> None:
        for proc in self.beats:
            proc.stop()
        for proc in self.workers:
            proc.stop()
