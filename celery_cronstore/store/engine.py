"""Engine construction, the dialect probe and the database clock.

A lost connection (a server shut down, crashed or failed over) is recognised from the
driver's error (:func:`connection_lost`), also when the driver has not yet marked its
connection broken: the whole pool is then made stale (every pooled connection is replaced
at its next checkout, none is handed out dead), and a connection going back to the pool is
not rolled back once the server hung up on it (SQLAlchemy's default reset logs that
failure with a traceback, "Exception during reset or similar").
"""

from __future__ import annotations

import logging
import math
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, ExceptionContext, make_url
from sqlalchemy.pool import (
    ConnectionPoolEntry,
    PoolProxiedConnection,
    PoolResetState,
    QueuePool,
    StaticPool,
)

from celery_cronstore.errors import StoreError, StoreUnavailableError
from celery_cronstore.store.pooler import check_pooler
from celery_cronstore.store.pooler import install as install_pooler
from celery_cronstore.store.sqlite import install as install_sqlite
from celery_cronstore.store.urls import driver_hint, network_args, url_problem

__all__ = [
    "DATABASE_ERRORS",
    "Dialect",
    "as_utc",
    "connection_lost",
    "create_store_engine",
    "db_now",
    "deadlock",
    "driver_error",
    "now_expression",
    "redact",
    "stale_pool",
    "unavailable",
]

#: What a database failure may raise out of the store: its own unavailable error, or a
#: SQLAlchemy error it does not translate (a data or SQL error the engine met). Beat backs
#: off and retries on any of them, as on an outage, without importing SQLAlchemy itself.
DATABASE_ERRORS: tuple[type[Exception], ...] = (StoreUnavailableError, sa.exc.SQLAlchemyError)
#: How each database says a transaction was chosen as a deadlock's victim.
_DEADLOCK = ("Deadlock found when trying to get lock", "deadlock detected")


def deadlock(exc: StoreUnavailableError) -> bool:
    """Return whether ``exc`` is a deadlock the server broke by rolling this transaction
    back (MySQL/MariaDB error 1213, PostgreSQL SQLSTATE 40P01): retried, not an outage."""
    return not exc.unreachable and any(text in exc.reason for text in _DEADLOCK)


Clock = Callable[[], datetime]

logger = logging.getLogger(__name__)


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
    url: str, *, session_timeout: float | None = None, pooler: str = "auto", **options: Any
) -> Engine:
    """Create an engine for ``url`` with the settings the store relies on.

    SQLite gets ``BEGIN IMMEDIATE`` transactions (so a tick's read-then-claim is atomic
    across processes), WAL journaling and a busy timeout; an in-memory SQLite database is
    shared by every connection of the engine. ``session_timeout`` (seconds; PostgreSQL and
    MariaDB) bounds how long a session may sit in a transaction, wait for a lock or run a
    statement: a process frozen mid-transaction is cut off and its row locks released.
    ``pooler`` (PostgreSQL; ``cronstore_pooler``) says whether a connection pooler sits in
    front of the server and in which mode, or (``auto``) has the first connection find out
    (:mod:`~celery_cronstore.store.pooler`): through a transaction pooler the limits are
    set per transaction and prepared statements are off.
    """
    problem = url_problem(url) if isinstance(url, str) else None
    if problem is not None:
        raise StoreError(problem)
    try:
        check_pooler(pooler)
    except ValueError as exc:
        raise StoreError(str(exc)) from None
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend != "postgresql" and pooler in ("session", "transaction"):
        raise StoreError(
            f"cronstore_pooler = {pooler!r} is for PostgreSQL behind PgBouncer; the store is"
            f" {backend}: leave cronstore_pooler unset (auto) or set it to none"
        )
    if "pool" not in options and "poolclass" not in options and _queue_pooled(parsed):
        options["poolclass"] = _pool_class(parsed)
    if parsed.get_backend_name() != "sqlite":
        options.setdefault("pool_pre_ping", True)
        options["connect_args"] = network_args(
            parsed.get_backend_name(), session_timeout, options.get("connect_args")
        )
        own_reset = "pool" not in options and "pool_reset_on_return" not in options
        if own_reset:  # _reset_quietly does SQLAlchemy's rollback-on-return instead
            options["pool_reset_on_return"] = None
        engine = _create(parsed, url, options)
        if own_reset:
            _reset_quietly(engine)
        if engine.dialect.name == "postgresql":
            install_pooler(engine, pooler, session_timeout)
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

    install_sqlite(engine, memory=memory)
    return engine


def _create(parsed: URL, url: str, options: dict[str, Any]) -> Engine:
    """``sqlalchemy.create_engine``, with a missing driver said in one line with its fix,
    and database failures raised as :class:`StoreUnavailableError`."""
    try:
        engine = sa.create_engine(parsed, **options)
    except ImportError as exc:
        raise StoreError(driver_hint(exc, str(url))) from None

    @event.listens_for(engine, "handle_error")
    def _on_error(context: ExceptionContext) -> BaseException | None:
        # psycopg marks its connection broken only once it reads the closed socket, not
        # on the server's last words (AdminShutdown): say it is a disconnect, so SQLAlchemy
        # invalidates this connection and every other one of the pool (a pre-ping too).
        if not context.is_disconnect and (
            connection_lost(context.original_exception) or _broken(context)
        ):
            context.is_disconnect = True
        # A failed pre-ping must stay SQLAlchemy's: the pool reconnects on it.
        translated = context.is_disconnect or _translated(context.sqlalchemy_exception)
        if context.is_pre_ping or not translated:
            return None
        # No connection: it failed to open.
        unreachable = context.is_disconnect or context.connection is None
        return unavailable(engine.url, context.original_exception, unreachable=unreachable)

    return engine


def _broken(context: ExceptionContext) -> bool:
    """Whether the failed statement's psycopg connection is broken: PgBouncer, when the
    server session under a transaction ends (an idle-in-transaction timeout), says
    "server conn crashed?" after the server's own error and hangs up; psycopg raises
    "received 2 results" (an ``InternalError`` without a SQLSTATE) for that."""
    try:
        return getattr(context.connection.connection.dbapi_connection, "broken", False) is True  # type: ignore[union-attr]
    except Exception:  # no connection (it failed to open), or already invalidated
        return False


def _translated(error: BaseException | None) -> bool:
    """Whether a SQLAlchemy error becomes :class:`StoreUnavailableError`: the database
    cannot serve (refused or lost connection, a lock or statement timeout, a read-only or
    locked database: ``OperationalError``, ``InterfaceError``) or refuses the user access.

    Not the others: SQLAlchemy itself catches some (MySQL's "no such table" while it
    reflects), the store others (a constraint violation is a duplicate name, or a fire
    already in the ledger).
    """
    if isinstance(error, _UNAVAILABLE):
        return True
    orig = getattr(error, "orig", None)
    return isinstance(error, sa.exc.DBAPIError) and getattr(orig, "sqlstate", None) in _STATES


#: Driver errors that mean the database cannot serve now, not that the statement is wrong.
_UNAVAILABLE = (sa.exc.OperationalError, sa.exc.InterfaceError)
#: PostgreSQL SQLSTATEs psycopg raises as other classes: a missing grant (42501, a
#: ProgrammingError; MySQL and MariaDB say it with an OperationalError), a session cut
#: off by ``idle_in_transaction_session_timeout`` (25P03, an InternalError) and a write
#: on a standby (25006: a URL without ``target_session_attrs=read-write``, or a primary
#: demoted under a session).
_STATES = frozenset({"42501", "25P03", "25006"})
#: PostgreSQL SQLSTATEs of a session the server ended or cannot serve: class 08 (connection
#: exception), the server shutting down (57P01 admin, 57P02 crash; a killed postmaster's
#: backends say 57P01), starting up or in recovery (57P03), a standby (25006).
_GONE = frozenset({"57P01", "57P02", "57P03", "25006"})


def connection_lost(exc: BaseException | None) -> bool:
    """Return whether driver error ``exc`` means its connection is gone for good: the
    server shut down, crashed or became a standby (PostgreSQL's SQLSTATE, or psycopg's
    connection state), whatever the driver says of the connection yet."""
    state = getattr(exc, "sqlstate", None)
    if isinstance(state, str):
        return state.startswith("08") or state in _GONE
    pgconn = getattr(exc, "pgconn", None)
    # libpq's CONNECTION_OK is 0; anything else is a connection that cannot be used again
    return pgconn is not None and getattr(pgconn, "status", 0) != 0


def stale_pool(engine: Engine) -> None:
    """Have ``engine``'s pool replace every connection it holds at its next checkout
    (closed without a reset), as SQLAlchemy does itself on a disconnect it recognises;
    connections opened after this call are kept."""
    # Pool._invalidate is what Connection uses on a disconnect; with no connection it only
    # moves the pool's invalidation time (no public call does that without a connection).
    pool: Any = engine.pool
    pool._invalidate(None, _checkin=False)


def unavailable(
    url: URL, exc: BaseException, *, unreachable: bool = False
) -> StoreUnavailableError:
    """Return the store's error for database failure ``exc`` on ``url``.

    The message has the URL without its password and the driver's first line (with the
    password scrubbed too, should a driver quote it).
    """
    text = str(exc)
    if isinstance(exc, sa.exc.SQLAlchemyError) and exc.args and isinstance(exc.args[0], str):
        text = exc.args[0]  # without the link to SQLAlchemy's error pages
    lines = text.strip().splitlines()
    reason = lines[0].strip() if lines else type(exc).__name__
    if url.password:
        reason = reason.replace(str(url.password), "***")
    return StoreUnavailableError(redact(url), reason, unreachable=unreachable)


def driver_error(
    engine: Engine, statement: str, params: Any, exc: Exception, *, opening: bool = False
) -> Exception:
    """Return the error to raise for driver error ``exc`` on a DBAPI connection of
    ``engine`` the store drives itself (not through a ``Connection``), as the engine's
    own would be: :class:`StoreUnavailableError` (unreachable when the connection was
    ``opening`` or was lost), or SQLAlchemy's ``IntegrityError`` for the caller."""
    dialect = engine.dialect
    error = sa.exc.DBAPIError.instance(statement, params, exc, dialect.loaded_dbapi.Error)
    if not _translated(error):
        return error
    driver: Any = exc  # one of the driver's errors (``error`` wraps it)
    gone = connection_lost(exc) or dialect.is_disconnect(driver, None, None)
    if gone:  # the pooled connections are as dead as this one: none is handed out again
        stale_pool(engine)
    return unavailable(engine.url, exc, unreachable=opening or gone)


def _reset_quietly(engine: Engine) -> None:
    """Roll back each connection going back to ``engine``'s pool, as SQLAlchemy's default
    reset does, except one whose server is gone: that one is invalidated (and the pool made
    stale) without the failed rollback's traceback. A detached connection being closed is
    not rolled back at all (its server ends the transaction with the session)."""

    @event.listens_for(engine, "reset")
    def _on_reset(
        dbapi_conn: Any, record: ConnectionPoolEntry | None, state: PoolResetState
    ) -> None:
        if state.terminate_only or state.transaction_was_reset or not state.asyncio_safe:
            return
        failure: BaseException | None = None
        if getattr(dbapi_conn, "closed", False) is not True:  # psycopg: hung up on
            try:
                dbapi_conn.rollback()
                return
            except engine.dialect.loaded_dbapi.Error as exc:
                if not (
                    connection_lost(exc) or engine.dialect.is_disconnect(exc, dbapi_conn, None)
                ):
                    raise  # a live connection that cannot roll back: SQLAlchemy says so
                failure = exc
        logger.debug("dropping a pooled connection the server closed (%s)", failure)
        stale_pool(engine)
        if record is not None:
            record.invalidate(failure)


def _queue_pooled(url: URL) -> bool:
    """Return whether SQLAlchemy would pool ``url``'s connections in a ``QueuePool``."""
    try:
        dialect: Any = url.get_dialect()  # the class: DefaultDialect's classmethod answers
        return bool(dialect.get_pool_class(url) is QueuePool)
    except Exception:  # an unknown dialect: create_engine says so, in its own words
        return False


def _pool_class(url: URL) -> type[QueuePool]:
    """Return a ``QueuePool`` that raises :class:`StoreUnavailableError` when no
    connection is free in time (``pool_timeout``), on every checkout of the engine."""

    class Pool(QueuePool):
        def connect(self) -> PoolProxiedConnection:
            try:
                return super().connect()
            except sa.exc.TimeoutError as exc:
                raise unavailable(url, exc) from exc

    return Pool


def _limit_sessions(engine: Engine, seconds: float) -> None:
    """Set MySQL's and MariaDB's own limits on every new connection of ``engine`` (see
    above; PostgreSQL's, per session or per transaction, are :mod:`.pooler`'s)."""
    if engine.dialect.name == "postgresql":
        return
    whole = max(1, math.ceil(seconds))

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        cursor.execute("SELECT VERSION()")
        maria = "mariadb" in str(cursor.fetchone()[0]).lower()
        cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {whole}")
        if maria:  # MySQL has neither; its max_execution_time covers SELECTs only
            cursor.execute(f"SET SESSION idle_transaction_timeout = {whole}")
            cursor.execute(f"SET SESSION max_statement_time = {seconds:g}")
        cursor.close()
        dbapi_conn.commit()


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
