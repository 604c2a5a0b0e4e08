"""Beat's side of the ledger: find due rows, claim each fire once.

One tick (see ``docs/replicas.md``):

1. ``peek``: the database clock and the earliest ``next_run`` (one indexed look-up).
2. ``claim_due``: in one short transaction, lock due rows (``FOR UPDATE SKIP LOCKED``
   where the dialect has it; SQLite serializes writers with ``BEGIN IMMEDIATE``), ask
   :func:`celery_cronstore.policy.plan` what becomes of each, and write it: ledger rows
   (unique per task and fire time) and each row's new ``next_run``.
3. The scheduler publishes each claim under its deterministic task id.
4. ``mark_published``, fenced on claimer and attempt; lapsed leases are taken over and
   published again, same id (``leases``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from celery_cronstore import faults, policy
from celery_cronstore.errors import TimerError, TimerSearchError
from celery_cronstore.records import EPOCH, Claim, PeriodicTask
from celery_cronstore.store import bulk, idle
from celery_cronstore.store.engine import as_utc, now_expression
from celery_cronstore.store.leases import LeaseKeeper
from celery_cronstore.store.rows import to_task
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.store.store import Store

__all__ = ["Claimer", "TickResult"]

logger = logging.getLogger("celery.beat")

_PT = periodic_task.c
_F = fire.c
#: Seconds a housekeeping look's earliest fire stands in for the idle look (the tick
#: that follows it asks nothing more).
PEEK_REUSE = 0.05


@dataclass(frozen=True)
class TickResult:
    """What one ``claim_due`` call did."""

    now: datetime
    claims: list[Claim]
    rows: int
    errors: list[tuple[str, str]]  # (task name, reason) of rows put in error this call
    #: Ledger entries written: (state, task name, fires each stands for), for metrics.
    recorded: list[tuple[str, str, int]] = field(default_factory=list)
    #: Whether the batch lost a race and was rolled back (it is retried at once).
    conflict: bool = False


class Claimer(LeaseKeeper):
    """Claims due fires for one beat process (``node``) in a :class:`Store`."""

    def __init__(
        self,
        store: Store,
        node: str,
        *,
        lease: float = 30.0,
        batch_size: int = 500,
        misfire_grace: float = 30.0,
        allowlist: tuple[str, ...] = (),
        task_check: Callable[[str], str | None] | None = None,
        call_check: Callable[[str, list[Any], dict[str, Any]], str | None] | None = None,
        start_timeout: float | None = None,
        max_redeliveries: int = 3,
        hold: bool = False,
    ) -> None:
        self.store = store
        self.db = store.db
        self.node = node
        self.lease = timedelta(seconds=lease)
        self.batch_size = batch_size
        self.misfire_grace = timedelta(seconds=misfire_grace)
        self.allowlist = allowlist
        #: Seconds a watched published fire may wait for its start before it is
        #: published again (``None``: never), and how often that may happen.
        self.start_timeout = start_timeout
        self.max_redeliveries = max_redeliveries
        #: Extra rule on task names (beat: "is it registered?"); returns a refusal reason.
        self.task_check = task_check
        #: Extra rule on a call (beat: "do the args fit the task?"); returns a reason.
        self.call_check = call_check
        #: PostgreSQL, database clock: the idle look and housekeeping's run as one statement
        #: each on a connection held across ticks (``store.idle``); :meth:`close` ends it.
        self._held: idle.HeldConnection | None = None
        #: The last housekeeping look's (monotonic time, database time, earliest fire).
        self._looked: tuple[float, datetime, datetime | None] | None = None
        if hold and self.db.dialect.name == "postgresql" and self.db.clock is None:
            self._held = idle.HeldConnection(self.db.engine)
            self._peek_sql = idle.peek_statement(self.db.engine.dialect)
            self._count_sql = idle.count_statement(self.db.engine.dialect)
            self._enabled_sql = idle.enabled_statement(self.db.engine.dialect)
            self._chores_sql, self._chores_params = idle.chores_statement(self.db.engine.dialect)

    def close(self) -> None:
        """Close the held connection, if any (idempotent)."""
        if self._held is not None:
            self._held.close()

    # -- the idle path --------------------------------------------------------------------

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
        if self._held is not None:
            clock, earliest_run = self._held.one(self._peek_sql)
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
        if self._held is not None:
            params = {"until": idle.naive_utc(until), "cap": cap}
            return int(self._held.one(self._count_sql, params)[0])
        with self.db.engine.connect() as conn:
            return int(conn.execute(idle.due_count(until, cap)).scalar_one())

    def enabled_among(self, ids: list[int]) -> set[int]:
        """Return which of the periodic tasks ``ids`` exist and are enabled (beat asks
        before it publishes a claim taken ahead: on the held connection, one statement)."""
        if self._held is None:
            return super().enabled_among(ids)
        (found,) = self._held.one(self._enabled_sql, {"ids": ids})
        return set(found or ())

    def chores(
        self,
        started_at: datetime,
        stalled_since: datetime | None = None,
        clock_offset: float | None = None,
    ) -> idle.Chores:
        """Heartbeat (see :meth:`heartbeat`) and say which lost work waits, if known.

        On the held connection both are one statement; otherwise this is the heartbeat
        alone and every kind of work is reported as possibly waiting.
        """
        if self._held is not None:
            params = {
                **self._chores_params,
                "node": self.node,
                "stalled": idle.naive_utc(stalled_since),
                "offset": clock_offset,
            }
            found = idle.read_chores(self._held.one(self._chores_sql, params))
            if found.beat_seen:
                if not (found.silent or found.unstarted or found.expired):
                    self._looked = (time.monotonic(), found.now, found.earliest)
                return found
        return idle.Chores(self.heartbeat(started_at, stalled_since, clock_offset))

    # -- claiming -------------------------------------------------------------------------

    def claim_due(self, ahead: timedelta = timedelta(0)) -> TickResult:
        """Claim one batch of due fires in one transaction; return what must be published.

        ``ahead``: also claim the fires due within that much of now, each planned as of its
        own fire time (beat publishes them at that time: its claim's transaction is done
        before). The claims come in fire-time order.

        A batch that lost a race with another writer is rolled back whole and reported as
        rows seen with nothing claimed, so the caller looks again at once.
        """
        try:
            return self._claim_batch(ahead)
        except _Conflict as exc:
            logger.info("beat: %s; looking again", exc)
            return TickResult(self.db.now(), [], 1, [], conflict=True)

    def problem(self, task: PeriodicTask, row: sa.Row[Any]) -> str | None:
        """Return why ``task`` (read as ``row``) must not be planned, or ``None`` if it may.

        The refusals of a send (JSON columns, options, allowlist, ``task_check``) and a
        timer that does not parse; a reason names the fix.
        """
        refused = self.refusal(task, row)
        if refused is not None:
            return refused
        try:
            policy.timer_of(task)
        except (TimerError, ValueError) as exc:
            return str(exc)
        return None

    def _claim_batch(self, ahead: timedelta) -> TickResult:
        with self.db.begin() as conn:
            now = self.db.now(conn)
            query = (
                sa.select(periodic_task)
                .where(_PT.enabled == sa.true(), _PT.next_run <= now + ahead)
                .order_by(_PT.next_run)
                .limit(self.batch_size)
            )
            rows = conn.execute(self.db.locked(query, skip_locked=True)).all()
            batch = _Batch()
            for row in rows:
                self._plan_row(conn, row, now, batch)
            self._write_ledger(conn, batch, now)
            self._write_rows(conn, batch)
            faults.hit("before_claim_commit")
        return TickResult(now, batch.claims(), len(rows), batch.errors, batch.recorded())

    def _plan(
        self,
        conn: sa.Connection,
        task: PeriodicTask,
        now: datetime,
        taken: frozenset[datetime] = frozenset(),
    ) -> policy.Plan:
        return policy.plan(
            task,
            policy.timer_of(task),
            now,
            lambda: self._running(conn, task.id, now),
            node=self.node,
            lease=self.lease,
            grace=self.misfire_grace,
            taken=taken,
        )

    def _plan_row(
        self, conn: sa.Connection, row: sa.Row[Any], now: datetime, batch: _Batch
    ) -> None:
        """Plan one due row; whatever is wrong with it, only this row is affected."""
        try:
            task = to_task(row)
            at = _as_of(task, now)
            reason = self.problem(task, row)
            if reason is None:
                batch.items.append(_Item(task, self._plan(conn, task, at)))
                return
        except SQLAlchemyError:
            raise
        except TimerSearchError as exc:  # a timer that cannot answer near this instant
            past = policy.plan_past(
                task, policy.timer_of(task), at, exc, node=self.node, lease=self.lease
            )
            if past is not None:
                logger.warning("beat: periodic task %r: %s; planned past it", task.name, exc)
                batch.items.append(_Item(task, past))
                return
            reason = str(exc)
        except TimerError as exc:
            reason = str(exc)
        except Exception as exc:  # one hostile row must never stop every other task
            logger.warning("beat: cannot plan periodic task row %r", row.id, exc_info=True)
            reason = f"cannot plan this row ({type(exc).__name__}: {exc})"
        batch.fail(row, reason, self.node)

    def _running(self, conn: sa.Connection, task_id: int, now: datetime) -> policy.Running | None:
        # A started fire counts while its worker's heartbeats keep its lease ahead of now
        # (a lapsed one is about to be recorded abandoned); a claimed one until published.
        query = sa.select(_F.fire_time, _F.state).where(
            _F.periodic_task_id == task_id,
            _F.state.in_(policy.BEAT_IN_FLIGHT),
            sa.or_(_F.state == "claimed", _F.lease_until > now),
        )
        # No ORDER BY ... LIMIT 1: to skip the sort, planners walk the task's whole history
        # in the (periodic_task_id, fire_time) key. A task has few fires in flight: read
        # them all from ix_cronstore_fire_task_state and keep the newest.
        rows = conn.execute(query).all()
        return max(((r.fire_time, r.state) for r in rows), default=None)

    def _write_ledger(self, conn: sa.Connection, batch: _Batch, now: datetime) -> None:
        """Insert the batch's ledger rows; a fire already in the ledger costs only its task.

        The whole batch goes in one statement inside a savepoint. If the ledger's unique
        key refuses it (a row whose ``next_run`` points at a fire already recorded), each
        task's rows go in on their own: a task whose fires collide is planned again past
        the recorded ones, and the rest of the batch is untouched.
        """
        rows = batch.ledger()
        if not rows:
            return
        try:
            with conn.begin_nested():
                bulk.insert(conn, fire, rows)
            return
        except IntegrityError:
            logger.warning("beat: some due fires are already in the ledger; planning past them")
        for index, item in enumerate(batch.items):
            batch.items[index] = self._insert_apart(conn, item, _as_of(item.task, now))
        for _, entry in batch.failed_entries:
            with contextlib.suppress(IntegrityError), conn.begin_nested():
                conn.execute(sa.insert(fire).values(**entry.row()))

    def _insert_apart(self, conn: sa.Connection, item: _Item, now: datetime) -> _Item:
        plan = item.plan
        for _attempt in range(3):
            try:
                with conn.begin_nested():
                    if plan.entries:
                        conn.execute(sa.insert(fire), [e.row() for e in plan.entries])
                return _Item(item.task, plan)
            except IntegrityError:
                taken = self._taken(conn, item.task, now)
                plan = self._plan(conn, item.task, now, taken)
        reason = "its due fires collide with the fire ledger (edit the task to plan it again)"
        return _Item(item.task, policy.Plan(policy.RowUpdate(next_run=None, error=reason)))

    def _taken(self, conn: sa.Connection, task: PeriodicTask, now: datetime) -> frozenset[datetime]:
        """Return the fire times of ``task`` already in the ledger that its walk could meet."""
        since = min(filter(None, (task.next_run, task.last_fire)), default=now)
        query = sa.select(_F.fire_time).where(
            _F.periodic_task_id == task.id, _F.fire_time >= since, _F.fire_time <= now
        )
        return frozenset(conn.execute(query).scalars())

    def _write_rows(self, conn: sa.Connection, batch: _Batch) -> None:
        updates = batch.updates()
        if not updates:
            return
        params: Any = updates
        if bulk.set_based(conn):  # one statement for the whole batch
            values = bulk.unnest(_UPDATE_TYPES)
            params = bulk.columns(updates)
            column: Callable[[str], Any] = values.c.__getitem__
        else:
            column = lambda key: sa.bindparam(key, type_=_UPDATE_TYPES[key])  # noqa: E731
        stmt = (
            sa.update(periodic_task)
            .where(_PT.id == column("b_id"), _PT.version == column("b_version"))
            .values(
                next_run=column("b_next"),
                error=column("b_error"),
                last_fire=sa.func.coalesce(column("b_last"), _PT.last_fire),
                total_run_count=_PT.total_run_count + column("b_runs"),
                version=_PT.version + 1,
            )
        )
        result = conn.execute(stmt, params)
        if result.rowcount not in (-1, len(updates)):
            # Another writer changed a row we hold: give the whole batch back.
            raise _Conflict("a due row changed while it was being claimed")


#: The values each due row's update binds (``_Batch.updates``), by their column's type.
_UPDATE_TYPES: dict[str, sa.types.TypeEngine[Any]] = {
    "b_id": _PT.id.type,
    "b_version": _PT.version.type,
    "b_next": _PT.next_run.type,
    "b_error": _PT.error.type,
    "b_last": _PT.last_fire.type,
    "b_runs": _PT.total_run_count.type,
}


def _as_of(task: PeriodicTask, now: datetime) -> datetime:
    """The instant a due row is planned as of: now, or its own next run when claimed
    ahead of it (``claim_due(ahead=...)``)."""
    due = task.next_run
    return due if due is not None and due > now else now


class _Conflict(Exception):
    """A claim transaction lost a race; it was rolled back and will be retried."""


@dataclass(frozen=True)
class _Item:
    """One due task and what policy decided for it."""

    task: PeriodicTask
    plan: policy.Plan


@dataclass
class _Batch:
    """What one claim transaction plans: each due task's plan, and the rows in error."""

    items: list[_Item] = field(default_factory=list)
    failed: list[tuple[int, int, policy.RowUpdate]] = field(default_factory=list)
    failed_entries: list[tuple[str, policy.Entry]] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)

    def fail(self, row: sa.Row[Any], reason: str, node: str) -> None:
        """Put the row in error (no next run) with ``reason``; beat logs it once.

        A fire that was due is recorded ``dropped`` with the same reason: the task's
        history says why it did not run.
        """
        m = row._mapping
        self.failed.append((m["id"], m["version"], policy.RowUpdate(next_run=None, error=reason)))
        self.errors.append((str(m["name"]), reason))
        due = m["next_run"]
        if isinstance(due, datetime) and due != EPOCH and isinstance(m["id"], int):
            self.failed_entries.append(
                (
                    str(m["name"]),
                    policy.Entry(
                        periodic_task_id=m["id"],
                        fire_time=due,
                        task_id=policy.fire_task_id(m["id"], str(m["name"]), due),
                        state="dropped",
                        reason=f"not published: {reason}",
                        claimed_by=node,
                        attempts=0,
                    ),
                )
            )

    def ledger(self) -> list[dict[str, Any]]:
        rows = [entry.row() for item in self.items for entry in item.plan.entries]
        rows.extend(entry.row() for _, entry in self.failed_entries)
        return rows

    def recorded(self) -> list[tuple[str, str, int]]:
        rows = [(e.state, i.task.name, e.fire_count) for i in self.items for e in i.plan.entries]
        rows.extend((e.state, name, e.fire_count) for name, e in self.failed_entries)
        return rows

    def claims(self) -> list[Claim]:
        """The claims in fire-time order (a task's backlog may span other tasks' fires)."""
        claims = [claim for item in self.items for claim in item.plan.claims]
        claims.sort(key=lambda claim: claim.fire_time)
        return claims

    def updates(self) -> list[dict[str, Any]]:
        rows = [(i.task.id, i.task.version, i.plan.update) for i in self.items]
        rows.extend(self.failed)
        return [
            {
                "b_id": row_id,
                "b_version": version,
                "b_next": update.next_run,
                "b_error": update.error,
                "b_last": update.last_fire,
                "b_runs": update.runs,
            }
            for row_id, version, update in rows
        ]
