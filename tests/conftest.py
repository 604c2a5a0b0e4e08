"""Shared fixtures: one store test suite over SQLite, PostgreSQL and MariaDB.

Server-backed parameters skip with a reason when the server is unreachable, except under
``CI=true``, where a missing service is a failure: CI must run every backend.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from timeline import T0

from celery_cronstore.store import Store
from celery_cronstore.testing import FrozenClock
from harness.pgbouncer import MODES as PGBOUNCER_MODES
from harness.pgbouncer import PgBouncer
from harness.pgbouncer import why_not as pgbouncer_why_not
from harness.scratch import scratch_database

IN_CI = os.environ.get("CI", "").lower() == "true"

POSTGRES_URL = os.environ.get(
    "CRONSTORE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
MYSQL_URL = os.environ.get("CRONSTORE_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test")
RABBITMQ_URL = os.environ.get("CRONSTORE_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")

#: The pytest-xdist worker this process is ("gw0", "gw1", ...), or "" when not under xdist.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
#: Redis has databases 0..15 by default.
REDIS_DATABASES = 16


def redis_url_for(url: str, worker: str) -> str:
    """Return ``url`` on a Redis database of ``worker``'s own.

    Outside xdist (``worker`` empty) the URL is unchanged (database 0 by default). The xdist
    worker ``gwN`` gets the database after the URL's by N + 1 (wrapping at 16), so parallel
    workers, and a plain ``pytest`` run beside them, never share keys: queues, kombu's
    bindings, unacked messages, worker mailboxes.
    """
    if not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    db = (base + 1 + int(worker[2:])) % REDIS_DATABASES
    return urlunsplit(parts._replace(path=f"/{db}"))


REDIS_URL = redis_url_for(
    os.environ.get("CRONSTORE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"), XDIST_WORKER
)
# The fault harness (harness/scenarios.py) and every process a test starts read the
# variable: point them at this worker's database too.
os.environ["CRONSTORE_TEST_REDIS_URL"] = REDIS_URL


def reachable(url: str, default_port: int) -> bool:
    """Return whether a TCP connection to the URL's host and port opens."""
    parts = urlsplit(url.replace("+psycopg", "").replace("+pymysql", ""))
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or default_port), 2
        ):
            return True
    except OSError:
        return False


def need_service(name: str, url: str, port: int) -> None:
    """Skip (or, under CI=true, fail) when a service is not reachable."""
    if reachable(url, port):
        return
    message = f"{name} is not reachable at {url.split('@')[-1]}"
    if IN_CI:
        pytest.fail(f"{message}; CI=true requires it (.ci/run starts it)")
    pytest.skip(message)


#: Scratch database names: a random suffix makes them unique per session (so per xdist
#: worker too); the worker's name in them tells whose a database left behind was.
SCRATCH_PREFIX = f"cronstore_{XDIST_WORKER}" if XDIST_WORKER else "cronstore"


#: ``transaction`` or ``session``: every PostgreSQL test of the session reaches the server
#: through a PgBouncer of its own in that mode (``make test-pgbouncer``); unset: directly.
PGBOUNCER_MODE = os.environ.get("CRONSTORE_TEST_PGBOUNCER", "")


def through_transaction_pooler() -> bool:
    """Whether the PostgreSQL tests run through a transaction pooler (a test that needs a
    session of its own, as LISTEN does, skips with this reason)."""
    return PGBOUNCER_MODE == "transaction"


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[PgBouncer | None]:
    """The session's PgBouncer (``CRONSTORE_TEST_PGBOUNCER``) in front of the PostgreSQL
    server, or ``None`` when the variable is unset."""
    if not PGBOUNCER_MODE:
        yield None
        return
    if PGBOUNCER_MODE not in PGBOUNCER_MODES:
        pytest.fail(
            f"CRONSTORE_TEST_PGBOUNCER must be one of {', '.join(PGBOUNCER_MODES)}, "
            f"got {PGBOUNCER_MODE!r}"
        )
    problem = pgbouncer_why_not()
    if problem is not None:
        if IN_CI:
            pytest.fail(f"CRONSTORE_TEST_PGBOUNCER is set but {problem}")
        pytest.skip(f"CRONSTORE_TEST_PGBOUNCER is set but {problem}")
    server = urlsplit(POSTGRES_URL.replace("+psycopg", ""))
    with PgBouncer(PGBOUNCER_MODE, (server.hostname or "127.0.0.1", server.port or 5432)) as b:
        yield b


@pytest.fixture(scope="session")
def postgres_url(pgbouncer: PgBouncer | None) -> Iterator[str]:
    """A PostgreSQL database of this session's own (parallel runs do not collide);
    through the session's PgBouncer when ``CRONSTORE_TEST_PGBOUNCER`` is set."""
    need_service("PostgreSQL", POSTGRES_URL, 5432)
    with scratch_database(POSTGRES_URL, prefix=SCRATCH_PREFIX) as scratch:
        yield scratch.url if pgbouncer is None else pgbouncer.through(scratch.url)


@pytest.fixture(scope="session")
def mysql_url() -> Iterator[str]:
    """A MariaDB database of this session's own (parallel runs do not collide)."""
    need_service("MariaDB", MYSQL_URL, 3306)
    with scratch_database(MYSQL_URL, prefix=SCRATCH_PREFIX) as scratch:
        yield scratch.url


@pytest.fixture(scope="session")
def redis_url() -> str:
    need_service("Redis", REDIS_URL, 6379)
    return REDIS_URL


@pytest.fixture(scope="session")
def rabbitmq_url() -> str:
    need_service("RabbitMQ", RABBITMQ_URL, 5672)
    return RABBITMQ_URL


@pytest.fixture(
    params=[
        pytest.param("sqlite"),
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ]
)
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated, empty cronstore database URL on each backend."""

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'cronstore.sqlite'}"
    else:
        url = request.getfixturevalue(f"{request.param}_url")
    store = Store(url)
    try:
        store.upgrade()
        with store.begin() as conn:
            for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
                conn.exec_driver_sql(f"DELETE FROM {table}")
            conn.exec_driver_sql("DELETE FROM cronstore_audit")  # who changed what
            conn.exec_driver_sql("DELETE FROM cronstore_calendar")  # exclusion calendars
    finally:
        store.close()
    return url


@pytest.fixture
def direct(postgres_url: str) -> Iterator[Store]:
    """A PostgreSQL store on the database's own clock (no ``FrozenClock``), emptied."""
    store = Store(postgres_url)
    store.upgrade()
    with store.begin() as conn:
        for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    yield store
    store.close()


@pytest.fixture
def clock() -> FrozenClock:
    """A frozen clock at :data:`timeline.T0` (a module may define its own)."""
    return FrozenClock(T0)


@pytest.fixture
def store(db_url: str, clock: FrozenClock | None) -> Iterator[Store]:
    """A store on ``db_url`` and ``clock``; fails the test if a connection leaked.

    A module may override ``clock`` (``None``: the database's own clock) or ``db_url``.
    """
    s = Store(db_url, clock=clock)
    yield s
    assert s.engine.pool.checkedout() == 0, "a connection was left checked out"
    s.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite store file of this test's own (not migrated): beat's unit tests run on it."""
    return f"sqlite:///{tmp_path / 'cronstore.sqlite'}"


@pytest.fixture
def sqlite_store(sqlite_url: str, clock: FrozenClock) -> Iterator[Store]:
    """A migrated store on ``sqlite_url`` and ``clock``; fails the test if a connection leaked."""
    s = Store(sqlite_url, clock=clock)
    s.upgrade()
    yield s
    assert s.engine.pool.checkedout() == 0, "a connection was left checked out"
    s.close()


@pytest.fixture(autouse=True)
def _redbeat_keeps_its_lock_to_itself() -> Iterator[None]:
    """Importing RedBeat (tests/adopt and tests/e2e/test_switch.py make its data with it)
    connects its lock handler to Celery's process-global ``beat_init`` signal: every later
    beat of the process, ours included, would run it. Disconnect it after the test."""
    yield
    module = sys.modules.get("redbeat.schedulers")
    if module is not None:
        from celery.signals import beat_init

        beat_init.disconnect(module.acquire_distributed_beat_lock)
