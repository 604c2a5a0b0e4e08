"""One claim transaction's plan and its writes: the ledger rows and each due row's update.

:class:`Batch` collects what policy planned for each due row (and the rows put in
error); :func:`write_ledger` and :func:`write_rows` write it inside the claim's
transaction (``store.claims``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from celery_cronstore import policy
from celery_cronstore.records import EPOCH, Claim, PeriodicTask
from celery_cronstore.states import FireState
from celery_cronstore.store import bulk
from celery_cronstore.store.schema import fire, periodic_task

__all__ = ["Batch", "Conflict", "Item", "Replan", "as_of", "write_ledger", "write_rows"]

logger = logging.getLogger("celery.beat")

_PT = periodic_task.c
_F = fire.c

#: Plans a task again past the fire times already in the ledger (``taken``).
Replan = Callable[[sa.Connection, PeriodicTask, datetime, frozenset[datetime]], policy.Plan]


class Conflict(Exception):
    """A claim transaction lost a race; it was rolled back and will be retried."""


@dataclass(frozen=True)
class Item:
    """One due task and what policy decided for it."""

    task: PeriodicTask
    plan: policy.Plan


@dataclass
class Batch:
    """What one claim transaction plans: each due task's plan, and the rows in error."""

    items: list[Item] = field(default_factory=list)
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
                        state=FireState.DROPPED,
                        reason=f"not published: {reason}",
                        claimed_by=node,
                        attempts=0,
                    ),
                )
            )

    def ledger(self) -> list[dict[str, Any]]:
        """Return the ledger rows to insert: every plan's entries, then the dropped fires."""
        rows = [entry.row() for item in self.items for entry in item.plan.entries]
        rows.extend(entry.row() for _, entry in self.failed_entries)
        return rows

    def recorded(self) -> list[tuple[str, str, int]]:
        """Return (state, task name, fires it stands for) of each ledger row, for metrics."""
        rows = [(e.state, i.task.name, e.fire_count) for i in self.items for e in i.plan.entries]
        rows.extend((e.state, name, e.fire_count) for name, e in self.failed_entries)
        return rows

    def replaced(self) -> list[tuple[int, str, datetime, str]]:
        """Return (task id, name, fire time, reason) of the fires in flight the plans end
        (overlap policy ``replace``)."""
        return [
            (i.task.id, i.task.name, when, why) for i in self.items for when, why in i.plan.replaces
        ]

    def claims(self) -> list[Claim]:
        """Return the claims in fire-time order (a task's backlog may span other tasks')."""
        claims = [claim for item in self.items for claim in item.plan.claims]
        claims.sort(key=lambda claim: claim.fire_time)
        return claims

    def updates(self) -> list[dict[str, Any]]:
        """Return each due row's update, as the parameters :func:`write_rows` binds."""
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


def as_of(task: PeriodicTask, now: datetime) -> datetime:
    """Return the instant a due row is planned as of: now, or its own next run when
    claimed ahead of it (``claim_due(ahead=...)``)."""
    due = task.next_run
    return due if due is not None and due > now else now


def write_ledger(conn: sa.Connection, batch: Batch, now: datetime, replan: Replan) -> None:
    """Insert the batch's ledger rows; a fire already in the ledger costs only its task.

    The whole batch goes in one statement inside a savepoint. If the ledger's unique
    key refuses it (a row whose ``next_run`` points at a fire already recorded), each
    task's rows go in on their own: a task whose fires collide is planned again past
    the recorded ones (``replan``), and the rest of the batch is untouched.
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
        batch.items[index] = _insert_apart(conn, item, as_of(item.task, now), replan)
    for _, entry in batch.failed_entries:
        with contextlib.suppress(IntegrityError), conn.begin_nested():
            conn.execute(sa.insert(fire).values(**entry.row()))


def _insert_apart(conn: sa.Connection, item: Item, now: datetime, replan: Replan) -> Item:
    """Insert one task's ledger rows on their own, planning it again past the recorded
    fires each time they collide; after three tries, put the task in error."""
    plan = item.plan
    for _attempt in range(3):
        try:
            with conn.begin_nested():
                if plan.entries:
                    conn.execute(sa.insert(fire), [e.row() for e in plan.entries])
            return Item(item.task, plan)
        except IntegrityError:
            plan = replan(conn, item.task, now, _taken(conn, item.task, now))
    reason = "its due fires collide with the fire ledger (edit the task to plan it again)"
    return Item(item.task, policy.Plan(policy.RowUpdate(next_run=None, error=reason)))


def _taken(conn: sa.Connection, task: PeriodicTask, now: datetime) -> frozenset[datetime]:
    """Return the fire times of ``task`` already in the ledger that its walk could meet."""
    since = min(filter(None, (task.next_run, task.last_fire)), default=now)
    query = sa.select(_F.fire_time).where(
        _F.periodic_task_id == task.id, _F.fire_time >= since, _F.fire_time <= now
    )
    return frozenset(conn.execute(query).scalars())


def write_rows(conn: sa.Connection, batch: Batch) -> None:
    """Write each due row's new ``next_run`` (and error, last fire, run count), fenced on
    its version; raise :class:`Conflict` if another writer changed one meanwhile."""
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
    with bulk.joined_by_key(conn):
        result = conn.execute(stmt, params)
    if result.rowcount not in (-1, len(updates)):
        # Another writer changed a row we hold: give the whole batch back.
        raise Conflict("a due row changed while it was being claimed")


#: The values each due row's update binds (``Batch.updates``), by their column's type.
_UPDATE_TYPES: dict[str, sa.types.TypeEngine[Any]] = {
    "b_id": _PT.id.type,
    "b_version": _PT.version.type,
    "b_next": _PT.next_run.type,
    "b_error": _PT.error.type,
    "b_last": _PT.last_fire.type,
    "b_runs": _PT.total_run_count.type,
}
