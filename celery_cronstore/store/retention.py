"""Bounded history: prune the fire ledger and delete a removed task's rows in batches.

Every write here is one short transaction over at most ``batch`` rows, so neither beat's
claims (SQLite: the one write lock) nor a worker's start ever waits behind a long delete.
What may be deleted is :mod:`celery_cronstore.policy.retention`'s rule; this module reads
the rows it needs and deletes what the rule returns.

A prune *pass* walks the ledger in primary-key order from its oldest row. Rows are
inserted when their fire is claimed or recorded, so key order is write order, and a
batch whose every row fires after the cutoff means the rest of the table was written
after it too: the pass ends there. No index on the fire time is needed (each extra index
on the ledger costs every claim, publish and start). A row recorded late for an old fire
time (a backfilled missed range) goes in the first pass that reaches it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from celery_cronstore.policy import retention as rule
from celery_cronstore.states import IN_FLIGHT, FireState
from celery_cronstore.store import alerts, audit
from celery_cronstore.store.db import Database
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.store.types import UTCDateTime

__all__ = ["PRUNE_BATCH", "PRUNE_PAUSE", "REMOVE_BATCH", "PruneStep", "Pruner"]

#: Ledger rows read (and at most deleted) by one prune transaction.
PRUNE_BATCH = 1000
#: Ledger rows deleted by one transaction when a task is removed.
REMOVE_BATCH = 5000
#: Seconds beat waits after a pass ends before it starts the next one (an idle ledger
#: then costs one small read a minute, not one per housekeeping). A pass that deleted a
#: batch or more (a ledger written fast) is followed at the next housekeeping instead, so
#: the ledger holds the history plus seconds, not plus a minute, of fires.
PRUNE_PAUSE = 60.0
#: Most ids in one ``IN (...)`` list.
_IN_CHUNK = 1000

_F = fire.c
_oldest = sa.type_coerce(sa.func.min(_F.fire_time), UTCDateTime())


@dataclass(frozen=True)
class PruneStep:
    """What one prune batch did."""

    #: Rows deleted (with ``dry_run``: that would be deleted), per ledger state.
    counts: dict[str, int] = field(default_factory=dict)
    #: Rows read.
    scanned: int = 0
    #: Whether this batch ended the pass (the next one starts from the oldest row again).
    done: bool = True

    @property
    def deleted(self) -> int:
        """How many rows were (or would be) deleted."""
        return sum(self.counts.values())


class Pruner:
    """Prune one store's fire ledger a batch at a time, remembering where a pass stands."""

    def __init__(self, db: Database, *, batch: int = PRUNE_BATCH) -> None:
        if batch < 1:
            raise ValueError(f"batch must be a positive number of rows, got {batch!r}")
        self.db = db
        self.batch = batch
        #: Primary key after which the current pass goes on (0: a new pass).
        self.after = 0
        #: When (the caller's monotonic seconds) :meth:`pace` may prune again.
        self.resume_at = 0.0
        #: Rows the current (or last) pass deleted.
        self.pass_deleted = 0
        #: When (monotonic) :meth:`pace` prunes the audit trail again.
        self.audit_at = 0.0

    def pace(
        self,
        keep: timedelta | None,
        moment: float,
        look: tuple[datetime, datetime | None] | None = None,
        budget: float = 0.0,
    ) -> PruneStep | None:
        """Prune a batch unless the last pass ended under ``PRUNE_PAUSE`` seconds ago.

        For beat's housekeeping: ``moment`` is its monotonic clock. A pass goes on at
        every call until it ends; then (or after a failure) the next waits a minute,
        unless the pass deleted a batch or more (a ledger written fast).
        ``look``, when the caller read them already: the database's time and the fire time
        of the ledger's oldest row by id (``None``: empty). A new pass is then not started
        while that row is within ``keep`` (the pass would end at it), and costs nothing.
        While the pass has work, more batches follow until ``budget`` seconds are spent
        (0: one batch), so that a ledger written faster than a batch per call drains.
        Return the step (counts of every batch run), or ``None`` when nothing ran.
        """
        if keep is None or moment < self.resume_at:
            return None
        if moment >= self.audit_at:  # its own pace: the ledger's pass may not start
            gone = self.prune_audit(keep, now=look[0] if look is not None else None)
            self.audit_at = moment + (0.0 if gone >= self.batch else PRUNE_PAUSE)
        now = None
        if look is not None:
            now, oldest = look
            if self.after == 0 and not rule.worth_a_pass(oldest, rule.cutoff(now, keep)):
                return None
        self.resume_at = moment + PRUNE_PAUSE
        until = time.monotonic() + budget
        step = self.step(keep, now=now)
        counts, scanned = Counter(step.counts), step.scanned
        while not step.done and time.monotonic() < until:
            step = self.step(keep)
            counts.update(step.counts)
            scanned += step.scanned
        # A pass with work goes on at the next call; one that deleted a batch or more is
        # followed at the next call too (see ``PRUNE_PAUSE``).
        busy = not step.done or self.pass_deleted >= self.batch
        self.resume_at = moment + (0.0 if busy else PRUNE_PAUSE)
        return PruneStep(dict(counts), scanned, step.done)

    def step(
        self, keep: timedelta | None, *, dry_run: bool = False, now: datetime | None = None
    ) -> PruneStep:
        """Prune one batch of rows whose fire is older than ``keep`` (``None``: no-op);
        ``now``: the database's time if the caller just read it."""
        cutoff = rule.cutoff(self.db.now() if now is None else now, keep)
        if cutoff is None:
            self.after = 0
            return PruneStep()
        if self.after == 0:
            self.pass_deleted = 0
        with self.db.engine.connect() as conn:
            rows = self._candidates(conn)
            old = [r for r in rows if r.fire_time < cutoff]
            # Only rows the per-row rules let go need their task's ledger looked up.
            maybe = [r for r in old if rule.keep_reason(r, cutoff, _ANY) is None]
            tasks = self._tasks(conn, {r.periodic_task_id for r in maybe}) if maybe else {}
        chosen = rule.prunable(maybe, cutoff, tasks)
        counts = dict(Counter(r.state for r in chosen))
        if chosen and not dry_run:
            counts = self._delete(chosen)
            self.pass_deleted += sum(counts.values())
        done = len(rows) < self.batch or not old
        self.after = 0 if done else rows[-1].id
        if done and not dry_run:  # resolved alert episodes live as long as the history
            alerts.prune_resolved(self.db, cutoff, batch=self.batch)
        return PruneStep(counts, len(rows), done)

    def run(self, keep: timedelta | None, *, dry_run: bool = False) -> dict[str, int]:
        """Run one whole pass from the oldest row; return rows deleted per state (the
        audit trail's old entries go too, uncounted, unless ``dry_run``)."""
        self.after = 0
        while not dry_run and self.prune_audit(keep) >= self.batch:
            pass
        total: Counter[str] = Counter()
        while True:
            step = self.step(keep, dry_run=dry_run)
            total.update(step.counts)
            if step.done:
                return dict(total)

    def prune_audit(self, keep: timedelta | None, *, now: datetime | None = None) -> int:
        """Delete one batch of audit entries older than ``keep`` (the ledger's retention:
        who changed a task is kept as long as what its fires did); return how many."""
        cutoff = rule.cutoff(self.db.now() if now is None else now, keep)
        return 0 if cutoff is None else audit.prune(self.db, cutoff, batch=self.batch)

    def _candidates(self, conn: sa.Connection) -> list[rule.Candidate]:
        query = (
            sa.select(_F.id, _F.periodic_task_id, _F.fire_time, _F.state, _F.lease_until)
            .where(_F.id > self.after)
            .order_by(_F.id)
            .limit(self.batch)
        )
        return [
            rule.Candidate(
                r.id, r.periodic_task_id, r.fire_time, r.state, r.lease_until is not None
            )
            for r in conn.execute(query)
        ]

    def _tasks(self, conn: sa.Connection, task_ids: set[int]) -> dict[int, rule.TaskLedger]:
        """Return the newest fire, oldest fire in flight and the one before, per task.

        Every read is an index seek with constant bounds (``ORDER BY ... LIMIT 1`` within
        one task), which all three databases answer from a few entries: MariaDB does not
        narrow a correlated range, so nothing here depends on the outer row.
        """
        ids = sorted(task_ids)
        newest: dict[int, datetime] = {}
        in_flight: dict[int, datetime] = {}
        for start in range(0, len(ids), _IN_CHUNK):
            chunk = ids[start : start + _IN_CHUNK]
            last = (
                sa.select(_F.fire_time)
                .where(_F.periodic_task_id == periodic_task.c.id)
                .order_by(_F.fire_time.desc())
                .limit(1)
                .scalar_subquery()
            )
            query = sa.select(periodic_task.c.id, sa.type_coerce(last, UTCDateTime())).where(
                periodic_task.c.id.in_(chunk)
            )
            _merge(newest, conn.execute(query))
            # (periodic_task_id, state, fire_time): a few index entries per task.
            query = (
                sa.select(_F.periodic_task_id, _oldest)
                .where(_F.periodic_task_id.in_(chunk), _F.state.in_(IN_FLIGHT))
                .group_by(_F.periodic_task_id)
            )
            _merge(in_flight, conn.execute(query))
        # Leased published fires (CronTask fires waiting for their start) through the
        # (state, lease_until) index: only the ones in flight, whatever their task.
        query = (
            sa.select(_F.periodic_task_id, _oldest)
            .where(_F.state == FireState.PUBLISHED, _F.lease_until.is_not(None))
            .group_by(_F.periodic_task_id)
        )
        _merge(in_flight, (r for r in conn.execute(query) if r[0] in task_ids))
        tasks: dict[int, rule.TaskLedger] = {}
        for task_id, last_fire in newest.items():
            first = in_flight.get(task_id)
            before = None
            if first is not None:
                before = conn.execute(
                    sa.select(_F.fire_time)
                    .where(_F.periodic_task_id == task_id, _F.fire_time < first)
                    .order_by(_F.fire_time.desc())
                    .limit(1)
                ).scalar_one_or_none()
            tasks[task_id] = rule.TaskLedger(last_fire, first, before)
        return tasks

    def _delete(self, rows: Sequence[rule.Candidate]) -> dict[str, int]:
        """Delete ``rows`` in one transaction, each only if still in the state read."""
        by_state: dict[str, list[int]] = {}
        for row in rows:
            by_state.setdefault(row.state, []).append(row.id)
        counts: dict[str, int] = {}
        with self.db.begin() as conn:
            for state, ids in sorted(by_state.items()):
                stmt = sa.delete(fire).where(_F.id.in_(ids), _F.state == state)
                if state == FireState.PUBLISHED:  # a start lease taken since the read keeps it
                    stmt = stmt.where(_F.lease_until.is_(None))
                deleted = max(conn.execute(stmt).rowcount, 0)
                if deleted:
                    counts[state] = deleted
        return counts


def _merge(found: dict[int, datetime], rows: Iterable[Any]) -> None:
    for task_id, when in rows:
        if when is not None and (task_id not in found or when < found[task_id]):
            found[task_id] = when


#: A task ledger that keeps nothing by itself: asks the per-row rules alone.
_ANY = rule.TaskLedger(newest=datetime.max.replace(tzinfo=timezone.utc))
