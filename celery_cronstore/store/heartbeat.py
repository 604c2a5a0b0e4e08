"""Beat's heartbeat: one row per beat process in ``cronstore_beat`` (``cronstore health``),
and health's own look at what the store owes (:func:`look_backlog`)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from celery_cronstore.errors import StoreUnavailableError
from celery_cronstore.policy.health import Backlog
from celery_cronstore.states import FireState
from celery_cronstore.store.db import Database
from celery_cronstore.store.engine import as_utc
from celery_cronstore.store.schema import beat, fire, periodic_task

__all__ = ["WAITING", "BeatHeartbeat", "look_backlog"]

_PT = periodic_task.c
_F = fire.c


class BeatHeartbeat:
    """Record that the beat process ``node`` ticks."""

    def __init__(self, db: Database, node: str) -> None:
        self.db = db
        self.node = node

    def heartbeat(
        self,
        started_at: datetime,
        stalled_since: datetime | None = None,
        clock_offset: float | None = None,
        *,
        firing: bool = True,
    ) -> datetime:
        """Record that this beat ticked (for ``cronstore health``); return the db time.

        ``stalled_since``: since when it has had due fires it could neither claim nor
        publish (``None``: it keeps up); ``clock_offset``: its host's clock minus the
        database's, in seconds; ``firing``: ``False`` when it was started with firing off.
        """
        with self.db.begin() as conn:
            now = self.db.now(conn)
            values = {
                "last_tick": now,
                "stalled_since": stalled_since,
                "clock_offset": clock_offset,
                "firing": firing,
            }
            result = conn.execute(sa.update(beat).where(beat.c.node == self.node).values(values))
            if result.rowcount == 0:
                conn.execute(
                    sa.insert(beat).values(node=self.node, started_at=started_at, **values)
                )
        return now


#: Fire states of a claim not yet published: claimed, and being handed to the broker.
WAITING = (FireState.CLAIMED, FireState.SENDING)
#: PostgreSQL SQLSTATEs and MySQL/MariaDB error numbers of a statement that ran out of
#: time: a lock timeout, a statement timeout; a lock wait timeout, a query interrupted by
#: max_statement_time (MariaDB) or max_execution_time (MySQL).
_TIMED_OUT_STATES = frozenset({"55P03", "57014"})
_TIMED_OUT_ERRNOS = frozenset({1205, 1969, 3024})


def look_backlog(db: Database, *, limit: float, timeout: float) -> Backlog:
    """Return the store's backlog: enabled tasks due more than ``limit`` seconds ago that no
    beat claimed, and claims whose fire time is more than ``limit`` ago and that are still
    not published (``cronstore health``).

    The look waits at most ``timeout`` seconds for a lock or a statement (PostgreSQL's
    ``lock_timeout``/``statement_timeout``, MariaDB's ``lock_wait_timeout``/
    ``max_statement_time``); when it runs out, the backlog says so in ``blocked`` (a locked
    table blocks beat's claims the same way). A database that cannot be reached raises
    :class:`StoreUnavailableError` as every store call does.
    """
    try:
        with db.engine.connect() as conn:
            restore = None
            try:
                with conn.begin():
                    restore = _limit_waits(conn, timeout)
                    now = db.now(conn)
                    cutoff = now - timedelta(seconds=limit)
                    due = conn.execute(
                        sa.select(sa.func.count(), sa.func.min(_PT.next_run)).where(
                            _PT.enabled == sa.true(), _PT.error.is_(None), _PT.next_run < cutoff
                        )
                    ).one()
                    claims = conn.execute(
                        sa.select(sa.func.count(), sa.func.min(_F.fire_time)).where(
                            _F.state.in_(WAITING), _F.fire_time < cutoff
                        )
                    ).one()
                if restore:
                    conn.exec_driver_sql(restore)
                    conn.commit()
            except BaseException:
                if restore:  # the session keeps health's short limits: never reuse it
                    conn.invalidate()
                raise
    except StoreUnavailableError as exc:
        if exc.unreachable or not _timed_out(exc):
            raise
        return Backlog(db.now() if db.clock is not None else _host_now(), blocked=exc.reason)
    return Backlog(
        now,
        overdue=int(due[0]),
        oldest_due=None if due[1] is None else as_utc(due[1]),
        unpublished=int(claims[0]),
        oldest_claim=None if claims[1] is None else as_utc(claims[1]),
    )


def _limit_waits(conn: sa.Connection, timeout: float) -> str | None:
    """Bound this transaction's waits; return the SQL that undoes it afterwards, if any."""
    name = conn.dialect.name
    millis = max(1, int(timeout * 1000))
    if name == "postgresql":  # SET LOCAL: gone with the transaction
        # The statement limit a second longer: a lock wait is then said as one.
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = {millis}")
        conn.exec_driver_sql(f"SET LOCAL statement_timeout = {millis + 1000}")
        return None
    if name in ("mysql", "mariadb"):
        whole = max(1, math.ceil(timeout))
        names = ["lock_wait_timeout", "innodb_lock_wait_timeout"]
        values = [f"lock_wait_timeout = {whole}", f"innodb_lock_wait_timeout = {whole}"]
        if getattr(conn.dialect, "is_mariadb", False):
            names.append("max_statement_time")
            values.append(f"max_statement_time = {whole + 1}")
        else:
            names.append("max_execution_time")
            values.append(f"max_execution_time = {(whole + 1) * 1000}")
        conn.exec_driver_sql("SET SESSION " + ", ".join(values))
        return "SET SESSION " + ", ".join(f"{n} = DEFAULT" for n in names)
    return None  # SQLite: readers never wait for a writer (WAL)


def _timed_out(exc: StoreUnavailableError) -> bool:
    """Whether ``exc`` is a statement that ran out of time (not a lost database)."""
    cause: Any = exc.__cause__
    orig = getattr(cause, "orig", cause)
    if getattr(orig, "sqlstate", None) in _TIMED_OUT_STATES:
        return True
    args: tuple[Any, ...] = tuple(getattr(orig, "args", ()))
    return bool(args) and args[0] in _TIMED_OUT_ERRNOS


def _host_now() -> datetime:
    return datetime.now(timezone.utc)
