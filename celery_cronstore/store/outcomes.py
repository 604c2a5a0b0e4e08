"""Per-task health read from the ledger in a few set-based statements, for many tasks.

Every window asks for the health of many tasks at once (a page of 500, ``cronstore list``,
``/metrics`` over every task): :func:`health_facts` answers for up to :data:`CHUNK` tasks
in **one** statement (all tasks: one statement however many), never one per task. Each
task's part is a handful of correlated lookups along the ledger's indexes, so it costs
the same for a task with 10 fires or 10,000,000:

* the newest fire and the newest ``succeeded`` one: one seek each on the unique
  ``(periodic_task_id, fire_time)`` index and on ``(periodic_task_id, state, fire_time)``;
* failures in a row: a range scan of at most :data:`~celery_cronstore.policy.outcomes.WALK`
  index entries (the task's newest rows), bounded below by the fire time of the WALK-th
  newest row (one more seek).

:mod:`celery_cronstore.policy.outcomes` turns these facts into what is shown.
:func:`failing_clause` is the same count as a filter (the dashboard's "failing" list).
The outcome counts and the lateness histogram for ``/metrics`` read the whole ledger (or
its last hour) once per scrape, like ``store.read.store_figures``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from celery_cronstore.policy.outcomes import WALK, OutcomeFacts
from celery_cronstore.states import BAD_ENDS, FireState
from celery_cronstore.store.db import Database
from celery_cronstore.store.schema import fire, periodic_task

__all__ = [
    "CHUNK",
    "Lateness",
    "NamedFacts",
    "failing_clause",
    "health_facts",
    "lateness",
    "look_health",
    "outcome_counts",
    "outcome_totals",
]

_PT = periodic_task.c
#: Most task ids in one statement (bound parameters stay far below every driver's limit).
CHUNK = 500


@dataclass(frozen=True)
class NamedFacts:
    """A task's name and the facts its health is decided from."""

    name: str
    facts: OutcomeFacts
    #: The state of the newest fire (``None``: no fire yet).
    newest_state: str | None = None


@dataclass(frozen=True)
class Lateness:
    """How late the fires of a window were sent: cumulative counts per upper bound."""

    buckets: list[tuple[float, int]]
    count: int
    total: float


def _scalar(column: Any, *where: Any, newest: bool = True, offset: int = 0) -> Any:
    """A lookup over one task's ledger rows (``periodic_task`` of the enclosing query)."""
    f = fire.alias()
    query = sa.select(column(f.c)).where(f.c.periodic_task_id == _PT.id, *(w(f.c) for w in where))
    if newest:
        query = query.order_by(f.c.fire_time.desc()).limit(1).offset(offset)
    return query.correlate(periodic_task).scalar_subquery()


def _succeeded(c: Any) -> Any:
    return c.state == FireState.SUCCEEDED.value


def _success_fire() -> Any:
    return _scalar(lambda c: sa.func.max(c.fire_time), _succeeded, newest=False)


def _bad_in_row(walk: int) -> Any:
    """Bad ends (grid points) newer than the task's newest success, in its newest
    ``walk`` rows."""
    since = sa.func.coalesce(
        _scalar(lambda c: c.fire_time, offset=walk - 1),
        _scalar(lambda c: sa.func.min(c.fire_time), newest=False),
    )
    success = _success_fire()
    f = fire.alias("walked")
    return (
        sa.select(sa.func.coalesce(sa.func.sum(f.c.fire_count), 0))
        .where(
            f.c.periodic_task_id == _PT.id,
            f.c.fire_time >= since,
            f.c.state.in_([s.value for s in BAD_ENDS]),
            sa.or_(success.is_(None), f.c.fire_time > success),
        )
        .correlate(periodic_task)
        .scalar_subquery()
    )


def failing_clause(walk: int = WALK) -> sa.ColumnElement[bool]:
    """A condition on ``periodic_task`` rows: the task is failing (its newest finished
    fire ended badly), counted over the same walk as :func:`health_facts`."""
    failing: sa.ColumnElement[bool] = _bad_in_row(walk) > 0
    return failing


def _facts_query(walk: int) -> sa.Select[Any]:
    return sa.select(
        _PT.id,
        _PT.name,
        _PT.enabled,
        _PT.next_run,
        _scalar(lambda c: c.fire_time).label("newest_fire"),
        _scalar(lambda c: c.state).label("newest_state"),
        _scalar(lambda c: sa.func.coalesce(c.published_at, c.started_at)).label("newest_sent"),
        _success_fire().label("success_fire"),
        _scalar(lambda c: c.finished_at, _succeeded).label("success_at"),
        _bad_in_row(walk).label("bad_in_row"),
        _scalar(lambda c: c.fire_time, offset=walk - 1).label("nth"),
        _scalar(lambda c: c.fire_time, offset=walk).label("beyond"),
    )


def health_facts(
    conn: sa.Connection, ids: Sequence[int] | None = None, *, walk: int = WALK
) -> dict[int, NamedFacts]:
    """Return the health facts of the tasks with ``ids`` (``None``: every task), by id:
    one statement per :data:`CHUNK` ids, or one for all."""
    if walk < 1:
        raise ValueError(f"walk must be 1 or more, got {walk}")
    query = _facts_query(walk)
    if ids is None:
        return _read_facts(conn, query)
    found: dict[int, NamedFacts] = {}
    unique = sorted(set(ids))
    for start in range(0, len(unique), CHUNK):
        found.update(_read_facts(conn, query.where(_PT.id.in_(unique[start : start + CHUNK]))))
    return found


def look_health(
    db: Database, ids: Sequence[int] | None = None, *, walk: int = WALK
) -> tuple[datetime, dict[int, NamedFacts]]:
    """Return the store's now and :func:`health_facts` of ``ids``, on one connection."""
    with db.engine.connect() as conn:
        return db.now(conn), health_facts(conn, ids, walk=walk)


def _read_facts(conn: sa.Connection, query: sa.Select[Any]) -> dict[int, NamedFacts]:
    found: dict[int, NamedFacts] = {}
    for r in conn.execute(query):
        facts = OutcomeFacts(
            enabled=bool(r.enabled),
            next_run=r.next_run,
            newest_fire=r.newest_fire,
            newest_sent=r.newest_sent,
            success_fire=r.success_fire,
            success_at=r.success_at,
            bad_in_row=int(r.bad_in_row or 0),  # a Decimal on PostgreSQL and MariaDB
            walk_start=r.nth if r.beyond is not None else None,
        )
        found[r.id] = NamedFacts(r.name, facts, r.newest_state)
    return found


def outcome_counts(conn: sa.Connection, ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """Return the fires (grid points) each of the tasks ``ids`` has in the ledger, by
    state (one statement per :data:`CHUNK` ids)."""
    f = fire.c
    counts: dict[int, dict[str, int]] = {}
    unique = sorted(set(ids))
    for start in range(0, len(unique), CHUNK):
        query = (
            sa.select(f.periodic_task_id, f.state, sa.func.sum(f.fire_count).label("n"))
            .where(f.periodic_task_id.in_(unique[start : start + CHUNK]))
            .group_by(f.periodic_task_id, f.state)
        )
        for r in conn.execute(query):
            counts.setdefault(r.periodic_task_id, {})[r.state] = int(r.n)
    return counts


def outcome_totals(conn: sa.Connection) -> dict[str, int]:
    """Return the fires (grid points) of the whole ledger by state (one statement)."""
    f = fire.c
    query = sa.select(f.state, sa.func.sum(f.fire_count).label("n")).group_by(f.state)
    return {r.state: int(r.n) for r in conn.execute(query)}


def _seconds(conn: sa.Connection, later: Any, earlier: Any) -> Any:
    """``later - earlier`` in seconds, in the database's own arithmetic."""
    name = conn.dialect.name
    if name == "postgresql":
        return sa.func.extract("epoch", later - earlier)
    if name in ("mysql", "mariadb"):
        return sa.func.timestampdiff(sa.text("MICROSECOND"), earlier, later) / 1_000_000.0
    return (sa.func.julianday(later) - sa.func.julianday(earlier)) * 86400.0


def lateness(
    conn: sa.Connection, since: datetime, until: datetime, bounds: Sequence[float]
) -> Lateness:
    """Return how late the fires with a fire time in ``(since, until]`` were sent
    (publish, else start, minus fire time), as cumulative counts per bound in ``bounds``.

    One statement; it reads the ledger rows of that window (there is no index on the
    fire time alone: keep the window short, ``/metrics`` uses one hour).
    """
    f = fire.c
    sent = sa.func.coalesce(f.published_at, f.started_at)
    late = _seconds(conn, sent, f.fire_time)
    late = sa.case((late < 0, 0.0), else_=late)
    columns = [sa.func.sum(sa.case((late <= b, 1), else_=0)) for b in bounds]
    query = sa.select(sa.func.count(sent), sa.func.sum(late), *columns).where(
        f.fire_time > since, f.fire_time <= until, sent.is_not(None)
    )
    row = conn.execute(query).one()
    count = int(row[0] or 0)
    return Lateness(
        buckets=[(b, int(n or 0)) for b, n in zip(bounds, row[2:], strict=True)],
        count=count,
        total=float(row[1] or 0.0),
    )
