"""Beat's idle path on PostgreSQL: one held connection, one statement per question.

An idle beat asks two things: what is the earliest planned fire (every wake), and is
there any lost work to take back (housekeeping, every few seconds; that look answers the
first question too, and whether the ledger holds anything old enough to prune). Through the pool, in
a transaction, each cost a checkout, ``BEGIN``, the query, ``ROLLBACK`` or ``COMMIT``:
four round trips for one answer. Here each is one statement on a connection beat keeps
(autocommit, outside the pool, so it is never shared), which psycopg 3 prepares after
its fifth execution. On an error the connection is closed and the error raised; the next
call opens another (a database restart costs one failed tick, as before).

Through a transaction pooler (:mod:`.pooler`) the connection holds no session state:
each statement runs in a transaction of its own that first sets the session limits and
``synchronous_commit`` for itself (``set_config(..., true)``), all four statements sent
as one pipeline (one round trip), and psycopg prepares nothing.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from celery_cronstore.store import leases
from celery_cronstore.store.engine import as_utc, driver_error
from celery_cronstore.store.pooler import pooling_of
from celery_cronstore.store.schema import beat, fire, periodic_task

__all__ = [
    "Chores",
    "HeldConnection",
    "chores_statement",
    "count_statement",
    "due_count",
    "enabled_statement",
    "peek_statement",
]


@dataclass(frozen=True)
class Chores:
    """What one housekeeping look found: the database time and which work is waiting."""

    now: datetime
    #: Started fires whose worker stopped heartbeating (``abandon_silent``).
    silent: bool = True
    #: Published CronTask fires whose start lease ran out (``redeliver_unstarted``).
    unstarted: bool = True
    #: Claims whose lease ran out unpublished (``reclaim_expired``).
    expired: bool = True
    #: Whether this beat's heartbeat row was updated (``False``: it must be inserted).
    beat_seen: bool = True
    #: Whether the two answers below were read (only the held connection's look has them).
    looked: bool = False
    #: The earliest planned fire of any enabled task (the idle look's answer) at ``now``.
    earliest: datetime | None = None
    #: The fire time of the ledger's oldest row by id (``None``: the ledger is empty).
    oldest_fire: datetime | None = None


class HeldConnection:
    """A DBAPI connection of its own, in autocommit, running pre-rendered statements."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self._raw: Any = None
        #: Through a transaction pooler: what each statement's transaction sets first.
        self._prelude: str | None = None

    def one(self, sql: str, params: dict[str, Any] | None = None) -> tuple[Any, ...]:
        """Run ``sql`` and return its one row; on any error close the connection, re-raise.

        Driver errors come back as from the store's engines: :class:`StoreUnavailableError`
        when the database cannot serve, else SQLAlchemy's ``DBAPIError``.
        """
        opening = self._raw is None
        try:
            if self._raw is None:
                self._raw = self._open()
            driver = self._raw.dbapi_connection
            if self._prelude is not None:
                row = _in_transaction(driver, self._prelude, sql, params)
            else:
                cursor = driver.cursor()
                try:
                    cursor.execute(sql, params)
                    row = cursor.fetchone()
                finally:
                    cursor.close()
        except self.engine.dialect.loaded_dbapi.Error as exc:
            self.close()
            raise driver_error(self.engine, sql, params, exc, opening=opening) from exc
        except BaseException:
            self.close()
            raise
        return tuple(row)

    def close(self) -> None:
        """Close the connection (idempotent); the next statement opens a new one."""
        raw, self._raw = self._raw, None
        if raw is not None:
            with contextlib.suppress(Exception):  # broken already: nothing to release
                raw.close()

    def _open(self) -> Any:
        raw: Any = self.engine.raw_connection()  # the engine's connect events set its limits
        raw.detach()
        try:
            self.engine.dialect.set_isolation_level(raw.dbapi_connection, "AUTOCOMMIT")
            # Its only write is the heartbeat: a crash may lose the last one, which costs
            # nothing, so it need not wait for the WAL flush (most of its time otherwise).
            pooling = pooling_of(self.engine)
            if pooling is not None and pooling.per_transaction:
                self._prelude = pooling.statement(synchronous_commit="off")
            else:
                self._prelude = None
                cursor = raw.dbapi_connection.cursor()
                cursor.execute("SET synchronous_commit = off")
                cursor.close()
        except BaseException:
            raw.close()
            raise
        return raw


def _in_transaction(driver: Any, prelude: str, sql: str, params: Any) -> tuple[Any, ...]:
    """Run ``prelude`` then ``sql`` in one transaction of their own on psycopg connection
    ``driver`` (in autocommit), sent as one pipeline; return ``sql``'s one row."""
    with driver.pipeline():
        driver.execute("BEGIN")
        driver.execute(prelude)
        cursor = driver.execute(sql, params)
        driver.execute("COMMIT")
    try:
        return tuple(cursor.fetchone())
    finally:
        cursor.close()


def _render(statement: sa.ClauseElement, dialect: sa.Dialect) -> str:
    return str(statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True}))


def _utc_now() -> sa.ColumnElement[Any]:
    # The columns hold naive UTC; the comparison must not depend on the session's TimeZone.
    return sa.func.timezone("UTC", sa.func.clock_timestamp(), type_=sa.DateTime())


def peek_statement(dialect: sa.Dialect) -> str:
    """Return the SQL of the idle look: the database's clock and the earliest next run."""
    earliest = (
        sa.select(sa.func.min(periodic_task.c.next_run))
        .where(periodic_task.c.enabled == sa.true())
        .scalar_subquery()
    )
    return _render(sa.select(sa.func.clock_timestamp(), earliest), dialect)


def due_count(until: Any, cap: Any) -> sa.Select[int]:
    """A burst's count: enabled rows due by ``until``, counting stops at ``cap`` (one range
    of the due index). Values, or bind parameters (:func:`count_statement`)."""
    due = (
        sa.select(sa.literal_column("1"))
        .where(periodic_task.c.enabled == sa.true(), periodic_task.c.next_run <= until)
        .limit(cap)
        .subquery()
    )
    return sa.select(sa.func.count()).select_from(due)


def count_statement(dialect: sa.Dialect) -> str:
    """Return the SQL of :func:`due_count` for the held connection. Parameters: ``until``
    (naive UTC), ``cap``."""
    until = sa.bindparam("until", type_=sa.DateTime())
    return _render(due_count(until, sa.bindparam("cap", type_=sa.Integer())), dialect)


def enabled_statement(dialect: sa.Dialect) -> str:
    """Return the SQL that reads which of the periodic tasks ``ids`` (a list) exist, are
    enabled and are not paused, as one array (``NULL``: none)."""
    # BIGINT, the id's own type: an INTEGER[] made PostgreSQL filter every enabled row
    # against the whole array (49 ms for 1,700 ids among 10,000 rows, 3.7 ms as BIGINT[]).
    ids = sa.bindparam("ids", type_=postgresql.ARRAY(sa.BigInteger()))
    query = sa.select(sa.func.array_agg(periodic_task.c.id)).where(
        periodic_task.c.id == sa.any_(ids),
        periodic_task.c.enabled == sa.true(),
        periodic_task.c.paused_at.is_(None),
    )
    return _render(query, dialect)


def chores_statement(dialect: sa.Dialect) -> tuple[str, dict[str, Any]]:
    """Return the SQL (and its constant parameters) of housekeeping's look, in one statement:

    the heartbeat (``UPDATE ... RETURNING``), whether any lost work waits, from the same
    conditions the writes use (:mod:`~celery_cronstore.store.leases`), the idle look's
    earliest planned fire (so the tick after it need not ask again) and the fire time of
    the ledger's oldest row (so the pruner starts a pass only when there is something old).
    Parameters to add: ``node``, ``stalled`` (naive UTC or ``None``), ``offset``.
    """
    now = _utc_now()
    heartbeat = (
        sa.update(beat)
        .where(beat.c.node == sa.bindparam("node", ""))
        .values(
            last_tick=now,
            stalled_since=sa.bindparam("stalled", None, type_=sa.DateTime()),
            clock_offset=sa.bindparam("offset", None, type_=sa.Float()),
        )
        .returning(beat.c.last_tick)
        .cte("heartbeat")
    )
    earliest = (
        sa.select(sa.func.min(periodic_task.c.next_run))
        .where(periodic_task.c.enabled == sa.true())
        .scalar_subquery()
    )
    oldest = sa.select(fire.c.fire_time).order_by(fire.c.id).limit(1).scalar_subquery()
    statement = sa.select(
        sa.select(heartbeat.c.last_tick).scalar_subquery(),
        sa.func.clock_timestamp(),
        sa.exists().where(leases.silent(now)),
        sa.exists().where(leases.unstarted(now)),
        sa.exists().where(leases.unpublished(now)),
        earliest,
        oldest,
    )
    compiled = statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    return str(compiled), dict(compiled.params)


def read_chores(row: tuple[Any, ...]) -> Chores:
    """Return the :class:`Chores` of a row of :func:`chores_statement`."""
    last_tick, clock, silent, unstarted, expired, earliest, oldest = row
    return Chores(
        as_utc(clock),
        bool(silent),
        bool(unstarted),
        bool(expired),
        last_tick is not None,
        looked=True,
        earliest=None if earliest is None else as_utc(earliest),
        oldest_fire=None if oldest is None else as_utc(oldest),
    )


def naive_utc(value: datetime | None) -> datetime | None:
    """Return an aware instant as the naive UTC the timestamp columns hold."""
    if value is None:
        return None
    return value.astimezone(timezone.utc).replace(tzinfo=None)
