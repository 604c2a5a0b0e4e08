"""The store through a real PgBouncer, in transaction and in session pooling mode.

Through a transaction pooler nothing may be left on a server session (it is another
client's next): the limits hold per transaction, no setting leaks to other clients, no
prepared statement collides, the migration lock is the transaction's, LISTEN goes to
``cronstore_listen_url`` or beat polls. The mode is proved, not guessed
(``store.pooler``): found through transaction pooling only.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner
from conftest import IN_CI, POSTGRES_URL, need_service
from queues import drain

from celery_cronstore.beat.scheduler import Scheduler
from celery_cronstore.cli import cronstore
from celery_cronstore.config import Config
from celery_cronstore.errors import StoreError, StoreUnavailableError
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.listen import Listener, listener_for
from celery_cronstore.store.pooler import mode_of, pooling_of
from celery_cronstore.store.vacuum import vacuum
from harness.pgbouncer import PgBouncer, why_not
from harness.scratch import scratch_database

pytestmark = [pytest.mark.postgres, pytest.mark.xdist_group("pgbouncer")]

#: The server's own defaults of what the store sets (the test server sets none).
DEFAULTS = {
    "idle_in_transaction_session_timeout": "0",
    "lock_timeout": "0",
    "statement_timeout": "0",
    "synchronous_commit": "on",
}


@pytest.fixture(scope="module")
def server_db() -> Iterator[str]:
    """A scratch database on the PostgreSQL server itself (direct URL), migrated."""
    need_service("PostgreSQL", POSTGRES_URL, 5432)
    with scratch_database(POSTGRES_URL, prefix="cronstore_pooler") as scratch:
        store = Store(scratch.url)
        store.upgrade()
        store.close()
        yield scratch.url


def _bouncer(mode: str) -> Iterator[PgBouncer]:
    problem = why_not()
    if problem is not None:
        if IN_CI:
            pytest.fail(f"{problem}; CI=true requires PgBouncer")
        pytest.skip(problem)
    server = sa.make_url(POSTGRES_URL)
    with PgBouncer(mode, (server.host or "127.0.0.1", server.port or 5432)) as bouncer:
        yield bouncer


@pytest.fixture(scope="module")
def transaction_bouncer() -> Iterator[PgBouncer]:
    yield from _bouncer("transaction")


@pytest.fixture(scope="module")
def session_bouncer() -> Iterator[PgBouncer]:
    yield from _bouncer("session")


@pytest.fixture(params=["transaction", "session"])
def bouncer(request: pytest.FixtureRequest) -> PgBouncer:
    """Each pooling mode's PgBouncer."""
    return request.getfixturevalue(f"{request.param}_bouncer")  # type: ignore[no-any-return]


@pytest.fixture
def empty(server_db: str) -> str:
    """The scratch database with no tasks, fires or beats."""
    store = Store(server_db)
    with store.begin() as conn:
        for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    store.close()
    return server_db


def _settings(url: str, clients: int) -> list[dict[str, str]]:
    """Read :data:`DEFAULTS`' settings as ``clients`` plain psycopg clients at once, each
    inside a transaction (so each holds a server session of its own)."""
    dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(False)
    barrier = threading.Barrier(clients)

    def read(_: int) -> dict[str, str]:
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", [list(DEFAULTS)]
            ).fetchall()
            barrier.wait(10)  # every client holds its server session now
        return {str(name): str(value) for name, value in rows}

    with ThreadPoolExecutor(clients) as pool:
        return list(pool.map(read, range(clients)))


# -- detection --------------------------------------------------------------------------


def test_detection_finds_transaction_pooling_only(
    transaction_bouncer: PgBouncer, session_bouncer: PgBouncer, server_db: str
) -> None:
    found = {}
    for name, url in (
        ("transaction", transaction_bouncer.through(server_db)),
        ("session", session_bouncer.through(server_db)),
        ("direct", server_db),
    ):
        store = Store(url)
        try:
            found[name] = mode_of(store.engine)
            pooling = pooling_of(store.engine)
            assert pooling is not None
            assert pooling.detected
        finally:
            store.close()
    assert found == {"transaction": "transaction", "session": "session", "direct": "none"}


def test_a_set_mode_is_not_probed(transaction_bouncer: PgBouncer, server_db: str) -> None:
    store = Store(transaction_bouncer.through(server_db), pooler="transaction")
    try:
        pooling = pooling_of(store.engine)
        assert pooling is not None
        assert pooling.mode == "transaction"
        assert not pooling.detected
        assert "cronstore_pooler = transaction" in pooling.describe()
    finally:
        store.close()


# -- limits per transaction, nothing left behind ----------------------------------------


def test_limits_hold_per_transaction_and_no_setting_leaks(
    transaction_bouncer: PgBouncer, empty: str
) -> None:
    url = transaction_bouncer.through(empty)
    store = Store(url, session_timeout=1, pool_pre_ping=False)
    try:
        with store.engine.connect() as conn:
            shown = conn.exec_driver_sql(
                "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),"
                " current_setting('idle_in_transaction_session_timeout')"
            ).one()
        assert tuple(shown) == ("1s", "1s", "1s")
        began = time.monotonic()
        with (
            pytest.raises(StoreUnavailableError, match="statement timeout"),
            store.engine.connect() as conn,
        ):
            conn.exec_driver_sql("SELECT pg_sleep(3)")
        assert time.monotonic() - began < 2.5, "the statement timeout did not cut it off"

        store.add("locked", task="t.x", timer="every 1h")
        holder = psycopg.connect(
            sa.make_url(empty).set(drivername="postgresql").render_as_string(False)
        )
        try:
            holder.execute("SELECT 1 FROM cronstore_periodic_task FOR UPDATE")
            began = time.monotonic()
            # The lock wait and the statement both end at 1 s: either says so.
            with pytest.raises(StoreUnavailableError, match=r"(lock|statement) timeout"):
                store.disable("locked")
            assert time.monotonic() - began < 2.5, "the lock timeout did not apply"
        finally:
            holder.close()

        # Beat's parts: the held connection's looks and heartbeats, a vacuum, claims.
        claimer = Claimer(store, "pooled-beat", hold=True)
        for _ in range(10):
            claimer.claim_due()
            claimer.look.chores(store.now())
            claimer.look.peek()
        vacuum(store.db, "cronstore_fire")
        claimer.close()
    finally:
        store.close()
    # The pool is 20 server sessions: 20 clients at once see every one of them.
    assert all(seen == DEFAULTS for seen in _settings(url, 20))


def test_concurrent_clients_never_collide_on_prepared_statements(
    transaction_bouncer: PgBouncer, empty: str
) -> None:
    """Twelve stores start at once (each probes a busy pooler) and each commits the same
    edits thirty times: psycopg would prepare them from the sixth, and a prepared
    statement of one server session is missing on the next ("_pg3_0 does not exist";
    a store told ``cronstore_pooler = none`` fails so here)."""
    url = transaction_bouncer.through(empty)
    setup = Store(url)
    for i in range(12):
        setup.add(f"a{i}", task="t.x", timer="every 1h")
    setup.close()
    errors: list[str] = []
    start = threading.Barrier(12)

    def client(i: int) -> None:
        start.wait(10)
        store = Store(url, session_timeout=5)
        try:
            for n in range(30):  # committed: a rollback would drop psycopg's prepared ones
                store.update(f"a{i}", description=str(n))
        except Exception as exc:
            errors.append(str(exc).splitlines()[0])
        finally:
            store.close()

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(client, range(12)))
    assert errors == []


# -- migrations -------------------------------------------------------------------------


def test_five_migrations_at_once_all_succeed(bouncer: PgBouncer) -> None:
    with scratch_database(POSTGRES_URL, prefix="cronstore_pooler_migrate") as scratch:
        url = bouncer.through(scratch.url)

        def migrate(_: int) -> str | None:
            store = Store(url)
            try:
                store.upgrade()
                store.check_schema()
                return None
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}"
            finally:
                store.close()

        with ThreadPoolExecutor(5) as pool:
            assert list(pool.map(migrate, range(5))) == [None] * 5
        if bouncer.mode == "transaction":  # the lock went with its transaction
            assert all(seen == DEFAULTS for seen in _settings(url, 20))


# -- wake on change ---------------------------------------------------------------------


def test_wake_on_change_uses_the_listen_url_or_polls(
    transaction_bouncer: PgBouncer, session_bouncer: PgBouncer, empty: str
) -> None:
    pooled = Store(transaction_bouncer.through(empty))
    held = Store(session_bouncer.through(empty))
    made: list[Listener] = []
    try:
        listener, line = listener_for(pooled.engine, listen=True, listen_url="", poll_interval=5)
        assert listener is None
        assert line == (
            "polling every 5 s: LISTEN cannot work through a transaction pooler;"
            " set cronstore_listen_url"
        )
        listener, line = listener_for(pooled.engine, listen=True, listen_url=empty, poll_interval=5)
        assert listener is not None
        assert line.startswith("wake on change through postgresql")
        made.append(listener)
        listener, line = listener_for(held.engine, listen=True, listen_url="", poll_interval=5)
        assert listener is not None
        assert listener.engine is held.engine
        made.append(listener)
        for each in made:
            assert each.wait(5) == 0.0  # connects, listens; looks at once
        pooled.add("new", task="t.x", timer="every 1h")  # its INSERT notifies
        for each in made:
            began = time.monotonic()
            assert each.wait(5) == 0.0
            assert time.monotonic() - began < 2, "no notification arrived"
        # A listen URL through the transaction pooler too: beat polls, warned.
        deaf = Listener(Store(transaction_bouncer.through(empty)).engine, own_engine=True)
        assert deaf.wait(0.2) == 0.2
        assert deaf.closed
    finally:
        for each in made:
            each.close()
        pooled.close()
        held.close()


# -- beat's cycle, and a restart -------------------------------------------------------


def _beat_app(url: str) -> Celery:
    app = Celery("pooled", broker="memory://", set_as_current=False)
    app.conf.update(
        cronstore_url=url,
        cronstore_poll_interval=1.0,
        cronstore_require_registered=False,
        cronstore_sync_beat_schedule=False,
        task_default_queue="q",
    )
    return app


def test_beat_claims_and_publishes_through_the_pooler(bouncer: PgBouncer, empty: str) -> None:
    url = bouncer.through(empty)
    store = Store(url)
    store.add("every-second", task="t.x", timer="*:*:*")
    app = _beat_app(url)
    scheduler = Scheduler(app, lazy=True)
    try:
        messages: list[Any] = []
        deadline = time.monotonic() + 10
        while len(messages) < 2 and time.monotonic() < deadline:
            time.sleep(min(scheduler.tick(), 0.5))
            messages += drain(app)
        assert len(messages) >= 2, "beat published no fires through the pooler"
        published = {f.task_id for f in store.history("every-second") if f.state == "published"}
        assert {m.headers["id"] for m in messages} <= published
        expected = "transaction" if bouncer.mode == "transaction" else "session"
        assert scheduler.store is not None
        assert mode_of(scheduler.store.engine) == expected
        assert (scheduler._listener is None) == (bouncer.mode == "transaction")
    finally:
        scheduler.close()
        store.close()


def test_the_store_reconnects_after_pgbouncer_restarts(bouncer: PgBouncer, empty: str) -> None:
    store = Store(bouncer.through(empty), session_timeout=5)
    try:
        store.add("a", task="t.x", timer="every 1h")
        bouncer.stop()
        with pytest.raises(StoreUnavailableError):
            store.get("a")
        bouncer.start()
        deadline = time.monotonic() + 10
        while True:
            try:
                assert store.get("a").name == "a"
                break
            except StoreUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        store.disable("a")
    finally:
        if not bouncer.running:
            bouncer.start()
        store.close()


# -- settings and what health says ------------------------------------------------------


def test_the_pooler_setting_is_checked_and_reaches_the_engine() -> None:
    app = Celery("conf", set_as_current=False)
    app.conf.cronstore_pooler = "pgbouncer"
    with pytest.raises(ValueError, match="cronstore_pooler must be one of auto, none, session"):
        Config.from_app(app)
    app.conf.cronstore_pooler = "transaction"
    app.conf.cronstore_engine_options = {"pool_size": 3}
    config = Config.from_app(app)
    assert config.engine_options == {"pool_size": 3, "pooler": "transaction"}
    with pytest.raises(StoreError, match="cronstore_pooler = 'transaction' is for PostgreSQL"):
        Store("sqlite://", pooler="transaction")


def test_health_says_how_the_store_is_reached_and_how_changes_are_seen(
    transaction_bouncer: PgBouncer, empty: str
) -> None:
    url = transaction_bouncer.through(empty)
    app = _beat_app(url)
    fresh = Store(url)
    Claimer(fresh, "pooled-beat").heartbeat(fresh.now())
    fresh.close()

    def health(*args: str) -> str:
        context = CLIContext(app=app, no_color=True, workdir=None)
        result = CliRunner().invoke(cronstore, [*args, "health"], obj=context)
        assert result.exit_code == 0, result.output
        return result.output

    assert (
        "database: through a transaction pooler (detected): limits set per transaction,"
        " no prepared statements; changes: polling every 1 s: LISTEN cannot work through a"
        " transaction pooler; set cronstore_listen_url"
    ) in health()
    app.conf.cronstore_listen_url = empty.replace("postgres@", "postgres:secret@")
    shown = json.loads(health("--json"))["database"]
    assert "changes: wake on change through postgresql+psycopg://postgres:***@" in shown
