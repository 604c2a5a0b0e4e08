"""Rows whose ``next_run`` was set by hand: planned again when beat starts.

Beat itself always leaves an enabled row's ``next_run`` at its timer's next fire (or
NULL once the timer has none). A raw ``UPDATE``, a restored dump or a migration script
can leave an enabled row with ``next_run`` NULL although its timer still fires, or far
beyond its timer's next fire: such a row would never fire, without an error. At start
beat reads the two kinds of suspects (NULL: finished timers and hand edits; more than a
day ahead: yearly timers and hand edits), asks :func:`celery_cronstore.policy.
stray_next_run` about each, and hands the strays to the next claim (``next_run`` set to
:data:`EPOCH`, the version bumped), which plans them or records why it cannot.

Reads stream in batches; a row edited meanwhile (its version moved) is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from celery_cronstore import policy
from celery_cronstore.records import EPOCH
from celery_cronstore.store.db import Database
from celery_cronstore.store.rows import to_task
from celery_cronstore.store.schema import periodic_task

__all__ = ["AHEAD", "LOGGED", "Stray", "replan_strays"]

#: ``next_run`` further ahead than this is checked against the timer.
AHEAD = timedelta(days=1)
#: Strays named one by one in beat's log; the rest are counted.
LOGGED = 20
#: Rows read per round trip, and rows handed back per transaction.
_BATCH = 500

_PT = periodic_task.c


def _suspects(now: datetime) -> sa.Select[tuple[sa.Row[object]]]:
    enabled = sa.and_(_PT.enabled == sa.true(), _PT.error.is_(None))
    return (
        sa.select(periodic_task)
        .where(enabled, sa.or_(_PT.next_run.is_(None), _PT.next_run > now + AHEAD))
        .execution_options(yield_per=_BATCH)
    )


@dataclass(frozen=True)
class Stray:
    """One row handed back to planning, and why."""

    task_id: int
    name: str
    version: int
    reason: str


def replan_strays(db: Database) -> list[Stray]:
    """Hand every enabled row whose ``next_run`` is not its timer's plan to the next
    claim; return them (the caller logs them)."""
    now = db.now()
    strays: list[Stray] = []
    with db.engine.connect() as conn:
        for row in conn.execute(_suspects(now)):
            try:
                reason = policy.stray_next_run(to_task(row), now)
            except Exception as exc:  # an unreadable row: planning names it
                reason = f"the row cannot be read ({exc})"
            if reason is not None:
                strays.append(Stray(row.id, row.name, row.version, reason))
    # Short transactions: replicas starting together, each sweeping, never hold many
    # row locks for long (the second finds the versions moved and leaves those rows).
    for start in range(0, len(strays), _BATCH):
        with db.begin() as conn:
            for stray in strays[start : start + _BATCH]:
                conn.execute(
                    sa.update(periodic_task)
                    .where(_PT.id == stray.task_id, _PT.version == stray.version)
                    .values(next_run=EPOCH, version=_PT.version + 1)
                )
    return strays
