"""A redis-server of a test's own (the shared one is never reconfigured or stopped)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.ports import free_port


@contextmanager
def private_redis(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A redis-server of this test's own: (URL, port)."""
    port = free_port()
    proc = start_redis(port, tmp_path)
    try:
        yield f"redis://127.0.0.1:{port}/0", port
    finally:
        proc.kill()
        proc.wait()


def start_redis(port: int, tmp_path: Path) -> subprocess.Popen[bytes]:
    """Start ``redis-server`` on ``port`` (skip, or under CI=true fail, without it)."""
    if shutil.which("redis-server") is None:
        message = "redis-server is not installed (a test starts one of its own)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("the private redis-server did not start")
