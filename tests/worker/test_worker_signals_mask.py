"""The worker's helper thread never takes a signal meant for the process (issue 27).

A prefork child killed by the hard time limit died inside the pool's result-queue lock
when its second SIGTERM landed on CronTask's liveness thread (see
test_crontask_hard_limit.py for the real worker); these check the mechanism directly.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from pathlib import Path

import pytest

from celery_cronstore.store import Store
from celery_cronstore.worker import runtime
from celery_cronstore.worker.runtime import Liveness, start_quiet_thread

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="signal masks of threads, read from /proc"
)

FROM_OUTSIDE = {signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
FAULTS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGPIPE}


def _blocked(native_id: int) -> set[int]:
    """The signals thread ``native_id`` of this process blocks (from /proc)."""
    status = Path(f"/proc/self/task/{native_id}/status").read_text()
    mask = int(
        next(line for line in status.splitlines() if line.startswith("SigBlk:")).split()[1], 16
    )
    return {number for number in range(1, 65) if mask & (1 << (number - 1))}


def test_a_quiet_thread_blocks_outside_signals_and_the_caller_keeps_its_mask() -> None:
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    seen: dict[str, set[int]] = {}
    go = threading.Event()

    def body() -> None:
        seen["mask"] = set(signal.pthread_sigmask(signal.SIG_BLOCK, []))
        go.wait(5)

    thread = threading.Thread(target=body, daemon=True)
    start_quiet_thread(thread)
    try:
        assert thread.native_id is not None
        blocked = _blocked(thread.native_id)
    finally:
        go.set()
        thread.join(5)
    assert set(FROM_OUTSIDE) <= seen["mask"]
    assert set(FROM_OUTSIDE) <= blocked
    assert not set(FAULTS) & blocked  # a fault in the thread itself still reaches it
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before


def test_the_liveness_thread_blocks_sigterm(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    try:
        live = Liveness(store, abandon_after=60.0)
        live.started("some-fire")
        assert live._thread is not None
        assert live._thread.native_id is not None
        assert signal.SIGTERM in _blocked(live._thread.native_id)
        assert signal.SIGTERM not in _blocked(threading.get_native_id())
    finally:
        store.close()


def test_a_child_forked_while_a_thread_holds_the_store_lock_can_take_it() -> None:
    """The parent records a hard limit kill in one thread while another forks a child."""
    with runtime._lock, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
        pid = os.fork()
        if pid == 0:  # the child: its copy of the lock must be free
            os._exit(0 if runtime._lock.acquire(timeout=2) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
