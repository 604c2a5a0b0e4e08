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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from conftest import IN_CI
from processes import beat, celery_env, deliveries, running, wait_for, worker

from celery_cronstore.beat.loop import FAST_FOR, FAST_RETRY, Backoff
from celery_cronstore.errors import StoreUnavailableError
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.restore import RESTORED
from celery_cronstore.store.server import ServerWatch
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


def _start_pair(synchronous: bool) -> Iterator[PgPair]:
    problem = why_not()
    if problem is not None:
        _refuse(problem)
    servers = PgPair(synchronous=synchronous)
    try:
        servers.start()
    except (subprocess.CalledProcessError, RuntimeError, OSError) as exc:
        servers.stop()
        detail = getattr(exc, "stderr", "") or str(exc)
        _refuse(f"cannot start a PostgreSQL primary and standby here: {detail.strip()[-300:]}")
    yield servers
    servers.stop()


@pytest.fixture
def pair() -> Iterator[PgPair]:
    """A primary and a synchronous standby of this test's own (skips where initdb cannot
    run, unless CI=true)."""
    yield from _start_pair(synchronous=True)


@pytest.fixture
def async_pair() -> Iterator[PgPair]:
    """A primary and an asynchronous standby streaming through a link the test can cut."""
    yield from _start_pair(synchronous=False)


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
    server = ServerWatch(store.engine)  # what tells beat its connections reach a new server
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
        assert server.changes == 1
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


def _ledger(ledger: sa.Engine) -> list[sa.Row[Any]]:
    with ledger.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT fire_time, fire_count, state, task_id, reason, claimed_by"
                    " FROM cronstore_fire ORDER BY fire_time"
                )
            )
        )


def _grid_gaps(rows: list[sa.Row[Any]], names: int) -> list[datetime]:
    """Grid seconds (the first and last two left out) that fewer than ``names`` rows cover."""
    seen = covered([(r.fire_time, r.fire_count, r.state) for r in rows])
    grid = sorted(seen)[2:-2]
    return [t for t in grid if seen[t] < names]


#: Tasks of the failover scenarios (each fires every second).
NAMES = 10


@dataclass
class Run:
    """What a failover scenario produced: runs by task id (from the worker's record file)
    with their lateness, the ledger, the beats' and the worker's logs."""

    ran: Counter[str]
    late: list[float]
    rows: list[sa.Row[Any]]
    beat_logs: str
    worker_log: str

    def figures(self) -> str:
        late = sorted(self.late)
        p99 = late[min(len(late) - 1, int(len(late) * 0.99))] if late else 0.0
        refused = self.worker_log.count("duplicate delivery")
        return (
            f"{len(self.rows)} ledger rows, {sum(self.ran.values())} runs; ran twice"
            f" {len(self.ran_twice())}, second copies refused by the worker {refused};"
            f" sent and never run {len(self.unrun())};"
            f" missed by the misfire policy {self.missed()};"
            f" lost claims written back {len(self.restored())};"
            f" reported sent again {len(self.reported())};"
            f" lateness p50 {late[len(late) // 2] if late else 0:.2f} s,"
            f" p99 {p99:.2f} s, max {late[-1] if late else 0:.2f} s"
        )

    def explain(self, task_ids: set[str]) -> str:
        """Return the ledger rows and the log lines of ``task_ids``."""
        rows = [str(tuple(r)) for r in self.rows if r.task_id in task_ids]
        logs = (self.beat_logs + "\n" + self.worker_log).splitlines()
        lines = [line for line in logs if any(i in line for i in task_ids)]
        return "\n".join([*rows, *lines[:40]])

    def ran_twice(self) -> list[str]:
        return sorted(i for i, n in self.ran.items() if n > 1)

    def restored(self) -> list[str]:
        return [r.task_id for r in self.rows if r.reason == RESTORED]

    def reported(self) -> set[str]:
        """Fires said to have maybe run twice: in their ledger row, or in a beat's log."""
        said = {r.task_id for r in self.rows if r.reason and r.reason.startswith("sent by ")}
        logged = [line for line in self.beat_logs.splitlines() if "may have run twice" in line]
        return said | {r.task_id for r in self.rows if any(r.task_id in line for line in logged)}

    def missed(self) -> int:
        return sum(r.fire_count for r in self.rows if r.state == "missed")

    def unrun(self) -> list[str]:
        """Fires the ledger says went out (or were written back) that never ran."""
        gone = {"missed", "skipped", "expired", "dropped"}
        return sorted(
            r.task_id for r in self.rows if r.state not in gone and r.task_id not in self.ran
        )


def _scenario(
    pair: PgPair,
    redis_url: str,
    tmp_path: Path,
    beats: int,
    between: Callable[[], None],
) -> Run:
    """Run ``beats`` beats and a worker with ten 1-second plain tasks on the pair; call
    ``between`` once fires flow (it fails the primary over somehow); stop the tasks a few
    seconds after the failover and let the last runs arrive."""
    pair.create_database("cronstore")
    url = pair.failover_url("cronstore")
    store = Store(url)
    store.upgrade()
    for i in range(NAMES):
        store.add(f"a{i:02d}", task="e2e.record", timer="*:*:*", args=[i])
    record = tmp_path / "record.jsonl"
    env = celery_env(redis_url, url, record, E2E_QUEUE=f"failover-{uuid.uuid4().hex[:8]}")
    ledger = sa.create_engine(url, poolclass=sa.pool.NullPool)
    commands = [beat() for _ in range(beats)] + [worker("w1", pool="threads")]
    try:
        with running(commands, env, tmp_path):
            wait_for(lambda: len(deliveries(record)) >= 3 * NAMES, 40, "the first runs", tmp_path)
            ledger.dispose()
            between()
            after = len(deliveries(record))
            wait_for(
                lambda: len(deliveries(record)) >= after + 4 * NAMES, 40, "runs after", tmp_path
            )
            for i in range(NAMES):
                store.disable(f"a{i:02d}")
            time.sleep(3)  # the last runs arrive
        rows = _ledger(ledger)
    finally:
        ledger.dispose()
        store.close()
    got = deliveries(record)
    ran = Counter(d["task_id"] for d in got)
    fire_of = {r.task_id: r.fire_time.replace(tzinfo=timezone.utc) for r in rows}
    late = [d["at"] - fire_of[d["task_id"]].timestamp() for d in got if d["task_id"] in fire_of]
    beat_logs = "\n".join(p.read_text(errors="replace") for p in tmp_path.glob("*beat.log"))
    worker_log = "\n".join(p.read_text(errors="replace") for p in tmp_path.glob("*w1*.log"))
    return Run(ran, late, rows, beat_logs, worker_log)


def _lose_commits(pair: PgPair, tmp_path: Path) -> Callable[[], None]:
    def lose() -> None:
        wait_for(pair.caught_up, 20, "the standby to catch up", tmp_path)
        pair.cut_replication()
        time.sleep(3)  # the beats claim and send on; the standby receives none of it
        fail_over(pair)

    return lose


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.serial
@pytest.mark.parametrize("beats", [1, 3], ids=["one-beat", "three-beats"])
def test_a_failover_that_loses_commits_runs_no_fire_twice_unseen(
    async_pair: PgPair, redis_url: str, tmp_path: Path, beats: int
) -> None:
    """Asynchronous replication: the standby stops receiving WAL, the beats claim and
    send for three more seconds on the primary, the primary is killed and the standby
    promoted: those claims are gone. Each beat writes back what it sent
    (``store.restore``) before it claims again: with one beat no fire runs twice; with
    several, one that reaches the promoted standby first may claim and send again a fire
    another sent, and every such fire is reported (its ledger row and the log say it may
    have run twice)."""
    run = _scenario(async_pair, redis_url, tmp_path, beats, _lose_commits(async_pair, tmp_path))
    print(f"\nasynchronous failover, {beats} beat(s) and a worker: {run.figures()}")
    assert run.restored() or run.reported(), "the failover lost no claim: the test proves nothing"
    unseen = set(run.ran_twice()) - run.reported()
    assert not unseen, "ran twice, and nothing says so:\n" + run.explain(unseen)
    if beats == 1:
        assert run.ran_twice() == []
    assert _grid_gaps(run.rows, NAMES) == [], "grid points without a ledger row"
    assert "Traceback" not in run.beat_logs


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.serial
@pytest.mark.parametrize("replication", ["synchronous", "asynchronous"])
def test_a_planned_switchover_loses_and_doubles_nothing(
    replication: str, redis_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A switchover (the primary stopped cleanly, then the standby promoted) with three
    beats and a worker: a fast shutdown sends every WAL record to the standby, so nothing
    is lost, written back, run twice or left unrun, and no grid point is missing."""
    fixture = "pair" if replication == "synchronous" else "async_pair"
    pair: PgPair = request.getfixturevalue(fixture)

    def switch_over() -> None:
        pair.stop_primary()
        pair.promote()
        while not pair.accepts_writes(1):
            time.sleep(0.02)

    run = _scenario(pair, redis_url, tmp_path, 3, switch_over)
    print(f"\nswitchover ({replication}), 3 beats and a worker: {run.figures()}")
    assert run.ran_twice() == []
    assert run.restored() == []
    assert run.unrun() == []
    assert _grid_gaps(run.rows, NAMES) == []
    assert "Traceback" not in run.beat_logs


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.serial
def test_a_synchronous_failover_loses_and_doubles_nothing(
    pair: PgPair, redis_url: str, tmp_path: Path
) -> None:
    """Synchronous replication, the primary killed mid-run with three beats and a worker:
    every acknowledged commit is on the standby, so nothing is written back and nothing
    runs twice."""
    run = _scenario(pair, redis_url, tmp_path, 3, lambda: fail_over(pair))
    print(f"\nsynchronous failover, 3 beats and a worker: {run.figures()}")
    assert run.ran_twice() == []
    assert run.restored() == []
    assert _grid_gaps(run.rows, NAMES) == []
    assert "Traceback" not in run.beat_logs
