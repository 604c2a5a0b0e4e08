"""A PostgreSQL failover (issues 26 and 30): a real primary and its synchronous streaming
standby (``harness.pg_pair``), the store on a multi-host URL over both
(``target_session_attrs=read-write``). The primary's postmaster is killed with SIGKILL,
the standby promoted a moment later.

- The store: the pool's connections to the dead primary are dropped on the first error
  (one failed call at most, none with ``pool_pre_ping``), beat's held connection too, and
  nothing logs "Exception during reset".
- A real ``celery beat`` with a 1-second task must claim again within about two seconds
  of the promoted server accepting writes, claim no fire time twice, publish no fire
  twice, and say so in two log lines, without a traceback. The figure (seconds from the
  promoted server accepting writes to the first fire claimed on it) is printed (``-s``).
- :class:`~celery_cronstore.beat.loop.Backoff` retries fast while a failover completes,
  then less and less often.
- The primary dies between beat's publish of a batch and its mark (issue 30): the fires
  are ``sending`` on the promoted standby, beat marks them once it is back, and none is
  published twice.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from conftest import IN_CI
from processes import beat, celery_env, running, wait_for

from celery_cronstore.beat.loop import FAST_FOR, FAST_RETRY, Backoff
from celery_cronstore.errors import StoreUnavailableError
from celery_cronstore.store import Claimer, Store
from harness.pg_pair import PgPair, why_not

ROOT = Path(__file__).resolve().parents[2]

#: Seconds between the primary's death and the standby's promotion (what a failover
#: manager takes to notice; beat retries all along).
OUTAGE = float(os.environ.get("CRONSTORE_FAILOVER_OUTAGE", "2.0"))
#: The longest accepted time from the promoted server accepting writes to the first claim.
RESUME_WITHIN = 2.0
#: Warning and error lines beat may log for one outage: when it starts and when it ends
#: (besides the LISTEN connection's, which says it stopped listening).
OUTAGE_LINES = 2

_LEVEL = re.compile(r"\b(WARNING|ERROR|CRITICAL)/")


def _refuse(message: str) -> None:
    if IN_CI:
        pytest.fail(f"{message}; CI=true requires the primary/standby pair")
    pytest.skip(message)


@pytest.fixture
def pair() -> Iterator[PgPair]:
    """A primary and a synchronous standby of this test's own (skips where initdb cannot
    run, unless CI=true)."""
    problem = why_not()
    if problem is not None:
        _refuse(problem)
    servers = PgPair()
    try:
        servers.start()
    except (subprocess.CalledProcessError, RuntimeError, OSError) as exc:
        servers.stop()
        detail = getattr(exc, "stderr", "") or str(exc)
        _refuse(f"cannot start a PostgreSQL primary and standby here: {detail.strip()[-300:]}")
    yield servers
    servers.stop()


def covered(rows: list[sa.Row[tuple[datetime, int, str]]]) -> Counter[datetime]:
    """Return how many ledger rows cover each grid second (a missed row covers its run)."""
    seen: Counter[datetime] = Counter()
    for fire_time, count, _state in rows:
        for step in range(count):
            seen[fire_time + timedelta(seconds=step)] += 1
    return seen


def fail_over(pair: PgPair) -> None:
    """Kill the primary, promote the standby, return once it accepts writes."""
    pair.kill_primary()
    pair.promote()
    while not pair.accepts_writes(1):
        time.sleep(0.02)


@pytest.mark.postgres
@pytest.mark.parametrize("pre_ping", [False, True], ids=["beat", "pre-ping"])
def test_store_drops_the_dead_primary_s_connections_at_once(
    pair: PgPair, pre_ping: bool, caplog: pytest.LogCaptureFixture
) -> None:
    pair.create_database("cronstore")
    store = Store(pair.failover_url("cronstore"), pool_pre_ping=pre_ping)
    store.upgrade()
    claimer = Claimer(store, "beat-1", hold=True)  # beat's held connection (store.idle)
    try:
        claimer.peek()
        with store.engine.connect() as a, store.engine.connect() as b:  # two pooled ones
            a.exec_driver_sql("SELECT 1")
            b.exec_driver_sql("SELECT 1")
        assert store.engine.pool.checkedin() >= 2
        # The standby alone (no target_session_attrs): a write is refused as unavailable.
        standby = Store(pair.url(1, "cronstore"))
        try:
            with pytest.raises(StoreUnavailableError, match="read-only"):
                standby.add("on-standby", task="app.x", timer="every 1m")
        finally:
            standby.close()
        caplog.set_level("DEBUG")
        fail_over(pair)
        # Beat's first look after the failover is on its held connection: it fails once, and
        # must drop the pooled connections too. Before the fix each call took the next dead
        # pooled connection (the held connection reopens from the pool): 3 failures, each with
        # an "Exception during reset" traceback.
        failures = []
        for _ in range(3):
            try:
                claimer.peek()
            except StoreUnavailableError as exc:
                failures.append(str(exc))
        for _ in range(3):
            try:
                store.now()
            except StoreUnavailableError as exc:
                failures.append(str(exc))
        assert len(failures) <= 1, failures
        assert all("unreachable" in f for f in failures), failures
        store.add("after", task="app.after", timer="every 1m")  # a write, on the promoted one
        assert "Exception during reset" not in caplog.text
        assert not [r for r in caplog.records if r.exc_info and r.levelname != "DEBUG"]
    finally:
        claimer.close()
        store.close()


def test_backoff_retries_fast_while_a_failover_completes_then_less_often(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backoff = Backoff(poll_interval=1.0, scrub=str)
    error = StoreUnavailableError("postgresql+psycopg://u:***@db/x", "terminating connection")
    began, waits = time.monotonic(), []
    with caplog.at_level("DEBUG", logger="celery.beat"):
        while time.monotonic() - began < FAST_FOR + 1.6:
            waits.append((time.monotonic() - began, backoff.failed("database", error)))
            time.sleep(waits[-1][1])
        backoff.reset()
    delays = [wait for _, wait in waits]
    grows = delays.index(2 * FAST_RETRY)  # the first wait past the fast window
    assert set(delays[:grows]) == {FAST_RETRY}, waits
    assert waits[grows - 1][0] - 0.01 < FAST_FOR <= waits[grows][0] + 0.01, waits
    assert delays[grows:] == sorted(delays[grows:]), waits
    assert delays[-1] == 1.0, waits  # the poll interval bounds it
    assert backoff.failures == 0
    # The outage's first and last lines are the loop's (beat.stall): none here above debug.
    assert [r.getMessage() for r in caplog.records if r.levelno > 10] == []
    assert len([r for r in caplog.records if "unavailable" in r.getMessage()]) == len(waits)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.serial
def test_beat_resumes_within_two_seconds_of_a_promoted_standby(
    pair: PgPair, redis_url: str, tmp_path: Path
) -> None:
    pair.create_database("cronstore")
    url = pair.failover_url("cronstore")
    store = Store(url)
    store.upgrade()
    store.add("every-1s", task="e2e.record", timer="*:*:*", args=["failover"])
    store.close()
    queue = f"failover-{uuid.uuid4().hex[:8]}"
    # The production poll interval: it bounds the back-off, a short one would hide it.
    env = celery_env(redis_url, url, tmp_path / "record.jsonl", E2E_QUEUE=queue, E2E_POLL="5")
    ledger = sa.create_engine(url, poolclass=sa.pool.NullPool)

    def claims_since(since: float) -> list[datetime]:
        with ledger.connect() as conn:
            return list(
                conn.execute(
                    sa.text(
                        "SELECT claimed_at FROM cronstore_fire WHERE claimed_at > :t"
                        " AND state <> 'missed' ORDER BY claimed_at"
                    ),
                    {"t": datetime.fromtimestamp(since, timezone.utc).replace(tzinfo=None)},
                ).scalars()
            )

    log = tmp_path / "proc0-beat.log"
    with running([beat()], env, tmp_path):
        started = time.time()
        wait_for(lambda: len(claims_since(started)) >= 3, 40, "the first fires", tmp_path)
        ledger.dispose()
        logged_before = log.stat().st_size
        killed = time.time()
        pair.kill_primary()
        time.sleep(OUTAGE)
        promoting = time.time()  # nothing can claim from here until the standby is promoted
        pair.promote()
        promoted = time.time()  # pg_ctl promote -w returned: the standby left recovery
        while not pair.accepts_writes(1):
            time.sleep(0.02)
        ready = time.time()
        wait_for(
            lambda: bool(claims_since(promoting)), 30, "a claim on the promoted standby", tmp_path
        )
        time.sleep(3)  # a few fires more: the grid goes on without doubles
    first = claims_since(promoting)[0].replace(tzinfo=timezone.utc).timestamp()
    resumed = first - ready
    # Beat may get in before this test's own probe does: then the figure is negative.
    print(
        f"\nfailover: primary killed at +0.00 s, promotion asked at +{promoting - killed:.2f} s,"
        f" done at +{promoted - killed:.2f} s, a read-write session opened at"
        f" +{ready - killed:.2f} s; first claim at +{first - killed:.2f} s:"
        f" {resumed:.2f} s after that session, {first - promoting:.2f} s after the promotion"
        " was asked"
    )

    with ledger.connect() as conn:
        rows = list(
            conn.execute(
                sa.text(
                    "SELECT fire_time, fire_count, state FROM cronstore_fire ORDER BY fire_time"
                )
            )
        )
    ledger.dispose()
    seen = covered(rows)
    assert [t for t, n in seen.items() if n > 1] == [], "a fire time was claimed twice"
    grid = sorted(seen)
    gaps = [t for t in grid[:-1] if t + timedelta(seconds=1) not in seen]
    assert gaps == [], f"grid points without a ledger row after {gaps}"
    broker = redis.Redis.from_url(redis_url)
    try:
        sent = Counter(json.loads(m)["headers"]["id"] for m in broker.lrange(queue, 0, -1))
    finally:
        broker.delete(queue)
        broker.close()
    assert sent, "nothing was published"
    assert [i for i, n in sent.items() if n > 1] == [], "a fire was published twice"

    text = log.read_text(errors="replace")
    outage = text.encode()[logged_before:].decode(errors="replace").splitlines()
    print("beat's log during the outage:\n  " + "\n  ".join(outage[:20]))
    assert "Traceback" not in text
    assert "Exception during reset" not in text
    loud = [line for line in outage if _LEVEL.search(line)]
    # The LISTEN connection's own line when it saw its socket close first (store.listen).
    listener = [line for line in loud if "listening for changes" in line]
    assert len(listener) <= 1, "\n".join(listener)
    assert len(loud) - len(listener) <= OUTAGE_LINES, "\n".join(loud)
    assert resumed <= RESUME_WITHIN, f"{resumed:.2f} s to resume after the promotion"


@pytest.mark.postgres
@pytest.mark.slow
def test_the_primary_dying_between_publish_and_mark_sends_nothing_twice(
    pair: PgPair, redis_url: str, tmp_path: Path
) -> None:
    """Before, the claims survived as ``claimed`` on the promoted standby and were
    published again once their lease ran out: 21 fires doubled in each of two runs."""
    pair.create_database("cronstore")
    url = pair.failover_url("cronstore")
    store = Store(url)
    store.upgrade()
    for i in range(20):
        store.add(f"p{i:02d}", task="e2e.record", timer="*:*:*", args=[i])
    store.close()
    queue = f"failover-{uuid.uuid4().hex[:8]}"
    env = celery_env(
        redis_url,
        url,
        tmp_path / "record.jsonl",
        E2E_QUEUE=queue,
        E2E_LEASE="4",
        # Beat stalls after its 3rd publish, before the mark: the primary dies meanwhile.
        CRONSTORE_FAULTS="after_publish:#3:stall4",
    )
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(ROOT)])  # harness.faults
    ledger = sa.create_engine(url, poolclass=sa.pool.NullPool)
    log = tmp_path / "proc0-beat.log"
    with running([beat()], env, tmp_path):
        wait_for(
            lambda: log.exists() and "fault point after_publish" in log.read_text(),
            40,
            "beat to stall between its publish and its mark",
            tmp_path,
        )
        fail_over(pair)
        wait_for(lambda: _published(ledger) >= 100, 40, "fires after the failover", tmp_path)
        time.sleep(4 + 2)  # past the lease: a claim left behind would be taken over now
    with ledger.connect() as conn:
        left = conn.execute(
            sa.text("SELECT COUNT(*) FROM cronstore_fire WHERE state IN ('claimed', 'sending')")
        ).scalar_one()
    ledger.dispose()
    broker = redis.Redis.from_url(redis_url)
    try:
        sent = Counter(json.loads(m)["headers"]["id"] for m in broker.lrange(queue, 0, -1))
    finally:
        broker.delete(queue)
        broker.close()
    assert len(sent) >= 100
    twice = [i for i, n in sent.items() if n > 1]
    assert twice == [], f"{len(twice)} fires were published twice"
    assert left == 0


def _published(ledger: sa.Engine) -> int:
    try:
        with ledger.connect() as conn:
            return int(
                conn.execute(
                    sa.text("SELECT COUNT(*) FROM cronstore_fire WHERE state = 'published'")
                ).scalar_one()
            )
    except sa.exc.OperationalError:
        return 0
