"""The read half of :class:`~celery_cronstore.store.Store`: tasks, history, status, beats."""

from __future__ import annotations

import builtins
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from celery_cronstore.errors import TaskNotFoundError
from celery_cronstore.policy import timer_of
from celery_cronstore.records import Beat, Fire, PeriodicTask, Status
from celery_cronstore.store import audit
from celery_cronstore.store import failures as failure_reads
from celery_cronstore.store.audit import AuditEntry
from celery_cronstore.store.db import Database
from celery_cronstore.store.rows import FIRE_COLUMNS, owner_values, to_fire, to_task
from celery_cronstore.store.schema import beat, fire, periodic_task
from celery_cronstore.timers import fires

__all__ = ["StoreReads"]

_PT = periodic_task.c


class StoreReads:
    """Read periodic tasks and what became of their fires (each call: one short read)."""

    db: Database

    def now(self, conn: sa.Connection | None = None) -> datetime:
        """Return the store's notion of now: the database clock (or the injected one)."""
        return self.db.now(conn)

    def _row(self, conn: sa.Connection, name: str, *, lock: bool = False) -> sa.Row[Any]:
        query = sa.select(periodic_task).where(_PT.name == name)
        if lock:
            query = self.db.locked(query)
        row = conn.execute(query).first()
        if row is None:
            raise TaskNotFoundError(f"no periodic task named {name!r}")
        return row

    def get(self, name: str) -> PeriodicTask:
        """Return the periodic task called ``name`` (:class:`TaskNotFoundError` if none)."""
        with self.db.engine.connect() as conn:
            return to_task(self._row(conn, name))

    def list(
        self,
        *,
        owner: tuple[str, Any] | None = None,
        owner_type: str | None = None,
        enabled: bool | None = None,
        task: str | None = None,
        source: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[PeriodicTask]:
        """Return periodic tasks ordered by name, filtered by owner, enabled, task, source."""
        query = sa.select(periodic_task).order_by(_PT.name).offset(offset)
        if owner is not None:
            cols = owner_values(owner)
            query = query.where(
                _PT.owner_type == cols["owner_type"], _PT.owner_id == cols["owner_id"]
            )
        if owner_type is not None:
            query = query.where(_PT.owner_type == owner_type)
        if enabled is not None:
            query = query.where(_PT.enabled == enabled)
        if task is not None:
            query = query.where(_PT.task == task)
        if source is not None:
            query = query.where(_PT.source == source)
        if limit is not None:
            query = query.limit(limit)
        with self.db.engine.connect() as conn:
            return [to_task(row) for row in conn.execute(query)]

    # -- reading state --------------------------------------------------------------------

    def next_runs(
        self, name: str, n: int = 5, *, after: datetime | None = None
    ) -> builtins.list[datetime]:
        """Return the next ``n`` fire times of a task (from its planned next run or ``after``),
        nominal (before any jitter) and within its ``start_at`` and ``end_at``."""
        record = self.get(name)
        if not record.enabled:
            return []
        start = after if after is not None else self.now()
        if record.start_at is not None and start < record.start_at:
            start = record.start_at - timedelta(microseconds=1)
        times = fires(timer_of(record), start, limit=n)
        return [t for t in times if record.end_at is None or t <= record.end_at]

    def history(self, name: str, limit: int = 50) -> builtins.list[Fire]:
        """Return the task's ledger rows, newest fire first."""
        with self.db.engine.connect() as conn:
            row = self._row(conn, name)
            query = (
                sa.select(*FIRE_COLUMNS)
                .join_from(fire, periodic_task, fire.c.periodic_task_id == _PT.id)
                .where(fire.c.periodic_task_id == row.id)
                .order_by(fire.c.fire_time.desc())
                .limit(limit)
            )
            return [to_fire(r) for r in conn.execute(query)]

    def fire_by_task_id(self, task_id: str) -> Fire | None:
        """Return the ledger row published under Celery task id ``task_id``, if any."""
        query = (
            sa.select(*FIRE_COLUMNS)
            .join_from(fire, periodic_task, fire.c.periodic_task_id == _PT.id)
            .where(fire.c.task_id == task_id)
        )
        with self.db.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else to_fire(row)

    def status(self, name: str) -> Status:
        """Return the last known outcome of a task: state, time, node, error, result."""
        record = self.get(name)
        last = self.history(name, limit=1)
        newest = last[0] if last else None
        at = None
        if newest is not None:
            at = newest.finished_at or newest.started_at or newest.published_at or newest.claimed_at
        return Status(
            name=name,
            state=newest.state if newest else None,
            fire_time=newest.fire_time if newest else None,
            at=at,
            node=newest.node or newest.claimed_by if newest else None,
            reason=newest.reason if newest else None,
            result=newest.result if newest else None,
            next_run=record.next_run,
            last_run=record.last_run,
            error=record.error,
        )

    def audit_trail(
        self, *, task: str | None = None, limit: int = 100, before: int | None = None
    ) -> builtins.list[AuditEntry]:
        """Return who changed what, newest first (:func:`.audit.entries`): ``limit``
        entries (1 to 10,000), of one task if ``task`` is given, older than entry ``before``."""
        return audit.entries(self.db, task=task, limit=limit, before=before)

    def beats(self) -> builtins.list[Beat]:
        """Return every beat that ever ticked, newest tick first."""
        query = sa.select(
            beat.c.node,
            beat.c.started_at,
            beat.c.last_tick,
            beat.c.stalled_since,
            beat.c.clock_offset,
            beat.c.firing,
        ).order_by(beat.c.last_tick.desc())
        with self.db.engine.connect() as conn:
            return [Beat(*row) for row in conn.execute(query)]

    def failures(
        self,
        now: datetime | None = None,
        *,
        window: timedelta = failure_reads.WINDOWS[failure_reads.DEFAULT_WINDOW],
        limit: int = failure_reads.FAILURE_LIMIT,
    ) -> failure_reads.Failures:
        """Return the fires that ended badly in ``[now - window, now]``, grouped by task
        (see :func:`celery_cronstore.store.failures.failures`; ``now``: the store's)."""
        with self.db.engine.connect() as conn:
            at = now if now is not None else self.now(conn)
            return failure_reads.failures(conn, at, window=window, limit=limit)

    def summary(self, now: datetime | None = None) -> failure_reads.Summary:
        """Return how many tasks there are, enabled, in error, failing and late at ``now``
        (see :func:`celery_cronstore.store.failures.summary`)."""
        with self.db.engine.connect() as conn:
            return failure_reads.summary(conn, now if now is not None else self.now(conn))
