"""Beat's reads between claims: the idle look, the burst count, the recheck, housekeeping's.

:class:`Look` owns the connection beat may hold across ticks (PostgreSQL on the database
clock, ``store.idle``): on it each of these reads is one statement and no pool checkout.
Without it, each is a short read on the pool.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import sqlalchemy as sa

from celery_cronstore.store import idle
from celery_cronstore.store.db import Database
from celery_cronstore.store.engine import as_utc, now_expression
from celery_cronstore.store.heartbeat import BeatHeartbeat
from celery_cronstore.store.leases import IN_CHUNK
from celery_cronstore.store.schema import periodic_task

__all__ = ["PEEK_REUSE", "Look"]

_PT = periodic_task.c
#: Seconds a housekeeping look's earliest fire stands in for the idle look (the tick
#: that follows it asks nothing more).
PEEK_REUSE = 0.05


class Look:
    """Read for one beat process (``node``), on its held connection when it has one."""

    def __init__(self, db: Database, node: str, beats: BeatHeartbeat, *, hold: bool) -> None:
        self.db = db
        self.node = node
        #: Writes the heartbeat when housekeeping cannot be one statement.
        self.beats = beats
        #: PostgreSQL, database clock: the idle look and housekeeping's run as one statement
        #: each on a connection held across ticks (``store.idle``); :meth:`close` ends it.
        self.held: idle.HeldConnection | None = None
        #: The last housekeeping look's (monotonic time, database time, earliest fire).
        self._looked: tuple[float, datetime, datetime | None] | None = None
        if hold and db.dialect.name == "postgresql" and db.clock is None:
            dialect = db.engine.dialect
            self.held = idle.HeldConnection(db.engine)
            self._peek_sql = idle.peek_statement(dialect)
            self._count_sql = idle.count_statement(dialect)
            self._enabled_sql = idle.enabled_statement(dialect)
            self._chores_sql, self._chores_params = idle.chores_statement(dialect)

    def close(self) -> None:
        """Close the held connection, if any (idempotent)."""
        if self.held is not None:
            self.held.close()

    def peek(self) -> tuple[datetime, datetime | None]:
        """Return (database now, earliest planned fire of any enabled task or ``None``).

        Right after a :meth:`chores` look that found no lost work, its answer (its clock
        moved on by the time since) instead of another round trip.
        """
        looked, self._looked = self._looked, None
        if looked is not None:
            elapsed = time.monotonic() - looked[0]
            if 0 <= elapsed < PEEK_REUSE:
                return looked[1] + timedelta(seconds=elapsed), looked[2]
        if self.held is not None:
            clock, earliest_run = self.held.one(self._peek_sql)
            return as_utc(clock), None if earliest_run is None else as_utc(earliest_run)
        earliest = (
            sa.select(sa.func.min(_PT.next_run)).where(_PT.enabled == sa.true()).scalar_subquery()
        )
        clock = now_expression(self.db.dialect.name, self.db.clock)
        with self.db.engine.connect() as conn:
            if clock is None:  # SQLite or an injected clock: the host's notion of now
                return self.db.now(conn), conn.execute(sa.select(earliest)).scalar_one()
            # One round trip for both: the idle tick is this statement and nothing else.
            row = conn.execute(sa.select(clock, earliest)).one()
        return as_utc(row[0]), row[1]

    def count_due(self, until: datetime, cap: int) -> int:
        """Return how many enabled rows fall due by ``until`` (counting stops at ``cap``).

        Beat asks before a burst, to start claiming it early enough (``policy.lead``):
        one range of the due index, read no further than ``cap`` entries. On the held
        connection (PostgreSQL) one statement, as the idle look: no pool checkout.
        """
        if self.held is not None:
            params = {"until": idle.naive_utc(until), "cap": cap}
            return int(self.held.one(self._count_sql, params)[0])
        with self.db.engine.connect() as conn:
            return int(conn.execute(idle.due_count(until, cap)).scalar_one())

    def enabled_among(self, ids: list[int]) -> set[int]:
        """Return which of the periodic tasks ``ids`` exist, are enabled and are not paused
        (beat asks before it publishes a claim taken ahead: on the held connection, one
        statement)."""
        if self.held is not None:
            (found,) = self.held.one(self._enabled_sql, {"ids": ids})
            return set(found or ())
        enabled: set[int] = set()
        with self.db.engine.connect() as conn:
            for start in range(0, len(ids), IN_CHUNK):
                query = sa.select(_PT.id).where(
                    _PT.id.in_(ids[start : start + IN_CHUNK]),
                    _PT.enabled == sa.true(),
                    _PT.paused_at.is_(None),
                )
                enabled.update(conn.execute(query).scalars())
        return enabled

    def chores(
        self,
        started_at: datetime,
        stalled_since: datetime | None = None,
        clock_offset: float | None = None,
    ) -> idle.Chores:
        """Heartbeat and say which lost work waits, if known.

        On the held connection both are one statement; otherwise this is the heartbeat
        alone (:meth:`BeatHeartbeat.heartbeat`) and every kind of work is reported as
        possibly waiting.
        """
        if self.held is not None:
            params = {
                **self._chores_params,
                "node": self.node,
                "stalled": idle.naive_utc(stalled_since),
                "offset": clock_offset,
            }
            found = idle.read_chores(self.held.one(self._chores_sql, params))
            if found.beat_seen:
                if not (found.silent or found.unstarted or found.expired):
                    self._looked = (time.monotonic(), found.now, found.earliest)
                return found
        return idle.Chores(self.beats.heartbeat(started_at, stalled_since, clock_offset))
