"""Engine construction, the dialect probe and the database clock."""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.pool import StaticPool

from celery_cronstore.errors import StoreError
from celery_cronstore.urls import driver_hint, url_problem

__all__ = [
    "WRITE_OPTION",
    "Dialect",
    "as_utc",
    "create_store_engine",
    "db_now",
    "now_expression",
    "redact",
]

#: Execution option marking a transaction that writes (SQLite: ``BEGIN IMMEDIATE``).
WRITE_OPTION = "cronstore_write"

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class Dialect:
    """What the database can do, probed once per engine."""

    name: str
    skip_locked: bool


def redact(url: str | URL) -> str:
    """Return ``url`` with its password replaced by ``***`` (safe to log or print)."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except Exception:  # not a URL at all: show nothing that could be a secret
        return "<unparsable database URL>"
    return parsed.render_as_string(hide_password=True)


def create_store_engine(
    url: str, *, session_timeout: float | None = None, **options: Any
) -> Engine:
    """Create an engine for ``url`` with the settings the store relies on.

    SQLite gets ``BEGIN IMMEDIATE`` transactions (so a tick's read-then-claim is atomic
    across processes), WAL journaling and a busy timeout; an in-memory SQLite database is
    shared by every connection of the engine. ``session_timeout`` (seconds; PostgreSQL and
    MariaDB) bounds how long a session may sit in a transaction, wait for a lock or run a
    statement: a process frozen mid-transaction is cut off and its row locks released.
    """
    problem = url_problem(url) if isinstance(url, str) else None
    if problem is not None:
        raise StoreError(problem)
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        options.setdefault("pool_pre_ping", True)
        engine = _create(parsed, url, options)
        if session_timeout is not None:
            _limit_sessions(engine, session_timeout)
        return _fork_safe(engine)
    memory = parsed.database in (None, "", ":memory:")
    connect_args = options.pop("connect_args", {})
    connect_args.setdefault("check_same_thread", False)
    connect_args.setdefault("timeout", 30)
    if memory:
        options.setdefault("poolclass", StaticPool)
    engine = _create(parsed, url, {"connect_args": connect_args, **options})
    if not memory:
        _fork_safe(engine)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide where transactions begin (pysqlite quirk).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        if not memory:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        # Writers take the lock up front so a read-then-claim is atomic across processes;
        # readers (beat's idle peek) must not queue behind writers for it.
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


_PG_LIMITS = ("idle_in_transaction_session_timeout", "lock_timeout", "statement_timeout")


def _create(parsed: URL, url: str, options: dict[str, Any]) -> Engine:
    """``sqlalchemy.create_engine``, with a missing driver said in one line with its fix."""
    try:
        return sa.create_engine(parsed, **options)
    except ImportError as exc:
        raise StoreError(driver_hint(exc, str(url))) from None


def _limit_sessions(engine: Engine, seconds: float) -> None:
    """Set the server's own limits on every new connection of ``engine`` (see above)."""
    millis = max(1000, int(seconds * 1000))
    whole = max(1, math.ceil(seconds))

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        if engine.dialect.name == "postgresql":
            for name in (
                "idle_in_transaction_session_timeout",
                "lock_timeout",
                "statement_timeout",
            ):
                cursor.execute(f"SET SESSION {name} = {millis}")
        else:
            cursor.execute("SELECT VERSION()")
            maria = "mariadb" in str(cursor.fetchone()[0]).lower()
            cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {whole}")
            if maria:  # MySQL has neither; its max_execution_time covers SELECTs only
                cursor.execute(f"SET SESSION idle_transaction_timeout = {whole}")
                cursor.execute(f"SET SESSION max_statement_time = {seconds:g}")
        cursor.close()
        dbapi_conn.commit()

    if engine.dialect.name == "postgresql":

        @event.listens_for(engine, "after_cursor_execute")
        def _rearm(
            conn: sa.Connection, cursor: Any, _sql: str, _p: Any, _c: Any, executemany: bool
        ) -> None:
            # psycopg 3 runs executemany in pipeline mode, after which PostgreSQL does not
            # arm idle_in_transaction_session_timeout: a beat frozen just after its claim's
            # batch UPDATE held its row locks for as long as it stayed frozen. One plain
            # statement (own cursor: the batch's rowcount is still to be read) re-arms it.
            if executemany and conn.in_transaction():
                extra = cursor.connection.cursor()
                extra.execute("SELECT 1")
                extra.close()


def probe(engine: Engine) -> Dialect:
    """Return what ``engine``'s database supports (asks the server once)."""
    name = engine.dialect.name
    if name == "postgresql":
        return Dialect(name, skip_locked=True)
    if name in ("mysql", "mariadb"):
        with engine.connect() as conn:
            version = str(conn.exec_driver_sql("SELECT VERSION()").scalar_one())
        numbers = tuple(int(p) for p in version.split("-")[0].split(".")[:2] if p.isdigit())
        maria = "mariadb" in version.lower()
        return Dialect(name, skip_locked=numbers >= ((10, 6) if maria else (8, 0)))
    return Dialect(name, skip_locked=False)


def now_expression(dialect: str, clock: Clock | None = None) -> sa.ColumnElement[Any] | None:
    """Return the SQL for the database's current time, or ``None`` to use the host clock.

    ``None`` for SQLite (the host is the database's clock) and when a clock is injected.
    """
    if clock is not None:
        return None
    if dialect == "postgresql":
        return sa.func.clock_timestamp()
    if dialect in ("mysql", "mariadb"):
        return sa.func.utc_timestamp(sa.literal_column("6"))
    return None


def as_utc(value: object) -> datetime:
    """Return a clock value read from the database as aware UTC (naive values are UTC)."""
    if not isinstance(value, datetime):
        raise TypeError(f"database clock returned {value!r}")
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def db_now(conn: sa.Connection, clock: Clock | None = None) -> datetime:
    """Return the database's current time as aware UTC (SQLite: the host's; or ``clock``)."""
    if clock is not None:
        return clock().astimezone(timezone.utc)
    expression = now_expression(conn.dialect.name)
    if expression is None:
        return datetime.now(timezone.utc)
    return as_utc(conn.execute(sa.select(expression)).scalar_one())


def _fork_safe(engine: Engine) -> Engine:
    """Make a forked child (``celery worker -B``, prefork pools) open its own connections.

    A connection inherited from the parent is shared with it: SQLite then fails with
    "locking protocol", servers see two clients interleave on one socket. The child drops
    its inherited pool without closing the parent's connections (SQLAlchemy's advice).
    """
    if hasattr(os, "register_at_fork"):
        ref = weakref.ref(engine)

        def reset_in_child() -> None:
            inherited = ref()
            if inherited is not None:
                inherited.dispose(close=False)

        os.register_at_fork(after_in_child=reset_in_child)
    return engine
