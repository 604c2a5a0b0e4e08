"""The scenarios, and the run of one: start the cluster, add timers, inject faults, heal,
disable everything, stop, and hand the database to the oracle."""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa

from celery_cronstore.store import Store
from harness import oracle
from harness.app import metadata
from harness.chaos import Chaos
from harness.cluster import FAKETIME, Cluster, Proxy
from harness.sampler import Sampler
from harness.scratch import Scratch, scratch_database

__all__ = ["SCENARIOS", "SOAK", "TIMERS", "Scenario", "Services", "run"]

from harness.ports import free_port

#: Every timer of every scenario: 1-second calendar and cron timers, intervals,
#: irregular ones, DST zones, a run_all policy, a starting deadline, overlap skip.
TIMERS: list[dict[str, Any]] = [
    {"name": "cal-1s", "timer": "*:*:*"},
    {"name": "cron-1s", "timer": "* * * * * *"},
    {"name": "int-1s", "timer": "every 1s"},
    {"name": "int-2s", "timer": "every 2s"},
    {"name": "cal-irregular", "timer": "*:*:00,01,02,07,19,20,41,42,53"},
    {"name": "cron-irregular", "timer": "* * * * * 3,4,11,29,30,47,58"},
    {"name": "cal-berlin-2s", "timer": "*-*-* *:*:00/2 Europe/Berlin"},
    {"name": "cron-newyork-3s", "timer": "* * * * * */3", "tz": "America/New_York"},
    {"name": "int-1s-run-all", "timer": "every 1s", "misfire_policy": "run_all"},
    {"name": "int-3s-deadline", "timer": "every 3s", "start_deadline": 2.0},
    {"name": "cal-1s-overlap-skip", "timer": "*:*:*", "overlap_policy": "skip"},
    {"name": "disable-mid-run", "timer": "*:*:*"},
]
#: The timer disabled halfway through the fault window.
MID_RUN_DISABLE = "disable-mid-run"

#: Fault points per beat replica: one crashes, one raises, one stalls past the lease.
TICK_FAULTS = (
    "before_claim_commit:0.02,after_claim:0.02,mid_batch:0.005,after_publish:0.02",
    "before_claim_commit:0.05:raise,after_claim:0.05:raise,mid_batch:0.01:raise,"
    "after_publish:0.05:raise",
    "after_claim:0.01:stall6,after_publish:0.01:stall6",
)


@dataclass(frozen=True)
class Scenario:
    """One combination of backend, broker and faults."""

    name: str
    description: str
    db: str = "postgres"  # postgres | mysql | sqlite
    broker: str = "redis"  # redis | rabbitmq
    chaos: tuple[str, ...] = ()
    beat_faults: tuple[str, ...] = ("", "", "")
    skew: tuple[float, ...] = (0.0, 0.0, 0.0)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("baseline", "no faults"),
        Scenario(
            "tick-faults", "fault points in the tick: crash, raise, stall", beat_faults=TICK_FAULTS
        ),
        Scenario("kill9", "kill -9 of random replicas, restarted", chaos=("kill9",)),
        Scenario("sigstop", "SIGSTOP/SIGCONT of random replicas", chaos=("sigstop",)),
        Scenario(
            "clock-skew", "replica clocks 5 min ahead and 5 min behind", skew=(300.0, -300.0, 0.0)
        ),
        Scenario("db-kill", "pg_terminate_backend of every connection", chaos=("db_kill",)),
        Scenario("db-outage", "database link cut and restored", chaos=("db_outage",)),
        Scenario("broker-outage", "Redis link cut and restored", chaos=("broker_outage",)),
        Scenario(
            "rabbitmq",
            "RabbitMQ link cut and restored, kill -9 of replicas",
            broker="rabbitmq",
            chaos=("broker_outage", "kill9"),
        ),
        Scenario(
            "mariadb",
            "MariaDB store: fault points, kill -9, connections killed, link cut",
            db="mysql",
            chaos=("kill9", "db_kill", "db_outage"),
            beat_faults=TICK_FAULTS,
        ),
        Scenario(
            "sqlite",
            "SQLite file store: fault points, kill -9, SIGSTOP, Redis link cut",
            db="sqlite",
            chaos=("kill9", "sigstop", "broker_outage"),
            beat_faults=TICK_FAULTS,
        ),
        Scenario(
            "postgres-all",
            "PostgreSQL store: every fault at once (fault points, kill -9, SIGSTOP,"
            " connections killed, database and Redis links cut)",
            chaos=("kill9", "sigstop", "db_kill", "db_outage", "broker_outage"),
            beat_faults=TICK_FAULTS,
        ),
    )
}
#: The soak the reliability docs quote: one scenario per backend, each with every fault
#: that backend can have (``--scenario soak --seconds 600``).
SOAK = ("postgres-all", "mariadb", "sqlite")
#: Faults that need a database server (a SQLite file has no link or connections to cut).
SERVER_FAULTS = frozenset({"db_kill", "db_outage"})

for _s in SCENARIOS.values():
    if _s.db == "sqlite" and SERVER_FAULTS & set(_s.chaos):
        raise ValueError(f"scenario {_s.name}: {sorted(SERVER_FAULTS)} need a database server")


DB_PORTS = {"postgres": 5432, "mysql": 3306}


@dataclass(frozen=True)
class Services:
    """Admin URLs of the servers (a scratch database is made per scenario)."""

    postgres: str = os.environ.get(
        "CRONSTORE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    )
    mysql: str = os.environ.get(
        "CRONSTORE_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test"
    )
    redis: str = os.environ.get("CRONSTORE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    rabbitmq: str = os.environ.get(
        "CRONSTORE_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//"
    )


@dataclass
class Settings:
    seconds: float = 20.0
    lease: float = 4.0
    poll: float = 0.5
    workers: int = 2
    seed: int | None = None
    keep: bool = False
    sample_every: float = 30.0
    logs: Path = field(default_factory=lambda: Path("var/harness"))


def _via(url: str, proxy: Proxy) -> str:
    """Return ``url`` pointed at ``proxy`` (same user, password, database or vhost)."""
    parts = urlsplit(url)
    auth = parts.netloc.rpartition("@")[0]
    netloc = f"{auth}@127.0.0.1:{proxy.port}" if auth else f"127.0.0.1:{proxy.port}"
    return parts._replace(netloc=netloc).geturl()


def _target(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


def _skew_env(offset: float) -> dict[str, str]:
    if not offset:
        return {}
    env = {"HARNESS_CLOCK_OFFSET": f"{offset:g}"}
    # The monotonic clock is shifted too: Python's time.sleep() sleeps until an absolute
    # monotonic deadline, which libfaketime rejects (EINVAL) when only one is faked.
    if FAKETIME is not None:
        env.update(
            LD_PRELOAD=str(FAKETIME),
            FAKETIME=f"{offset:+g}",
            FAKETIME_NO_CACHE="1",
        )
    return env


def run(scenario: Scenario, settings: Settings, services: Services | None = None) -> oracle.Result:
    """Run ``scenario`` for ``settings.seconds`` of faults; return the oracle's verdict."""
    services = services or Services()
    if scenario.db == "sqlite":
        with _scratch_file(settings.logs) as scratch:
            result = _run(scenario, settings, services, scratch)
            scratch.keep = settings.keep or not result.ok
        return result
    admin_url = services.postgres if scenario.db == "postgres" else services.mysql
    # Kept unless the run ends and passes: the rows of a failed or crashed run explain it.
    with scratch_database(admin_url, prefix="cronstore_h", keep=True) as scratch:
        result = _run(scenario, settings, services, scratch)
        scratch.keep = settings.keep or not result.ok
    return result


@contextmanager
def _scratch_file(logs: Path) -> Iterator[Scratch]:
    """A fresh SQLite file under ``logs``; removed on leaving unless ``keep`` is set."""
    logs.mkdir(parents=True, exist_ok=True)
    name = f"cronstore_h_{uuid.uuid4().hex[:10]}.sqlite"
    path = (logs / name).resolve()
    scratch = Scratch(f"sqlite:///{path}", name)
    try:
        yield scratch
    finally:
        if not scratch.keep:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)


def _run(
    scenario: Scenario, settings: Settings, services: Services, scratch: Scratch
) -> oracle.Result:
    rng = random.Random(settings.seed)
    started = time.monotonic()
    logs = settings.logs / f"{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    logs.mkdir(parents=True, exist_ok=True)
    url, dbname = scratch.url, scratch.name
    broker = services.redis if scenario.broker == "redis" else services.rabbitmq
    local = scenario.db == "sqlite"  # a file: beats open it directly, no link to cut
    db_proxy = Proxy(("127.0.0.1", 9) if local else _target(url, DB_PORTS[scenario.db]))
    broker_proxy = Proxy(_target(broker, 6379 if scenario.broker == "redis" else 5672))
    store = Store(url)
    store.upgrade()
    metadata.create_all(store.engine)
    queue = f"harness-{scenario.name}-{uuid.uuid4().hex[:6]}"
    base_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(Path.cwd()), os.environ.get("PYTHONPATH")])
        ),
        "HARNESS_BROKER": _via(broker, broker_proxy),
        "HARNESS_QUEUE": queue,
        "HARNESS_RECORD_URL": url,
        "HARNESS_LEASE": f"{settings.lease:g}",
        "HARNESS_POLL": f"{settings.poll:g}",
    }
    base_env.pop("CRONSTORE_FAULTS", None)
    cluster = Cluster(logs, base_env)
    for _ in range(settings.workers):
        cluster.add_worker({"HARNESS_STORE": url})
    beat_envs = []
    ports = [free_port() for _ in range(3)]
    for index in range(3):
        store_url = url if local else _via(url, db_proxy)
        env = {
            "HARNESS_STORE": store_url,
            "HARNESS_METRICS_PORT": str(ports[index]),
            **_skew_env(scenario.skew[index]),
        }
        if scenario.beat_faults[index]:
            env.update(
                CRONSTORE_FAULTS=scenario.beat_faults[index],
                CRONSTORE_FAULTS_SEED=str(rng.random()),
            )
        beat_envs.append(env)
        cluster.add_beat(env)
    chaos = Chaos(cluster, db_proxy, broker_proxy, admin_for(url), dbname, settings.lease, rng)
    disabled: dict[str, datetime] = {}
    sampler = Sampler(store.engine, ports, every=settings.sample_every)
    try:
        cluster.start()
        cluster.wait_ready()
        sampler.start()
        for spec in TIMERS:
            fields = {k: v for k, v in spec.items() if k not in ("name", "timer")}
            store.add(
                spec["name"],
                task="harness.record",
                timer=spec["timer"],
                args=[spec["name"]],
                **fields,
            )
        chaos.start(scenario.chaos)
        deadline = time.monotonic() + settings.seconds
        mid = time.monotonic() + settings.seconds / 2
        while time.monotonic() < deadline:
            time.sleep(0.5)
            if mid and time.monotonic() >= mid:
                disabled[MID_RUN_DISABLE] = store.disable(MID_RUN_DISABLE).updated_at
                mid = 0.0
            cluster.restart_dead_beats()
        sampler.stop()
        # Heal: faults off, every replica running (without fault points), leases run out.
        chaos.stop()
        for proc in cluster.beats:
            if "CRONSTORE_FAULTS" in proc.env:
                proc.stop()
                del proc.env["CRONSTORE_FAULTS"]
                proc.start()
        cluster.restart_dead_beats()
        time.sleep(settings.lease + 3.0)
        for spec in TIMERS:
            if spec["name"] not in disabled:
                disabled[spec["name"]] = store.disable(spec["name"]).updated_at
        _drain(store, time.monotonic() + 20.0)  # start timeout + housekeeping + a run
    finally:
        cluster.stop()
        db_proxy.close()
        broker_proxy.close()
    result = oracle.judge(scenario.name, store.engine, disabled, tail=2.0)
    result.notes.extend(f"{k}: {v}" for k, v in sorted(chaos.counts.items()))
    result.notes.extend(sampler.summary())
    result.samples = sampler.samples
    restarts = sum(p.starts - 1 for p in cluster.beats)
    if restarts:
        result.notes.append(f"beat restarts: {restarts}")
    result.seconds = time.monotonic() - started
    store.close()
    chaos.admin.dispose()
    if settings.keep or not result.ok:
        result.notes.append(
            f"database kept: {sa.make_url(url).render_as_string(True)}; logs: {logs}"
        )
    return result


def admin_for(url: str) -> sa.Engine:
    return sa.create_engine(url, pool_pre_ping=True)


def _drain(store: Store, deadline: float) -> None:
    """Wait until no published fire awaits its first start (or the deadline passes)."""
    from celery_cronstore.store.schema import fire

    query = (
        sa.select(sa.func.count())
        .select_from(fire)
        .where(fire.c.state.in_(("claimed", "published")))
    )
    while time.monotonic() < deadline:
        with store.engine.connect() as conn:
            if conn.execute(query).scalar_one() == 0:
                break
        time.sleep(0.5)
    time.sleep(1.0)
