"""Give up a database wait that no server timeout can end: cut the link.

The server bounds every statement of beat's sessions (``session_timeout``: a statement,
a lock wait, an idle transaction), but only a statement it received. On a link that
stops carrying bytes (a paused proxy, a frozen router, a partition a nearby host still
acknowledges at the TCP level) beat waits for an answer that never comes: libpq has no
read timeout, and keepalives and ``tcp_user_timeout`` only help once the peer stops
acknowledging. :class:`Links` keeps the connections an engine has handed out (pool
checkouts, and those detached from the pool such as beat's held connection) so that beat's
watchdog can shut their sockets down once a tick has waited longer than the server would
ever let a statement run: the blocked call then fails like a lost connection, and beat
backs off and retries as on any outage.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

__all__ = ["Links"]


class Links:
    """The open DBAPI connections ``engine`` has handed out, and a way to cut them."""

    def __init__(self, engine: sa.Engine) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, Any] = {}
        pool = engine.pool
        event.listen(pool, "checkout", self._out)
        event.listen(pool, "checkin", self._back)
        event.listen(pool, "close", self._back)
        event.listen(pool, "close_detached", self._gone)

    def _out(self, dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        with self._lock:
            self._open[id(dbapi_conn)] = dbapi_conn

    def _back(self, dbapi_conn: Any, _record: Any) -> None:
        with self._lock:
            self._open.pop(id(dbapi_conn), None)

    def _gone(self, dbapi_conn: Any) -> None:
        with self._lock:
            self._open.pop(id(dbapi_conn), None)

    def cut(self) -> int:
        """Shut down the socket of every connection handed out; return how many.

        Shutting down (not closing) the socket wakes the thread blocked on it with an
        end of file; the driver reports a lost connection and the pool drops it.
        """
        with self._lock:
            handed = list(self._open.values())
        done = 0
        for conn in handed:
            fd = _fileno(conn)
            if fd is None:
                continue
            with contextlib.suppress(OSError):
                dup = socket.socket(fileno=os.dup(fd))
                try:
                    dup.shutdown(socket.SHUT_RDWR)
                    done += 1
                finally:
                    dup.close()
        return done


def _fileno(conn: Any) -> int | None:
    """Return the socket's file descriptor of a psycopg or PyMySQL connection, if open."""
    try:
        if hasattr(conn, "pgconn"):  # psycopg 3
            return None if conn.closed else int(conn.fileno())
        sock = getattr(conn, "_sock", None)  # PyMySQL
        return None if sock is None else int(sock.fileno())
    except Exception:  # closed meanwhile: nothing to cut
        return None
