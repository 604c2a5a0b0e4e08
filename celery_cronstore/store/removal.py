"""Removing tasks and their history: set-based, in bounded transactions.

A removal has three steps, each safe to interrupt:

1. :func:`disable`: one short transaction, one ``UPDATE`` for every task being removed.
   After it commits no beat claims a fire of them (a claim reads ``enabled``).
2. :func:`delete_ledgers`: their ledger rows, ``batch`` per transaction, task by task in
   id order and each task's oldest fires first. One read counts each task's rows; then
   each transaction deletes whole tasks whose rows fit in what is left of the batch (one
   ``DELETE ... WHERE periodic_task_id IN (...)``) and the oldest rows of the next task
   to fill it. Removing 100,000 tasks of three fires each takes 60 such transactions,
   not 100,000; one task of a million fires takes 200, each a bounded seek in the unique
   ``(periodic_task_id, fire_time)`` index.
3. :func:`delete_tasks`: the task rows, ``batch`` per transaction, each with whatever
   ledger row was written for it since the count (a worker's record of a fire in flight):
   the ledger's foreign key cascades on PostgreSQL and MariaDB; on SQLite, where it
   cascades only if the connection turned foreign keys on, an explicit ``DELETE`` first.

Interrupted, a removal leaves its tasks disabled with part of their history; running it
again finishes the job. Tasks given to an owner after step 1 are not removed.

On PostgreSQL a list of ids is one array parameter (``= ANY(:ids)``, one statement the
same for every batch); elsewhere ``IN`` lists of at most :data:`_IN_CHUNK` ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from celery_cronstore.store import bulk
from celery_cronstore.store.db import Database
from celery_cronstore.store.schema import fire, periodic_task

__all__ = ["delete_ledgers", "delete_tasks", "disable", "remove_tasks"]

#: ``note(conn, now)``: what else the disabling transaction writes.
Note = Callable[[sa.Connection, datetime], object]
#: Most ids in one ``IN (...)`` list (SQLite before 3.32 allows 999 bound values).
_IN_CHUNK = 900

_PT = periodic_task.c
_F = fire.c


def disable(
    db: Database, where: Sequence[sa.ColumnElement[bool]], note: Note | None = None
) -> list[int]:
    """Disable the tasks ``where`` selects, in one statement and one transaction; return
    their ids in ascending order. No fire of them is claimed after this commits.
    ``note(conn, now)`` runs first in that transaction (the audit entries of a removal)."""
    with db.begin() as conn:
        now = db.now(conn)
        if note is not None:
            note(conn, now)
        conn.execute(
            sa.update(periodic_task)
            .where(*where)
            .values(enabled=False, next_run=None, updated_at=now, version=_PT.version + 1)
        )
        return list(conn.execute(sa.select(_PT.id).where(*where).order_by(_PT.id)).scalars())


def delete_ledgers(db: Database, task_ids: Sequence[int], *, batch: int) -> int:
    """Delete the ledger rows of ``task_ids`` (ascending), ``batch`` rows per transaction
    (plus any written for those tasks since the count), each task's oldest fires first;
    return how many rows went."""
    _check_batch(batch)
    with db.engine.connect() as conn:
        left = _counts(conn, task_ids)
    total = 0
    at = 0  # tasks before this position have no ledger rows left
    while at < len(left):
        whole: list[int] = []
        room = batch
        oldest: tuple[int, int] | None = None
        while at < len(left) and room > 0:
            task_id, count = left[at]
            if count <= room:
                whole.append(task_id)
                room -= count
                at += 1
            else:  # the batch ends inside this task: its oldest rows now, the rest next
                oldest = (task_id, room)
                left[at] = (task_id, count - room)
                room = 0
        with db.begin() as conn:
            total += _delete_in(conn, fire, _F.periodic_task_id, whole)
            if oldest is not None:
                total += _delete_oldest(conn, *oldest)
    return total


def delete_tasks(
    db: Database, task_ids: Sequence[int], where: Sequence[sa.ColumnElement[bool]], *, batch: int
) -> int:
    """Delete the task rows of ``task_ids`` that ``where`` still selects, ``batch`` per
    transaction, each with any ledger row written since; return how many went."""
    _check_batch(batch)
    removed = 0
    for start in range(0, len(task_ids), batch):
        part = task_ids[start : start + batch]
        with db.begin() as conn:
            if db.is_sqlite:  # a foreign key cascades only where the connection enables it
                _delete_in(conn, fire, _F.periodic_task_id, part)
            removed += _delete_in(conn, periodic_task, _PT.id, part, *where)
    return removed


def remove_tasks(
    db: Database, where: Sequence[sa.ColumnElement[bool]], *, batch: int, note: Note | None = None
) -> int:
    """Remove the tasks ``where`` selects with their ledgers (the module's three steps);
    return how many task rows were deleted (``note``: see :func:`disable`)."""
    _check_batch(batch)
    task_ids = disable(db, where, note)
    delete_ledgers(db, task_ids, batch=batch)
    return delete_tasks(db, task_ids, where, batch=batch)


def _counts(conn: sa.Connection, task_ids: Sequence[int]) -> list[tuple[int, int]]:
    """Return ``(task id, ledger rows)`` of the tasks with any, in ``task_ids``' order."""
    found: dict[int, int] = {}
    for match in _matching(conn, _F.periodic_task_id, task_ids):
        query = sa.select(_F.periodic_task_id, sa.func.count()).where(match)
        for task_id, count in conn.execute(query.group_by(_F.periodic_task_id)):
            found[task_id] = count
    return [(task_id, found[task_id]) for task_id in task_ids if found.get(task_id)]


def _delete_oldest(conn: sa.Connection, task_id: int, count: int) -> int:
    """Delete the ``count`` oldest ledger rows of one task (a seek in its unique index)."""
    ids = list(
        conn.execute(
            sa.select(_F.id)
            .where(_F.periodic_task_id == task_id)
            .order_by(_F.fire_time)
            .limit(count)
        ).scalars()
    )
    return _delete_in(conn, fire, _F.id, ids)


def _matching(
    conn: sa.Connection, column: sa.Column[Any], ids: Sequence[int]
) -> Iterator[sa.ColumnElement[bool]]:
    """Yield conditions that together select ``column IN ids``: one ``= ANY(array)`` on
    PostgreSQL, ``IN`` lists of at most :data:`_IN_CHUNK` elsewhere (none if no ids)."""
    if not ids:
        return
    if bulk.set_based(conn):
        array = sa.bindparam("ids", list(ids), type_=postgresql.ARRAY(sa.BigInteger()))
        yield column == sa.any_(array)
        return
    for start in range(0, len(ids), _IN_CHUNK):
        yield column.in_(ids[start : start + _IN_CHUNK])


def _delete_in(
    conn: sa.Connection,
    table: sa.Table,
    column: sa.Column[Any],
    ids: Sequence[int],
    *where: sa.ColumnElement[bool],
) -> int:
    """``DELETE FROM table WHERE column IN ids AND where``; return the rows deleted."""
    deleted = 0
    for match in _matching(conn, column, ids):
        deleted += max(conn.execute(sa.delete(table).where(match, *where)).rowcount, 0)
    return deleted


def _check_batch(batch: int) -> None:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive number of rows, got {batch!r}")
