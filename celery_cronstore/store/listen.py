"""Wake on change (PostgreSQL): a dedicated connection that LISTENs for edits.

Migration 0005's triggers send ``NOTIFY cronstore_changed`` when a commit inserts
periodic tasks or makes one fall due sooner. Beat waits on this connection's socket
instead of sleeping, so such an edit is seen within a round trip, not a poll interval.

The connection is psycopg 3's (the default PostgreSQL driver), outside the engine's pool,
in autocommit. It is opened on the first wait, not before (``lazy=True`` beats do no I/O).
When it breaks (a database restart), :meth:`Listener.wait` says it could not wait and
retries later with a growing back-off: beat sleeps plainly meanwhile and, once listening
again, looks at once (what changed while it was deaf was not notified).
"""

from __future__ import annotations

import logging
import select
import time
from typing import Any

import sqlalchemy as sa

__all__ = ["CHANNEL", "Listener"]

logger = logging.getLogger("celery.beat")

#: The channel migration 0005's triggers notify.
CHANNEL = "cronstore_changed"
#: Shortest and longest wait (seconds) before listening again after a failure.
RETRY = (1.0, 30.0)


class Listener:
    """Wait for ``NOTIFY cronstore_changed`` on a connection of its own."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
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

    def _connect(self) -> None:
        raw: Any = self.engine.raw_connection()
        raw.detach()  # a connection of its own: never handed to the pool's other users
        try:
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
