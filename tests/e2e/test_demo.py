"""`make demo`'s program, run for real: it fires, stops on every way out, leaves nothing.

Each test copies the demo's tracked files into a scratch git repository and runs
``python -m examples.demo`` there, so "no untracked file" is checked without the shared
working tree.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX"),
]

ROOT = Path(__file__).resolve().parents[2]
DEMO_FILES = ("examples/__init__.py", "examples/demo.py", "examples/demo_app.py", ".gitignore")
FIRED = re.compile(r"^\[demo\] fired: ")


class Demo:
    """A running ``python -m examples.demo`` whose output lines a thread collects."""

    def __init__(self, checkout: Path, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRONSTORE_DEMO")}
        env["PYTHONUNBUFFERED"] = "1"
        self.checkout = checkout
        self.process = subprocess.Popen(
            [sys.executable, "-m", "examples.demo", *args],
            cwd=checkout,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # Its own session: the test can look for anything left in the demo's group.
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._seen = 0
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def output(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def wait_for(self, pattern: re.Pattern[str], timeout: float) -> str:
        """Return the first new output line matching ``pattern``; fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines[self._seen :]:
                    self._seen += 1
                    if pattern.search(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    break
                self._changed.wait(timeout=min(left, 0.5))
        pytest.fail(f"no line matching {pattern.pattern!r}; output:\n{self.output()}")

    def finish(self, timeout: float) -> int:
        """Wait for the demo to exit and its output to end; return its exit code."""
        code = self.process.wait(timeout=timeout)
        # A child still alive would hold the output pipe open: the reader would not end.
        self._reader.join(timeout=10)
        assert not self._reader.is_alive(), (
            f"the demo exited, its children did not: {leftovers(self.checkout)}"
        )
        return code

    def worker_group(self) -> int:
        """Return the worker's process group as the demo printed it."""
        match = re.search(r"process group (\d+)", self.output())
        if match is None:
            pytest.fail("the demo did not print the worker's process group")
        return int(match.group(1))

    def kill(self) -> None:
        """Kill whatever a failed check left behind, then close the output pipe."""
        for pid in [self.process.pid, *(int(p.split()[0]) for p in leftovers(self.checkout))]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self._reader.join(timeout=30)
        if not self._reader.is_alive():  # closing under a blocked reader would hang
            assert self.process.stdout is not None
            self.process.stdout.close()


def _processes() -> Iterator[tuple[int, str, int, Path | None]]:
    """Yield (pid, command, process group, working directory) of each live process."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cwd: Path | None = (entry / "cwd").resolve()
        except OSError:
            continue
        command, rest = stat.split("(", 1)[1].rsplit(")", 1)
        state, _ppid, group = rest.split()[:3]
        if state != "Z":
            yield int(entry.name), command, int(group), cwd


def group_members(group: int) -> list[str]:
    """Return ``pid command`` of every live (non-zombie) process in ``group``."""
    return [f"{pid} {cmd}" for pid, cmd, pgrp, _ in _processes() if pgrp == group]


def leftovers(checkout: Path) -> list[str]:
    """Return ``pid command`` of every live process working in ``checkout``."""
    return [f"{pid} {cmd}" for pid, cmd, _, cwd in _processes() if cwd == checkout.resolve()]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git repository holding the demo's tracked files, committed and clean."""
    repo = tmp_path / "checkout"
    for name in DEMO_FILES:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, repo / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "demo"], check=True)
    return repo


def untracked(repo: Path) -> str:
    """Return ``git status --porcelain`` (untracked files included) for ``repo``."""
    return subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=all"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def assert_clean_stop(demo: Demo, checkout: Path) -> None:
    groups = (demo.worker_group(), demo.process.pid)
    left = [m for g in groups for m in group_members(g)] + leftovers(checkout)
    assert left == [], f"processes left running: {left}"
    assert untracked(checkout) == ""
    assert (checkout / "var" / "demo" / "cronstore.sqlite").exists()
    assert not (checkout / "control").exists()


def test_demo_fires_and_stops_after_seconds(checkout: Path) -> None:
    demo = Demo(checkout, "--seconds", "12")
    try:
        command = demo.wait_for(re.compile(r"^\[demo\] running: "), timeout=30)
        assert "worker -B --scheduler celery_cronstore.Scheduler" in command
        assert " -S " not in command  # on a worker, -S is --statedb
        started = time.monotonic()
        demo.wait_for(FIRED, timeout=10)
        assert time.monotonic() - started < 10
        code = demo.finish(timeout=60)
        assert code == 0, "\n".join(demo.lines)
        assert any("stopping after 12s" in line for line in demo.lines)
        assert not any("WARNING" in line and "fired" in line for line in demo.lines)
        assert_clean_stop(demo, checkout)
    finally:
        demo.kill()  # after the checks: only what a failed check left behind


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_demo_stops_everything_on_a_signal_to_the_demo_alone(
    checkout: Path, signum: signal.Signals
) -> None:
    demo = Demo(checkout)
    try:
        demo.wait_for(FIRED, timeout=40)
        demo.process.send_signal(signum)  # the demo's pid only, not its group
        code = demo.finish(timeout=60)
        assert code == 0, "\n".join(demo.lines)
        assert any(f"{signum.name}: stopping" in line for line in demo.lines)
        assert_clean_stop(demo, checkout)
    finally:
        demo.kill()  # after the checks: only what a failed check left behind
