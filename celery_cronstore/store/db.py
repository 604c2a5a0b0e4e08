"""One database handle: the engine, what its dialect can do, and the store's clock.

:class:`~celery_cronstore.store.Store`, beat's claimer and the worker's guard all take
this handle, so none of them needs another.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import StaticPool

from celery_cronstore.store.engine import Clock, db_now, probe
from celery_cronstore.store.sqlite import WRITE_OPTION

__all__ = ["Database", "planner_off"]


class Database:
    """An engine with its probed dialect and the clock every decision is judged by."""

    def __init__(self, engine: sa.Engine, clock: Clock | None = None) -> None:
        self.engine = engine
        #: Replaces the database clock (tests only; see ``celery_cronstore.testing``).
        self.clock = clock
        self.dialect = probe(engine)

    @property
    def is_sqlite(self) -> bool:
        """Whether this is SQLite (no row locks: writers serialize with BEGIN IMMEDIATE)."""
        return self.dialect.name == "sqlite"

    @property
    def threads(self) -> bool:
        """Whether another thread may use a connection of its own alongside (not when the
        pool holds one shared connection, as for an in-memory SQLite database)."""
        return not isinstance(self.engine.pool, StaticPool)

    @contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        """Yield a connection inside a write transaction (commit on success)."""
        with self.engine.execution_options(**{WRITE_OPTION: True}).begin() as conn:
            yield conn

    def now(self, conn: sa.Connection | None = None) -> datetime:
        """Return the store's notion of now: the database clock (or the injected one)."""
        if conn is not None:
            return db_now(conn, self.clock)
        with self.engine.connect() as fresh:
            return db_now(fresh, self.clock)

    def by_key(self, conn: sa.Connection) -> None:
        """Have the rest of ``conn``'s transaction find rows through their indexes on
        PostgreSQL (``SET LOCAL enable_seqscan = off``): for transactions whose every
        statement writes or reads a list of rows by a unique key (the marks of a send).

        A table whose statistics are older than a burst (a fresh store, thousands of fires
        just claimed) looks small to the planner, which then reads all of it for each
        chunk instead of looking the keys up. A statement with no usable index still
        scans.
        """
        if self.dialect.name == "postgresql":
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")

    @contextmanager
    def in_index_order(self, conn: sa.Connection) -> Iterator[None]:
        """Run the statements inside with sorting off on PostgreSQL, for a read of the
        first rows in an index's order (the claim's first due rows by ``next_run``).

        A planner that expects few due rows (statistics from before a burst) fetched
        every due row and sorted them for each batch of 500: a burst of 100,000 cost each
        batch a sort of those still due. Without a sort the rows come in the index's order
        and the read stops at the batch. Only these statements: other plans of the
        transaction are left alone.
        """
        with planner_off(conn, "sort"):
            yield

    def locked(
        self,
        query: sa.Select[Any],
        *,
        read: bool = False,
        skip_locked: bool = False,
        of: Any = None,
    ) -> sa.Select[Any]:
        """Return ``query`` taking row locks where the dialect has them (not SQLite).

        ``skip_locked`` skips rows another transaction holds where the dialect can (else
        it waits for them). A locking read also sees the newest committed row under
        MariaDB's REPEATABLE READ.
        """
        if self.is_sqlite:
            return query
        if skip_locked and self.dialect.skip_locked:
            return query.with_for_update(skip_locked=True, of=of)
        return query.with_for_update(read=read, of=of)


@contextmanager
def planner_off(conn: sa.Connection, *methods: str) -> Iterator[None]:
    """Run the statements inside with the planner's ``methods`` off on PostgreSQL
    (``SET LOCAL enable_<method> = off``, back to the default after them); elsewhere as
    they are. For the few statements whose plan must not follow stale statistics."""
    if conn.dialect.name != "postgresql":
        yield
        return
    for method in methods:
        conn.exec_driver_sql(f"SET LOCAL enable_{method} = off")
    try:
        yield
    finally:
        for method in methods:
            conn.exec_driver_sql(f"SET LOCAL enable_{method} TO DEFAULT")
