"""Issue 11 end to end: one bad row or one frozen beat never holds back the other tasks.

Real ``celery beat`` and worker processes on Redis, stores on SQLite, PostgreSQL and
MariaDB; rows broken by raw SQL, beats frozen inside their claim transaction. Each test
reproduces one failure of issue 11 (it failed before the change, see docs/reliability.md):

* a row whose args do not fit its task: only that row stops (error, fire ``dropped``);
* a ``next_run`` moved back onto a fire already in the ledger: planned past, on every
  replica, nothing doubled, ``disable`` works; the same state through the API alone (a
  one-off passed while no beat ran, disabled and enabled);
* a beat frozen mid-claim (lease 10 s): its rows are taken over within the lease, fires
  stay claim-once and the healthy beats do not spin; a second beat on SQLite is warned;
* a beat whose due rows are all locked elsewhere is unhealthy, then healthy again.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from processes import HERE, deliveries, wait_for

from celery_cronstore.config import Config
from celery_cronstore.store import Store
from celery_cronstore.store.schema import fire, periodic_task

pytestmark = [pytest.mark.slow, pytest.mark.redis]

SERVERS = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
]
ALL_STORES = [pytest.param("sqlite"), *SERVERS]
TICK = os.sysconf("SC_CLK_TCK")


# -- processes ------------------------------------------------------------------------------


class Procs:
    """Celery processes of one test (``-A isolation_app``), each with its own env and log."""

    def __init__(self, logs: Path, env: dict[str, str]) -> None:
        self.logs = logs
        self.env = env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, args: list[str], **extra: str) -> subprocess.Popen[bytes]:
        with open(self.logs / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "isolation_app", *args],
                env={**self.env, **extra},
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.logs,
                start_new_session=True,
            )
        self.procs[name] = proc
        return proc

    def beat(self, name: str, **extra: str) -> subprocess.Popen[bytes]:
        args = ["beat", "-S", "celery_cronstore.Scheduler", "--loglevel", "INFO"]
        return self.start(name, args, **extra)

    def worker(self, name: str = "w1") -> subprocess.Popen[bytes]:
        return self.start(
            name,
            [
                "worker",
                "--pool",
                "threads",
                "-c",
                "4",
                "--loglevel",
                "INFO",
                "-n",
                f"{name}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
        )

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def node(self, name: str) -> str:
        """The node name a beat claims under (``host:pid:...``): its prefix."""
        return f"{socket.gethostname()}:{self.procs[name].pid}:"

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "celery", "-A", "isolation_app", "cronstore", *args],
            env=self.env,
            cwd=self.logs,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGCONT)
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@contextmanager
def celery(tmp_path: Path, broker: str, url: str, **extra: str) -> Iterator[Procs]:
    """Yield a :class:`Procs` on ``url``/``broker`` with a queue of its own; stop all after."""
    env = dict(os.environ)
    env.update(
        E2E_BROKER=broker,
        E2E_STORE=url,
        E2E_RECORD=str(tmp_path / "record.jsonl"),
        E2E_QUEUE=f"iso-{uuid.uuid4().hex[:8]}",
        PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]),
        **extra,
    )
    procs = Procs(tmp_path, env)
    try:
        yield procs
    finally:
        procs.stop()


def cpu_seconds(pid: int) -> float:
    """Return the CPU time (user + system) process ``pid`` has used, from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14, 15)


# -- the store -----------------------------------------------------------------------------


def store_url(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return str(request.getfixturevalue(f"{kind}_url"))


def fresh_store(url: str) -> Store:
    store = Store(url)
    store.upgrade()
    with store.begin() as conn:
        for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    return store


def ledger(store: Store) -> list[dict[str, Any]]:
    """Every fire in the ledger with its task's name (one query, aware UTC times)."""
    query = sa.select(
        periodic_task.c.name,
        fire.c.fire_time,
        fire.c.task_id,
        fire.c.state,
        fire.c.claimed_by,
        fire.c.claimed_at,
        fire.c.reason,
    ).join(periodic_task, periodic_task.c.id == fire.c.periodic_task_id)
    with store.engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(query)]


def raw(store: Store, sql: str, **params: Any) -> None:
    """Run one UPDATE as an admin would: no API, no version bump."""
    with store.engine.begin() as conn:
        conn.execute(sa.text(sql), params)


def set_next_run(store: Store, name: str, when: datetime) -> None:
    """Move one row's ``next_run`` by a plain UPDATE (no API, no version bump)."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(periodic_task).where(periodic_task.c.name == name).values(next_run=when)
        )


def by_name(got: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Deliveries grouped by the first arg (every task here records its name first)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for d in got:
        out[str(d["args"][0]) if d["args"] else ""].append(d)
    return out


def assert_each_delivered_once(got: list[dict[str, Any]]) -> None:
    doubled = {k: v for k, v in Counter(d["task_id"] for d in got).items() if v > 1}
    assert doubled == {}, f"delivered more than once: {doubled}"


def assert_claim_once(fires: list[dict[str, Any]]) -> None:
    keys = Counter((f["name"], f["fire_time"]) for f in fires)
    assert [k for k, n in keys.items() if n > 1] == [], "a fire time claimed twice"


def grid_gaps(times: list[datetime], step: float) -> list[float]:
    """The gaps (seconds) between consecutive fire times that are not one ``step``."""
    return [
        (b - a).total_seconds()
        for a, b in itertools.pairwise(sorted(times))
        if b - a != timedelta(seconds=step)
    ]


# -- a: args that do not fit the task -------------------------------------------------------


@pytest.mark.parametrize("store_kind", ALL_STORES)
def test_args_that_do_not_fit_the_task_stop_only_that_row(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str, store_kind: str
) -> None:
    url = store_url(request, store_kind, tmp_path)
    store = fresh_store(url)
    store.add("good-interval", task="e2e.record", timer="every 1s", args=["good-interval"])
    store.add("good-calendar", task="e2e.record", timer="*:*:*", args=["good-calendar"])
    store.add("bad", task="e2e.pair", timer="*:*:*", args=["bad", 2])
    # The API refuses args that do not fit e2e.pair(a, b); a script's UPDATE does not.
    raw(store, "UPDATE cronstore_periodic_task SET args = '[\"bad\"]' WHERE name = 'bad'")
    record = tmp_path / "record.jsonl"
    with celery(tmp_path, redis_url, url, E2E_LEASE="5") as procs:
        procs.worker()
        procs.beat("beat")

        def fired(name: str, n: int) -> bool:
            return len(by_name(deliveries(record))[name]) >= n

        wait_for(
            lambda: fired("good-interval", 5) and fired("good-calendar", 5),
            30,
            "the healthy tasks to keep firing next to the bad row",
            tmp_path,
        )
        bad = store.get("bad")
        assert bad.error is not None, "the bad row is not in error"
        assert "e2e.pair" in bad.error, bad.error
        assert "fit" in bad.error, bad.error
        (dropped,) = [f for f in ledger(store) if f["name"] == "bad"]
        assert dropped["state"] == "dropped"
        assert bad.error in (dropped["reason"] or ""), dropped["reason"]

        # The fix, as an operator makes it: `cronstore edit`, which checks the new args.
        refused = procs.cli("edit", "bad", "--args", '["bad", 1, 2]')
        assert refused.returncode != 0
        assert "fit" in refused.stderr + refused.stdout
        fixed = procs.cli("edit", "bad", "--args", '["bad", "fixed"]')
        assert fixed.returncode == 0, fixed.stderr + fixed.stdout
        wait_for(lambda: fired("bad", 2), 20, "the fixed row to fire", tmp_path)
        assert store.get("bad").error is None

    got = deliveries(record)
    assert_each_delivered_once(got)
    assert {tuple(d["args"]) for d in by_name(got)["bad"]} == {("bad", "fixed")}
    assert_claim_once(ledger(store))
    store.close()


# -- b: a next_run moved back onto a fire already in the ledger -----------------------------

HEALTHY = {f"calendar-{i}": "*:*:*" for i in range(3)} | {
    f"interval-{i}": "every 1s" for i in range(3)
}


@pytest.mark.parametrize(
    ("store_kind", "replicas"),
    [
        pytest.param("sqlite", 2, id="sqlite"),
        pytest.param("postgres", 3, marks=pytest.mark.postgres, id="postgres"),
        pytest.param("mysql", 3, marks=pytest.mark.mysql, id="mysql"),
    ],
)
@pytest.mark.serial  # up to three beats must keep an unbroken 1-second grid in real time
def test_a_next_run_moved_onto_a_recorded_fire_is_planned_past_on_every_replica(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    redis_url: str,
    store_kind: str,
    replicas: int,
) -> None:
    url = store_url(request, store_kind, tmp_path)
    store = fresh_store(url)
    for name, timer in HEALTHY.items():
        store.add(name, task="e2e.record", timer=timer, args=[name])
    store.add("moved", task="e2e.record", timer="*:*:*", args=["moved"])
    record = tmp_path / "record.jsonl"
    with celery(tmp_path, redis_url, url, E2E_LEASE="5") as procs:
        procs.worker()
        for index in range(replicas):
            procs.beat(f"beat{index}")

        def recorded(name: str) -> list[datetime]:
            return sorted(f["fire_time"] for f in ledger(store) if f["name"] == name)

        wait_for(lambda: len(recorded("moved")) >= 4, 40, "the first fires", tmp_path)
        back_to = recorded("moved")[-3]  # in the ledger, two seconds back
        set_next_run(store, "moved", back_to)
        start = store.now()
        time.sleep(8)
        end = store.now()
        assert store.get("moved").error is None, "planned past, not put in error"
        store.disable("moved")  # failed with the ledger's unique key before the change
        disabled_at = store.now()
        time.sleep(2.5)  # the last published fires arrive

    got = deliveries(record)
    assert_each_delivered_once(got)
    fires = ledger(store)
    assert_claim_once(fires)
    delivered = {d["task_id"] for d in got}
    window = [f for f in fires if start + timedelta(seconds=1) <= f["fire_time"] <= end]
    claimers = Counter(str(f["claimed_by"]).rsplit(":", 1)[0] for f in window)
    counts = {}
    for name in [*HEALTHY, "moved"]:
        times = [f["fire_time"] for f in window if f["name"] == name and f["state"] != "missed"]
        counts[name] = len(times)
        expected = int((end - start).total_seconds()) - 2
        assert len(times) >= expected, f"{name}: {len(times)} fires, expected ~{expected}"
        assert grid_gaps(times, 1) == [], f"{name} lost fires in the window"
        # A fire due just before ``end`` that a loaded beat had not yet sent when the
        # disable committed is refused by the send re-check (dropped, "disabled"): that is
        # the promise "nothing after disable", not a lost fire.
        mine = {
            f["task_id"]: f
            for f in window
            if f["name"] == name
            and f["state"] != "missed"
            and not (f["state"] == "dropped" and "disabled" in (f["reason"] or ""))
        }
        lost = [mine[t] for t in mine.keys() - delivered]
        assert lost == [], f"{name}: fires claimed but never delivered: {lost}"
    print(f"fires per task in {(end - start).total_seconds():.1f}s: {counts}")
    print(f"claims per beat in the window: {dict(claimers)}")
    if store_kind != "sqlite":
        assert len(claimers) >= 2, f"only {claimers} claimed: the replicas did not share"
    # A fire claimed ahead (cronstore_claim_ahead, 0.1 s) just before the disable, for a
    # time just after it, is read again before its publish and dropped, never sent.
    ahead = disabled_at + timedelta(seconds=Config.claim_ahead)
    late = [f for f in fires if f["name"] == "moved" and f["fire_time"] > disabled_at]
    stopped = [f for f in late if f["state"] == "dropped" and "disabled" in (f["reason"] or "")]
    assert all(f["fire_time"] <= ahead and f["task_id"] not in delivered for f in stopped)
    assert [f for f in late if f not in stopped] == [], "a fire claimed after disable()"
    for index in range(replicas):
        log = procs.log(f"beat{index}")
        assert "IntegrityError" not in log, f"beat{index}: {log[-3000:]}"
        assert "Traceback" not in log, f"beat{index}: {log[-3000:]}"
    store.close()


@pytest.mark.parametrize(
    "store_kind", [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_one_off_passed_with_no_beat_then_disabled_and_enabled_fires_at_most_once(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str, store_kind: str
) -> None:
    """The API alone gets a row onto a recorded fire: disable records the passed instant
    missed, enable plans it again. Beat must neither fail nor fire it twice."""
    url = store_url(request, store_kind, tmp_path)
    store = fresh_store(url)
    store.add("tick", task="e2e.record", timer="every 1s", args=["tick"])
    instant = store.now() + timedelta(seconds=1)
    store.add("once", task="e2e.record", timer=instant.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
              args=["once"])  # fmt: skip
    time.sleep(1.5)  # the instant passes, no beat running
    store.disable("once")
    store.enable("once")
    record = tmp_path / "record.jsonl"
    with celery(tmp_path, redis_url, url, E2E_LEASE="5") as procs:
        procs.worker()
        procs.beat("beat0")
        procs.beat("beat1")
        wait_for(
            lambda: len(by_name(deliveries(record))["tick"]) >= 4,
            30,
            "the other task to keep firing",
            tmp_path,
        )
        logs = procs.log("beat0") + procs.log("beat1")
    got = deliveries(record)
    assert_each_delivered_once(got)
    once = [f for f in ledger(store) if f["name"] == "once"]
    assert len(once) <= 1, once
    assert len(by_name(got)["once"]) <= 1
    assert store.get("once").error is None
    assert "IntegrityError" not in logs
    assert "Traceback" not in logs
    store.close()


# -- c: a beat frozen inside its claim transaction ------------------------------------------

FROZEN_TASKS = 80
LEASE = 10.0
FREEZE = 20.0


@pytest.mark.parametrize("store_kind", SERVERS)
@pytest.mark.serial  # asserts the healthy beats' CPU use and takeover within the lease
def test_a_beat_frozen_mid_claim_is_taken_over_within_the_lease_without_spinning(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str, store_kind: str
) -> None:
    url = store_url(request, store_kind, tmp_path)
    store = fresh_store(url)
    for i in range(FROZEN_TASKS):
        store.add(f"t{i:02d}", task="e2e.record", timer="*:*:*", args=[f"t{i:02d}"])
    # No worker: the ledger says who claimed what when; the messages wait in Redis.
    with celery(tmp_path, redis_url, url, E2E_LEASE=f"{LEASE:g}") as procs:
        # beat0 starts alone, so the claim it freezes in holds every due row; the other
        # two replicas join while it is frozen.
        procs.beat("beat0", CRONSTORE_FAULTS=f"before_claim_commit:#5:stall{FREEZE:g}")
        wait_for(
            lambda: "fault point before_claim_commit" in procs.log("beat0"),
            40,
            "beat0 to freeze in its claim transaction",
            tmp_path,
        )
        frozen_at = store.now()
        t_frozen = time.monotonic()
        healthy = [procs.beat("beat1"), procs.beat("beat2")]
        wait_for(
            lambda: all("ready as" in procs.log(n) for n in ("beat1", "beat2")),
            FREEZE - 5,
            "the other replicas to start",
            tmp_path,
        )
        cpu_before = [cpu_seconds(p.pid) for p in healthy]
        xacts_before = transactions(store)
        t_cpu = time.monotonic()
        time.sleep(max(0.0, FREEZE - (time.monotonic() - t_frozen) - 0.5))
        cpu = [(cpu_seconds(p.pid) - c) / (time.monotonic() - t_cpu)
               for p, c in zip(healthy, cpu_before, strict=True)]  # fmt: skip
        xacts = (transactions(store) - xacts_before) / (time.monotonic() - t_cpu)
        wait_for(lambda: "stall" in procs.log("beat0"), 1, "", tmp_path)
        time.sleep(4)  # beat0 wakes up: its commit must fail or find nothing
        woke = store.now()
        frozen_node = procs.node("beat0")
        beat0_log = procs.log("beat0")

    fires = ledger(store)
    assert_claim_once(fires)
    # The frozen claim began just before frozen_at: committed late, it would show here.
    start, stop = frozen_at - timedelta(seconds=0.5), frozen_at + timedelta(seconds=FREEZE - 1)
    late = [
        f for f in fires
        if str(f["claimed_by"]).startswith(frozen_node)
        and f["claimed_at"] is not None and start <= f["claimed_at"] <= stop
    ]  # fmt: skip
    gaps: dict[str, float] = {}
    for name in (f"t{i:02d}" for i in range(FROZEN_TASKS)):
        claimed = sorted(
            f["claimed_at"] for f in fires
            if f["name"] == name and f["state"] != "missed" and f["claimed_at"] is not None
        )  # fmt: skip
        around = [t for t in claimed if frozen_at - timedelta(seconds=3) <= t <= woke]
        gaps[name] = max(
            ((b - a).total_seconds() for a, b in itertools.pairwise(around)), default=1e9
        )
    held = sorted(n for n, g in gaps.items() if g > 3)
    worst = max(gaps.values())
    print(
        f"{store_kind}: {len(held)} task(s) held by the frozen beat; takeover gap per task: "
        f"max {worst:.2f}s, median {sorted(gaps[n] for n in held or gaps)[len(held) // 2]:.2f}s, "
        f"min {min(gaps[n] for n in held or gaps):.2f}s; "
        f"healthy beats' CPU over the freeze {[round(c, 3) for c in cpu]} core; "
        f"{xacts:.0f} transactions/s"
    )
    assert held, "the frozen claim held no row: the test proves nothing"
    assert late == [], f"the frozen beat's claim committed after its freeze: {late[:3]}"
    assert worst <= LEASE, f"tasks waited longer than the lease: {gaps}"
    assert all(c < 0.1 for c in cpu), f"healthy beats used {cpu} cores while one was frozen"
    after = beat0_log[beat0_log.index("fault point before_claim_commit") :]
    assert "ERROR" in after.split("sending", 1)[0], "the frozen claim's commit did not fail"
    store.close()


def transactions(store: Store) -> float:
    """Committed + rolled-back transactions so far (PostgreSQL; 0 elsewhere)."""
    if store.engine.dialect.name != "postgresql":
        return 0.0
    with store.engine.connect() as conn:
        return float(
            conn.exec_driver_sql(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database"
                " WHERE datname = current_database()"
            ).scalar_one()
        )


def test_a_second_beat_on_one_sqlite_file_is_warned_that_ha_needs_a_server(
    tmp_path: Path, redis_url: str
) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = fresh_store(url)
    store.add("tick", task="e2e.record", timer="*:*:*", args=["tick"])
    with celery(tmp_path, redis_url, url) as procs:
        procs.beat("first")
        wait_for(lambda: "ready as" in procs.log("first"), 30, "the first beat", tmp_path)
        wait_for(lambda: store.beats() != [], 15, "the first heartbeat", tmp_path)
        procs.beat("second")
        wait_for(lambda: "ready as" in procs.log("second"), 30, "the second beat", tmp_path)
        time.sleep(1)
        first, second = procs.log("first"), procs.log("second")
        node = procs.node("first")
    warning = [line for line in second.splitlines() if "WARNING" in line and node in line]
    assert warning, f"no warning naming {node} in the second beat's log:\n{second[-3000:]}"
    assert "PostgreSQL or MariaDB" in warning[0], warning[0]
    assert "SQLite" in warning[0], warning[0]
    assert "PostgreSQL or MariaDB" not in first, "the first beat was alone: no warning"
    store.close()


# -- d: health says when a beat cannot do its due work --------------------------------------


@pytest.mark.parametrize("store_kind", SERVERS)
def test_a_beat_whose_due_rows_are_locked_longer_than_the_lease_is_unhealthy(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str, store_kind: str
) -> None:
    url = store_url(request, store_kind, tmp_path)
    store = fresh_store(url)
    for i in range(3):
        store.add(f"h{i}", task="e2e.record", timer="every 1s", args=[f"h{i}"])
    with celery(tmp_path, redis_url, url, E2E_LEASE="2") as procs:
        procs.beat("beat")

        def health() -> tuple[int, str]:
            done = procs.cli("health", "--max-age", "30")
            return done.returncode, (done.stdout + done.stderr).strip()

        wait_for(lambda: health()[0] == 0, 30, "a healthy beat", tmp_path)
        locker = Store(url)
        with locker.engine.connect() as conn, conn.begin():
            # Another process (an admin's open transaction, a frozen beat) holds every row.
            conn.exec_driver_sql("SELECT id FROM cronstore_periodic_task FOR UPDATE").all()
            seen: list[tuple[int, str]] = []

            def unhealthy() -> bool:
                seen.append(health())
                return seen[-1][0] == 1

            wait_for(unhealthy, 25, "health to report the stall", tmp_path)
            _code, said = seen[-1]
            assert "could not claim or publish" in said, said
            assert "lease" in said, said
            conn.rollback()
        locker.close()
        wait_for(lambda: health()[0] == 0, 20, "health to recover", tmp_path)
        assert store.get("h0").error is None
    print(f"{store_kind}: while locked: {said}")
    store.close()
