"""Wake on change (PostgreSQL): a dedicated connection that LISTENs for edits.

Migration 0005's triggers send ``NOTIFY cronstore_changed`` when a commit inserts
periodic tasks or makes one fall due sooner. Beat waits on this connection's socket
instead of sleeping, so such an edit is seen within a round trip, not a poll interval.

The connection is psycopg 3's (the default PostgreSQL driver), outside the engine's pool,
in autocommit. It is opened on the first wait, not before (``lazy=True`` beats do no I/O).
When it breaks (a database restart), :meth:`Listener.wait` says it could not wait and
retries later with a growing back-off: beat sleeps plainly meanwhile and, once listening
again, looks at once (what changed while it was deaf was not notified).

LISTEN needs a session of its own, which a transaction pooler (PgBouncer's
``pool_mode = transaction``) does not give: there :func:`listener_for` listens on
``cronstore_listen_url`` (a direct URL of the same database) if set, else gives no
listener and beat polls every ``cronstore_poll_interval``.
"""

from __future__ import annotations

import logging
import select
import time
from typing import Any

import sqlalchemy as sa

from celery_cronstore.store.engine import create_store_engine, redact
from celery_cronstore.store.pooler import describe, mode_of

__all__ = ["CHANNEL", "Listener", "changes_line", "database_lines", "listener_for"]

logger = logging.getLogger("celery.beat")

#: The channel migration 0005's triggers notify.
CHANNEL = "cronstore_changed"
#: Shortest and longest wait (seconds) before listening again after a failure.
RETRY = (1.0, 30.0)


class Listener:
    """Wait for ``NOTIFY cronstore_changed`` on a connection of its own."""

    def __init__(self, engine: sa.Engine, *, own_engine: bool = False) -> None:
        self.engine = engine
        #: Whether :meth:`close` disposes the engine (one made for ``cronstore_listen_url``).
        self.own_engine = own_engine
        self._raw: Any = None  # the detached pool connection (its close() closes the socket)
        self._pgconn: Any = None  # psycopg's libpq connection object
        self._retry_at = 0.0
        self._failures = 0
        self.closed = False

    @property
    def listening(self) -> bool:
        """Whether the connection is open and subscribed."""
        return self._pgconn is not None

    def wait(self, timeout: float) -> float:
        """Wait up to ``timeout`` seconds for a notification; return the seconds still to
        sleep: 0 when one arrived or the time is up, more when listening is not possible
        now (the caller sleeps that plainly, at most until the next try to listen)."""
        if timeout <= 0 or self.closed:
            return max(timeout, 0.0)
        start = time.monotonic()
        if self._pgconn is None:
            if start < self._retry_at:  # sleep plainly, no longer than until the retry
                return min(timeout, self._retry_at - start)
            try:
                self._connect()
            except _Pooled:
                logger.warning(
                    "beat: %s goes through a transaction pooler: LISTEN cannot work there;"
                    " polling (set cronstore_listen_url to a direct URL)",
                    redact(self.engine.url),
                )
                self.close()
                return timeout
            except Exception as exc:  # any failure to listen only costs the fast wake
                self._fail("cannot listen", exc)
                return min(timeout, self._retry_at - start)
            return 0.0  # changes made while not listening were not notified: look now
        deadline = start + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return 0.0
                ready, _, _ = select.select([self._pgconn.socket], [], [], left)
                if ready and self._drain():
                    return 0.0
        except Exception as exc:  # the socket broke (restart, network): sleep the rest
            self._fail("stopped listening", exc)
            now = time.monotonic()
            return max(0.0, min(deadline, self._retry_at) - now)

    def drop(self) -> None:
        """Close the connection; the next :meth:`wait` opens another (the database failed)."""
        raw, self._raw, self._pgconn = self._raw, None, None
        if raw is not None:
            try:
                raw.close()
            except Exception:  # already broken: nothing left to release
                logger.debug("beat: closing the listen connection failed", exc_info=True)

    def close(self) -> None:
        """Close the connection for good (idempotent)."""
        self.closed = True
        self.drop()
        if self.own_engine:
            self.engine.dispose()

    def _connect(self) -> None:
        raw: Any = self.engine.raw_connection()
        raw.detach()  # a connection of its own: never handed to the pool's other users
        try:
            if mode_of(self.engine) == "transaction":  # decided as this one connected
                raise _Pooled
            self.engine.dialect.set_isolation_level(raw.dbapi_connection, "AUTOCOMMIT")
            driver = raw.dbapi_connection  # psycopg 3 needs no adapter: this is its Connection
            pgconn = getattr(driver, "pgconn", None)
            if pgconn is None:
                raise RuntimeError(f"driver {type(driver).__module__} is not psycopg 3")
            driver.execute(f"LISTEN {CHANNEL}")
        except BaseException:
            raw.close()
            raise
        self._raw, self._pgconn = raw, pgconn
        self._failures = 0
        logger.info("beat: listening for changes (LISTEN %s)", CHANNEL)

    def _drain(self) -> bool:
        """Read what the socket holds; return whether a notification was among it."""
        pgconn = self._pgconn
        pgconn.consume_input()  # raises when the server closed the connection
        woke = False
        while pgconn.notifies() is not None:
            woke = True
        if not woke and pgconn.status != 0:  # libpq CONNECTION_OK is 0
            raise ConnectionError("the listen connection is no longer usable")
        return woke

    def _fail(self, what: str, exc: BaseException) -> None:
        self.drop()
        self._failures += 1
        delay = min(RETRY[1], RETRY[0] * 2.0 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay
        # The message names the exception type and its first line only: no URL in it.
        logger.warning(
            "beat: %s for changes (%s); polling, trying again in %.0fs",
            what,
            type(exc).__name__,
            delay,
        )


class _Pooled(Exception):
    """The listen connection goes through a transaction pooler."""


def changes_line(
    mode: str, store_url: str | sa.URL, *, listen: bool, listen_url: str, poll_interval: float
) -> str:
    """Return how beat sees changes, for its start-up log and ``cronstore health``, given
    how the store at ``store_url`` reaches PostgreSQL (``mode``, one of
    :data:`.pooler.MODES`) and the settings ``cronstore_listen``, ``cronstore_listen_url``
    and ``cronstore_poll_interval``. No password is shown."""
    polling = f"polling every {poll_interval:g} s"
    if not listen:
        return f"{polling} (cronstore_listen is off)"
    if listen_url:
        return f"wake on change through {redact(listen_url)}"
    if mode == "transaction":
        return (
            f"{polling}: LISTEN cannot work through a transaction pooler; set cronstore_listen_url"
        )
    return f"wake on change through {redact(store_url)}"


def listener_for(
    engine: sa.Engine, *, listen: bool, listen_url: str, poll_interval: float
) -> tuple[Listener | None, str]:
    """Return the listener beat waits on (``None``: beat polls) for the store's PostgreSQL
    ``engine`` and the settings of :func:`changes_line`, and that function's line.

    Asks the server how ``engine`` reaches it if no connection has said yet. A listener
    on ``listen_url`` has an engine of its own (closed with it).
    """
    mode = mode_of(engine)
    line = changes_line(
        mode, engine.url, listen=listen, listen_url=listen_url, poll_interval=poll_interval
    )
    if not listen:
        return None, line
    if listen_url:
        own = create_store_engine(listen_url, pool_pre_ping=False)
        return Listener(own, own_engine=True), line
    if mode == "transaction":
        return None, line
    return Listener(engine), line


def database_lines(engine: sa.Engine, config: Any) -> list[str]:
    """Return ``cronstore health``'s line on how the store's ``engine`` reaches PostgreSQL
    and how beat sees changes with ``config`` (a :class:`~celery_cronstore.config.Config`),
    as a list: empty when the store is not PostgreSQL."""
    if engine.dialect.name != "postgresql":
        return []
    changes = changes_line(
        mode_of(engine),
        engine.url,
        listen=config.listen,
        listen_url=config.listen_url,
        poll_interval=config.poll_interval,
    )
    return [f"database: {describe(engine)}; changes: {changes}"]
