"""Issue 27: after a hard time limit kill of a CronTask child, the prefork worker kept a
child that never took a task again (docs/crontask.md told of it as a known issue).

The cause: the parent sends the child SIGTERM (twice, from two of billiard's threads, on a
transport without an event loop like the filesystem one). The child's first SIGTERM
handler raises ``SystemExit`` and resets SIGTERM to its default action; on its way out the
child blocks SIGTERM in its main thread while it writes its last message to the pool's
result queue, holding the queue's multiprocessing lock. The second SIGTERM was then
delivered to the only thread that did not block it, CronTask's liveness heartbeat, and
its default action ended the process with the lock held: the child forked in its place
waited on that lock for ever. The liveness thread now blocks those signals.

One prefork child (``-c 1``), so a replacement that cannot work stops the whole worker; a
CronTask that ignores its soft limit (the issue's reproduction) is killed by the hard limit
ROUNDS times in a row, each time followed by a task the replacement child must run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from pool_workers import close, make_worker

# serial: 50 real kills with a 1 s limit, timing-dependent by nature.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

#: Kills in a row (the hang reproduced within the first two or three before the fix).
ROUNDS = int(os.environ.get("CRONSTORE_HARD_LIMIT_ROUNDS", "50"))


def test_hard_limit_kills_leave_a_prefork_worker_that_keeps_taking_tasks(tmp_path: Path) -> None:
    worker = make_worker(tmp_path, pool="prefork", concurrency=1, broker="filesystem://")
    worker.store.add("stubborn", task="ctp.stubborn", timer="every 1s", args=[30])
    worker.start()
    try:
        children: set[int] = set()
        began = time.monotonic()
        for round_ in range(ROUNDS):
            claim = worker.fire("stubborn", interval=2.0, soft=0.5, hard=1.0)
            fire = worker.ended(claim, timeout=20)
            where = f"round {round_ + 1} of {ROUNDS}:\n{worker.tail()}"
            assert fire.state == "timed_out", where
            assert fire.reason is not None
            assert fire.reason.startswith("killed by the hard time limit"), where
            child = worker.notes("stubborn")[claim.task_id]
            assert child not in children, where  # a fresh child each round: the replacement
            children.add(child)
            # The replacement takes the next task (the hang: received, never started).
            assert worker.ping(f"after-kill-{round_}") != child, where
        elapsed = time.monotonic() - began
        print(f"{ROUNDS} of {ROUNDS} hard limit kills on prefork in {elapsed:.0f} s")
        assert "Process 'ForkPoolWorker" in worker.logs()  # the kills were real
        assert worker.stop() == 0
    finally:
        close(worker)
