"""Every pool the docs list keeps taking tasks after each fault a CronTask run can meet.

One real ``celery worker`` per pool (prefork, threads, solo, gevent) on a real Redis
broker, reached through a TCP proxy that can cut it off, with a SQLite store. In turn: a
run that overruns its hard time limit, a run that overruns its soft limit (or its time
box), a broker connection lost mid-run, and a warm shutdown mid-run (then a restart).
After each, the worker (or its restart) must run a plain task and a guarded fire.

What ends an overrunning run depends on the pool (docs/crontask.md, "The time box"): the
hard limit kills a prefork child and ends a gevent greenlet; solo and threads ignore both
limits, where only the cooperative time box ends a run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from pool_workers import Worker, close, make_worker

from harness.tcp_proxy import Proxy

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.redis]

POOLS = ["prefork", "threads", "solo", "gevent"]

#: Hard limit kills in a row per pool (prefork here runs Celery's event loop, on Redis;
#: test_crontask_hard_limit.py does 50 on the loop-less filesystem transport).
HARD_ROUNDS = {"prefork": 10, "gevent": 3, "threads": 1, "solo": 1}

#: How a stubborn run (ignores its soft limit, sleeps 1.5 s; interval 2 s, so a time box
#: of 1 s; soft limit 0.5 s, hard limit 1 s) is recorded on each pool.
HARD_REASON = {
    "prefork": "killed by the hard time limit",
    "gevent": "killed by the hard time limit",
    "threads": "time box of 1s used up; ended cleanly",
    "solo": "time box of 1s used up; ended cleanly",
}

#: How a cooperative run (loops until out_of_time(); soft limit 0.5 s < its 1 s time box)
#: is recorded: only prefork enforces the soft limit.
SOFT_REASON = {
    "prefork": "time box of 1s exceeded (SoftTimeLimitExceeded)",
    "gevent": "time box of 1s used up; ended cleanly",
    "threads": "time box of 1s used up; ended cleanly",
    "solo": "time box of 1s used up; ended cleanly",
}


def _via(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"127.0.0.1:{port}"))


@pytest.fixture(params=POOLS)
def pool_worker(
    request: pytest.FixtureRequest, redis_url: str, tmp_path: Path
) -> Iterator[tuple[Worker, Proxy]]:
    pool = str(request.param)
    if pool == "gevent" and importlib.util.find_spec("gevent") is None:
        pytest.skip("gevent is not installed (it is in the dev group: pip install --group dev)")
    parts = urlsplit(redis_url)
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 6379))
    concurrency = 1 if pool in ("prefork", "solo") else 2
    worker = make_worker(
        tmp_path,
        pool=pool,
        concurrency=concurrency,
        broker=_via(redis_url, proxy.port),
        sender_broker=redis_url,
    )
    try:
        worker.start()
        yield worker, proxy
    finally:
        close(worker)
        proxy.close()


def _keeps_taking_tasks(worker: Worker, step: str) -> None:
    """A plain task and a guarded fire both run on ``worker`` after ``step``."""
    worker.ping(f"after-{step}")
    name = f"after-{step}"
    worker.store.add(name, task="ctp.nap", timer="every 1s", args=[0.05])
    fire = worker.ended(worker.fire(name, interval=60.0, soft=30.0, hard=60.0))
    assert (fire.state, fire.result) == ("succeeded", "rested"), worker.tail()


def test_every_pool_keeps_taking_tasks_after_each_fault(
    pool_worker: tuple[Worker, Proxy],
) -> None:
    worker, proxy = pool_worker
    pool = worker.pool

    # 1. Past the hard time limit.
    worker.store.add("stubborn", task="ctp.stubborn", timer="every 1s", args=[1.5])
    for round_ in range(HARD_ROUNDS[pool]):
        fire = worker.ended(worker.fire("stubborn", interval=2.0, soft=0.5, hard=1.0))
        assert fire.state == "timed_out", (round_, worker.tail())
        assert fire.reason is not None
        assert fire.reason.startswith(HARD_REASON[pool]), (round_, fire.reason)
        worker.ping(f"hard-{round_}")
    _keeps_taking_tasks(worker, "hard-limit")

    # 2. Past the soft time limit (or the time box, where no pool enforces the limit).
    worker.store.add("cooperative", task="ctp.cooperative", timer="every 1s")
    fire = worker.ended(worker.fire("cooperative", interval=2.0, soft=0.5, hard=3.0))
    assert (fire.state, fire.reason) == ("timed_out", SOFT_REASON[pool]), worker.tail()
    _keeps_taking_tasks(worker, "soft-limit")

    # 3. The broker connection lost mid-run, back a moment later.
    worker.store.add("cut-off", task="ctp.nap", timer="every 1s", args=[2.0])
    claim = worker.fire("cut-off", interval=60.0, soft=30.0, hard=60.0)
    worker.wait(lambda: claim.task_id in worker.notes("nap"), "the run to start")
    proxy.down()
    worker.wait(lambda: "Connection to broker lost" in worker.logs(), "the lost connection")
    proxy.up()
    fire = worker.ended(claim)
    assert (fire.state, fire.result) == ("succeeded", "rested"), worker.tail()
    _keeps_taking_tasks(worker, "reconnect")

    # 4. A warm shutdown mid-run: the run ends first; the restarted worker takes tasks.
    worker.store.add("shutdown", task="ctp.nap", timer="every 1s", args=[2.0])
    claim = worker.fire("shutdown", interval=60.0, soft=30.0, hard=60.0)
    worker.wait(lambda: claim.task_id in worker.notes("nap"), "the run to start")
    assert worker.stop() == 0
    fire = worker.ended(claim, timeout=1)
    assert (fire.state, fire.result) == ("succeeded", "rested"), worker.tail()
    worker.start()
    _keeps_taking_tasks(worker, "restart")
