"""The retiring half of :class:`~celery_cronstore.store.Store`: remove and disable tasks,
by name or by owner, and prune old history.

Kept apart from the definitions' writes (``store.py``: add, update, adopt) along the seam
the code already had: these work on *sets* of tasks through
:mod:`~celery_cronstore.store.removal`'s bounded transactions, while the others write
one row. Each records its audit entries (:mod:`.audit`) in the transaction that disables
the tasks, the moment from which no fire of them is claimed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from celery_cronstore.errors import TaskNotFoundError
from celery_cronstore.store import audit, removal
from celery_cronstore.store.db import Database
from celery_cronstore.store.retention import PRUNE_BATCH, REMOVE_BATCH, Pruner
from celery_cronstore.store.rows import owner_values
from celery_cronstore.store.schema import periodic_task

__all__ = ["StoreRetire"]

_PT = periodic_task.c


class StoreRetire:
    """Remove or disable periodic tasks (recorded as :attr:`actor`), prune history."""

    db: Database
    #: Who the audit trail says wrote (see :meth:`Store.acting`).
    actor: audit.Actor

    def remove(self, name: str, *, batch: int = REMOVE_BATCH) -> None:
        """Remove a periodic task and its ledger (:class:`TaskNotFoundError` if none).

        The task is disabled first (one short transaction: no fire is claimed for it
        after that commits), then its ledger is deleted oldest first, ``batch`` rows per
        transaction, and the row itself goes last. A delivery of one of its fires finds
        no ledger row and the guard does not run it. Interrupted, it leaves the task
        disabled with part of its history: removing it again finishes the job.
        """
        if not self._remove((_PT.name == name,), batch):
            raise TaskNotFoundError(f"no periodic task named {name!r}")

    def remove_owned_by(self, owner_type: str, owner_id: Any, *, batch: int = REMOVE_BATCH) -> int:
        """Remove every periodic task of an owner; return how many were removed.

        As :meth:`remove`, set-based (:mod:`~celery_cronstore.store.removal`): one
        statement disables all of them in one transaction, their ledgers go ``batch``
        rows per transaction across the tasks (each task's oldest first), then the task
        rows, ``batch`` per transaction. Interrupted, it leaves the tasks disabled with
        part of their history: removing again finishes the job.
        """
        cols = owner_values((owner_type, owner_id))
        where = (_PT.owner_type == cols["owner_type"], _PT.owner_id == cols["owner_id"])
        return self._remove(where, batch)

    def _remove(self, where: Sequence[sa.ColumnElement[bool]], batch: int) -> int:
        def note(conn: sa.Connection, now: datetime) -> None:
            audit.record_where(conn, self.actor, "remove", where, at=now)

        return removal.remove_tasks(self.db, where, batch=batch, note=note)

    def disable_owned_by(self, owner_type: str, owner_id: Any) -> int:
        """Disable every periodic task of an owner; return how many were enabled before."""
        cols = owner_values((owner_type, owner_id))
        where = (
            _PT.owner_type == cols["owner_type"],
            _PT.owner_id == cols["owner_id"],
            _PT.enabled == sa.true(),
        )
        with self.db.begin() as conn:
            now = self.db.now(conn)
            audit.record_where(conn, self.actor, "disable", where, at=now)
            result = conn.execute(
                sa.update(periodic_task)
                .where(*where)
                .values(enabled=False, next_run=None, updated_at=now, version=_PT.version + 1)
            )
            return result.rowcount

    def prune(
        self, older_than: timedelta | None, *, dry_run: bool = False, batch: int = PRUNE_BATCH
    ) -> dict[str, int]:
        """Delete ledger rows whose fire is older than ``older_than``; return counts per state.

        Never deleted: fires in flight, each task's newest fire and what the guard still
        reads (:mod:`celery_cronstore.policy.retention`). One pass over the old rows,
        ``batch`` rows per transaction. ``dry_run`` deletes nothing and returns what
        would go; ``None`` keeps everything. Audit entries older than ``older_than`` go
        too (not counted).
        """
        return Pruner(self.db, batch=batch).run(older_than, dry_run=dry_run)
