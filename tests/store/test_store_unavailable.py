"""A database that is away: the store raises its own StoreUnavailableError (never a
SQLAlchemy exception) naming the database without its password, and recovers by itself
when the database is back; the errors it handles itself (a duplicate name) still work."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from celery_cronstore.errors import (
    CronstoreError,
    DuplicateTaskError,
    StoreError,
    StoreUnavailableError,
)
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.idle import HeldConnection
from harness.tcp_proxy import Proxy

PASSWORD = "hunter2-Xy"
#: Port 1: nothing listens there, so connecting is refused at once.
CLOSED = {
    "postgresql": f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:1/test",
    "mysql": f"mysql+pymysql://root:{PASSWORD}@127.0.0.1:1/test",
}

CALLS: dict[str, Callable[[Store], Any]] = {
    "get": lambda s: s.get("a"),
    "list": lambda s: s.list(),
    "add": lambda s: s.add("a", task="app.a", timer="every 1m"),
    "update": lambda s: s.update("a", description="x"),
    "disable": lambda s: s.disable("a"),
    "remove": lambda s: s.remove("a"),
    "history": lambda s: s.history("a"),
    "upgrade": lambda s: s.upgrade(),
    "check_schema": lambda s: s.check_schema(),
    "now": lambda s: s.now(),
    "claim_due": lambda s: Claimer(s, "beat-1").claim_due(),
}


def assert_unavailable(error: BaseException, url: str) -> None:
    assert isinstance(error, StoreUnavailableError)
    assert isinstance(error, StoreError)
    assert isinstance(error, CronstoreError)
    assert not isinstance(error, sa.exc.SQLAlchemyError)
    message = str(error)
    assert sa.engine.make_url(url).render_as_string(hide_password=True) in message
    assert "127.0.0.1:1" in message
    assert "unreachable" in message
    assert "refused" in message.lower()
    assert PASSWORD not in message
    assert "\n" not in message


@pytest.mark.parametrize("call", sorted(CALLS))
def test_postgresql_down_every_method_raises_the_stores_error(call: str) -> None:
    store = Store(CLOSED["postgresql"])  # opens nothing yet
    try:
        with pytest.raises(StoreUnavailableError) as raised:
            CALLS[call](store)
        assert_unavailable(raised.value, CLOSED["postgresql"])
    finally:
        store.close()


def test_mysql_down_the_store_cannot_even_open() -> None:
    # Opening a MySQL/MariaDB store asks the server its version: that fails first.
    with pytest.raises(StoreUnavailableError) as raised:
        Store(CLOSED["mysql"])
    assert_unavailable(raised.value, CLOSED["mysql"])


def test_the_held_connection_raises_the_stores_error_too() -> None:
    store = Store(CLOSED["postgresql"])
    held = HeldConnection(store.engine)
    try:
        with pytest.raises(StoreUnavailableError) as raised:
            held.one("SELECT 1")
        assert_unavailable(raised.value, CLOSED["postgresql"])
    finally:
        held.close()
        store.close()


def test_the_error_survives_pickling() -> None:
    error = StoreUnavailableError("postgresql://u:***@db/x", "refused", unreachable=True)
    again = pickle.loads(pickle.dumps(error))
    assert (str(again), again.url, again.unreachable) == (str(error), error.url, True)


def test_no_free_connection_in_time_is_the_stores_error(db_url: str) -> None:
    store = Store(db_url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    try:
        store.add("a", task="app.a", timer="every 1m")
        # The pool's only connection is held: the next checkout waits, then fails.
        with store.engine.connect(), pytest.raises(StoreUnavailableError) as raised:
            store.get("a")
        assert "timed out" in str(raised.value)
        assert store.get("a").name == "a", "free again"
    finally:
        store.close()


def test_errors_the_store_handles_itself_still_work(store: Store) -> None:
    store.add("a", task="app.a", timer="every 1m")
    with pytest.raises(DuplicateTaskError):  # an IntegrityError, caught inside the store
        store.add("a", task="app.a", timer="every 1m")


@pytest.fixture
def proxied(postgres_url: str) -> Iterator[tuple[Store, Proxy]]:
    url = sa.engine.make_url(postgres_url)
    proxy = Proxy((url.host or "127.0.0.1", url.port or 5432))
    through = url.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
    store = Store(through, connect_args={"connect_timeout": 2})
    store.upgrade()
    with store.begin() as conn:
        for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    yield store, proxy
    store.close()
    proxy.close()


@pytest.mark.postgres
def test_a_lost_database_is_the_stores_error_and_it_recovers(
    proxied: tuple[Store, Proxy],
) -> None:
    store, proxy = proxied
    store.add("a", task="app.a", timer="every 1m")
    with store.engine.connect() as conn:  # a pooled connection the outage will cut
        conn.exec_driver_sql("SELECT 1")
    proxy.down()
    for call in ("get", "update", "claim_due"):
        with pytest.raises(StoreUnavailableError) as raised:
            CALLS[call](store)
        assert "unreachable" in str(raised.value)
    proxy.up()
    # The pool's pre-ping finds the dead connections and reconnects (not the store's
    # error: a failed ping must stay SQLAlchemy's for that).
    assert store.get("a").name == "a"
    assert store.update("a", description="back").description == "back"
