"""PostgreSQL behind a connection pooler (PgBouncer): which mode, and what it changes.

A transaction pooler (PgBouncer's ``pool_mode = transaction``) hands each transaction of
a client to whichever server session is free, so anything a client leaves on its session
(``SET SESSION``, a prepared statement, ``LISTEN``, a session advisory lock) lands on some
other client's transaction, or is gone at the next. A session pooler holds one server
session per client connection, as a direct connection does.

The mode is the setting ``cronstore_pooler`` (``none``, ``session``, ``transaction``), or,
with ``auto`` (the default), proved on the engine's first connection, before anything is
set on it: when the server's view of the connection (``inet_server_addr()``,
``inet_server_port()``) differs from the client's, something sits in between; then that
connection reads its server's ``pg_backend_pid()`` outside a transaction and a second
client connection reads its own inside one. Equal pids mean the first client's server
session was handed to the second: transaction (or statement) pooling. PgBouncer hands out
the server connection released last first, so at rest the probe proves it at the first
try. A busy pooler hands that session to some other client instead, but then each client
soon finds itself on another server session than before, which proves it too. Direct
connections and session pooling can give neither. The probe tries :data:`PROBE_TRIES`
times; a pooler could still hide itself by chance (``cronstore_pooler = "transaction"``
makes it certain). A connection over
a Unix socket is taken as direct (set the mode for a pooler listening on one).

In transaction mode no session state is set: the server limits (``session_timeout``) are
set per transaction with ``set_config(..., true)`` in one statement as each transaction
begins, and psycopg's automatic prepared statements are off (``prepare_threshold=None``;
PgBouncer 1.18 does not track them).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import weakref
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from celery_cronstore.config import POOLERS
from celery_cronstore.errors import StoreError

__all__ = [
    "MODES",
    "POOLERS",
    "PROBE_TRIES",
    "PROBE_WAIT",
    "Pooling",
    "check_pooler",
    "describe",
    "install",
    "limits_statement",
    "mode_of",
    "pooling_of",
]

logger = logging.getLogger(__name__)

#: What a connection is found or said to go through.
MODES = ("none", "session", "transaction")
#: How many times the probe hands a server session from one client to another.
PROBE_TRIES = 5
#: Seconds the probe's second client may wait for the pooler to give it a server session.
PROBE_WAIT = 5.0

_LIMITS = ("idle_in_transaction_session_timeout", "lock_timeout", "statement_timeout")
_WHO = "SELECT pg_backend_pid(), host(inet_server_addr()), inet_server_port()"
_PID = "SELECT pg_backend_pid()"

_poolings: weakref.WeakKeyDictionary[sa.Engine, Pooling] = weakref.WeakKeyDictionary()


def check_pooler(value: object) -> str:
    """Return ``value`` if it is a ``cronstore_pooler`` choice; else raise ``ValueError``
    naming the setting and the choices."""
    if isinstance(value, str) and value in POOLERS:
        return value
    raise ValueError(f"cronstore_pooler must be one of {', '.join(POOLERS)}, got {value!r}")


def limits_statement(seconds: float | None, **extra: str) -> str | None:
    """Return the one statement that sets the session limits for ``seconds`` (``None``:
    none) and the ``extra`` settings for the current transaction only (``None``: there
    is nothing to set)."""
    values: dict[str, str] = {}
    if seconds is not None:
        values.update(dict.fromkeys(_LIMITS, str(max(1000, int(seconds * 1000)))))
    values.update(extra)
    if not values:
        return None
    sets = ", ".join(f"set_config('{name}', '{value}', true)" for name, value in values.items())
    return f"SELECT {sets}"


class Pooling:
    """How one engine's connections reach PostgreSQL (decided once, on its first)."""

    def __init__(self, setting: str, session_timeout: float | None = None) -> None:
        #: The setting (one of :data:`POOLERS`).
        self.setting = check_pooler(setting)
        #: Seconds of the server limits (``None``: none are set).
        self.session_timeout = session_timeout
        #: One of :data:`MODES` once decided.
        self.mode: str | None = None if setting == "auto" else setting
        self._lock = threading.Lock()
        self.connect_args: tuple[tuple[Any, ...], dict[str, Any]] | None = None

    @property
    def per_transaction(self) -> bool:
        """Whether nothing may be left on a session (transaction pooling)."""
        return self.mode == "transaction"

    @property
    def detected(self) -> bool:
        """Whether the mode was probed (``auto``), not set."""
        return self.setting == "auto"

    def describe(self) -> str:
        """Return one line saying how connections reach the server, and what follows."""
        how = "detected" if self.detected else f"cronstore_pooler = {self.setting}"
        if self.mode == "transaction":
            return (
                f"through a transaction pooler ({how}): limits set per transaction,"
                " no prepared statements"
            )
        if self.mode == "session":
            return f"through a session pooler ({how})"
        if self.mode == "none":
            return "direct" if self.detected else f"direct ({how})"
        return "not connected yet"

    def statement(self, **extra: str) -> str | None:
        """Return the per-transaction limits statement (with ``extra`` settings), or
        ``None`` when there is nothing to set."""
        return limits_statement(self.session_timeout, **extra)

    def resolve(self, dbapi_conn: Any, open_other: Callable[[], Any]) -> str:
        """Decide the mode on ``dbapi_conn`` (the engine's first connection) if not yet
        decided; ``open_other`` opens a second client connection for the probe."""
        if self.mode is not None:
            return self.mode
        with self._lock:
            if self.mode is None:
                self.mode = _probe(dbapi_conn, open_other)
                logger.debug("connections go %s", self.describe())
        return self.mode


def pooling_of(engine: sa.Engine) -> Pooling | None:
    """Return ``engine``'s :class:`Pooling` (``None``: not PostgreSQL)."""
    return _poolings.get(engine)


def mode_of(engine: sa.Engine) -> str:
    """Return how ``engine`` reaches its server (one of :data:`MODES`), opening a
    connection if none has been yet (``none`` for a database that is not PostgreSQL)."""
    pooling = _poolings.get(engine)
    if pooling is None:
        return "none"
    if pooling.mode is None:
        with engine.connect():
            pass
    return pooling.mode or "none"


def describe(engine: sa.Engine) -> str:
    """Return how ``engine`` reaches PostgreSQL in a few words (:meth:`Pooling.describe`),
    opening a connection if none has been yet."""
    mode_of(engine)
    pooling = _poolings.get(engine)
    return "not PostgreSQL" if pooling is None else pooling.describe()


def install(engine: sa.Engine, setting: str, session_timeout: float | None) -> Pooling:
    """Decide ``engine``'s mode on its first connection and act on it on every one: the
    limits for ``session_timeout`` seconds per session (``SET SESSION``) or, through a
    transaction pooler, per transaction; there, prepared statements off."""
    pooling = Pooling(setting, session_timeout)
    _poolings[engine] = pooling
    limits = limits_statement(session_timeout)
    dialect = engine.dialect

    @event.listens_for(engine, "do_connect")
    def _keep_args(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> None:
        if pooling.connect_args is None:
            pooling.connect_args = (tuple(cargs), dict(cparams))

    def open_other() -> Any:
        if pooling.connect_args is None:
            raise RuntimeError("no connection arguments were seen")
        cargs, cparams = pooling.connect_args
        return dialect.connect(*cargs, **cparams)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        if pooling.resolve(dbapi_conn, open_other) == "transaction":
            if hasattr(dbapi_conn, "prepare_threshold"):  # psycopg 3
                dbapi_conn.prepare_threshold = None
            return
        if session_timeout is None:
            return
        millis = max(1000, int(session_timeout * 1000))
        cursor = dbapi_conn.cursor()
        for name in _LIMITS:
            cursor.execute(f"SET SESSION {name} = {millis}")
        cursor.close()
        dbapi_conn.commit()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        if limits is None or not pooling.per_transaction:
            return
        if getattr(conn.connection.dbapi_connection, "autocommit", False):
            return  # each statement is its own transaction: nothing would last
        conn.exec_driver_sql(limits)

    if session_timeout is not None:

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

    return pooling


def _probe(first: Any, open_other: Callable[[], Any]) -> str:
    """Return the mode proved on connection ``first`` (see the module docstring)."""
    info = getattr(first, "info", None)
    host = str(getattr(info, "host", "") or "")
    if not host or host.startswith("/"):  # a Unix socket: taken as direct
        return "none"
    saved = first.autocommit
    first.autocommit = True  # read outside a transaction: the server session is let go
    try:
        cursor = first.cursor()
        try:
            cursor.execute(_WHO)
            pid, address, port = cursor.fetchone()
            if not _between(info, address, port):
                return "none"
            return _hand_over(cursor, int(pid), open_other)
        finally:
            cursor.close()
    finally:
        first.autocommit = saved


def _between(info: Any, address: str | None, port: int | None) -> bool:
    """Whether the server sees another end than the client connected to (a proxy)."""
    if address is None or port is None:  # the server is reached over a Unix socket
        return True
    client_port = getattr(info, "port", None)
    if client_port is not None and int(client_port) != int(port):
        return True
    try:
        client_address = getattr(info, "hostaddr", "") or ""
    except Exception:  # libpq older than 12 cannot say
        client_address = ""
    return bool(client_address) and client_address != address


def _hand_over(first: Any, pid: int, open_other: Callable[[], Any]) -> str:
    """Return ``transaction`` if server sessions move between client connections within
    :data:`PROBE_TRIES` tries, else ``session``; ``first`` is a cursor of the first client
    connection, in autocommit, whose server session had pid ``pid``.

    Moved: a second client's transaction gets a server session the first client had (the
    pooler at rest: it hands out the session released last), or either client finds
    another pid than before (the pooler busy: other clients took those sessions). Neither
    can happen directly or through a session pooler.
    """
    try:
        other = open_other()
    except Exception as exc:  # cannot tell: behave as is safe through any pooler
        return _undecided(exc)
    firsts, others = {pid}, set()
    # A session pooler at capacity has no server session for the second client: it would
    # wait in the pooler's queue (PgBouncer's query_wait_timeout, 2 min). Cut it short.
    timer = threading.Timer(PROBE_WAIT, _cut, (other,))
    timer.daemon = True
    timer.start()
    try:
        for attempt in range(PROBE_TRIES):
            if attempt:
                first.execute(_PID)
                firsts.add(int(first.fetchone()[0]))
            cursor = other.cursor()
            try:
                cursor.execute(_PID)  # in a transaction (the driver's BEGIN)
                others.add(int(cursor.fetchone()[0]))
            finally:
                cursor.close()
                other.rollback()
            if firsts & others or len(firsts) > 1 or len(others) > 1:
                return "transaction"
        return "session"
    except Exception as exc:
        if "statement pooling" in str(exc):
            raise StoreError(
                "the store's URL goes through a statement pooler (PgBouncer pool_mode ="
                " statement), which cannot run the store's transactions: use pool_mode ="
                " transaction or session"
            ) from None
        return _undecided(exc)
    finally:
        timer.cancel()
        try:
            other.close()
        except Exception:  # closing a broken probe connection: nothing to release
            logger.debug("closing the pooler probe's connection failed", exc_info=True)


def _cut(conn: Any) -> None:
    """Shut the socket of psycopg connection ``conn`` down: its blocked call fails."""
    try:
        with socket.socket(fileno=os.dup(conn.fileno())) as dup:
            dup.shutdown(socket.SHUT_RDWR)
    except Exception:  # closed meanwhile: nothing to cut
        logger.debug("cutting the pooler probe's connection failed", exc_info=True)


def _undecided(exc: BaseException) -> str:
    logger.warning(
        "cannot tell whether a pooler in front of PostgreSQL pools transactions (%s);"
        " acting as through one (no session state, no LISTEN): set cronstore_pooler to"
        " say which",
        type(exc).__name__,
    )
    return "transaction"
