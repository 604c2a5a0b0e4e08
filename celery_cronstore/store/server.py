"""Which database server an engine's connections reach, and when that changes.

After a failover (or a restart) the connections an engine opens reach another server
process: a promoted standby, a restarted primary. Beat must then check that the ledger
still holds what it sent (``store.restore``) before it claims again. A failed tick says
so too, but not always: a pooled connection found dead by the pool's pre-ping is
replaced silently, and a beat whose every call went through fresh connections never
fails at all. :class:`ServerWatch` reads the server's identity on every new connection
(PostgreSQL: the postmaster's start time, address and port; one short query per
connection opened, none per statement) and counts the changes.
"""

from __future__ import annotations

import contextlib
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

__all__ = ["ServerWatch"]

_IDENTITY = "SELECT pg_postmaster_start_time(), inet_server_addr(), inet_server_port()"


class ServerWatch:
    """Count the times ``engine``'s new connections reached a different server than the
    one before (PostgreSQL; other databases never change: ``changes`` stays 0)."""

    def __init__(self, engine: sa.Engine) -> None:
        self._identity: tuple[Any, ...] | None = None
        #: How many times the server changed since this watch began.
        self.changes = 0
        if engine.dialect.name == "postgresql":
            event.listen(engine, "connect", self._on_connect)

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        identity: tuple[Any, ...] | None = None
        with contextlib.suppress(Exception):  # a connection that cannot say: no change
            cursor = dbapi_conn.cursor()
            try:
                cursor.execute(_IDENTITY)
                identity = tuple(cursor.fetchone() or ())
            finally:
                cursor.close()
                if not getattr(dbapi_conn, "autocommit", False):
                    dbapi_conn.rollback()
        if identity is None:
            return
        if self._identity is not None and identity != self._identity:
            self.changes += 1
        self._identity = identity
