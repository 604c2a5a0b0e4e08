"""The read model of the dashboard: bounded, indexed queries over tasks and the ledger.

Every function here reads at most one page of rows (``LIMIT``), ordered along an index,
so a page costs the same with 1,000 or 1,000,000 periodic tasks and a 10,000,000-row
ledger. Nothing counts or loads a whole table. The instant ("now") is always an
argument: the caller asks the store's clock once per request.

Indexes these queries rely on (``schema.py``): the unique name, ``task``,
``(enabled, next_run)``, ``(owner_type, owner_id)`` on tasks; the unique
``(periodic_task_id, fire_time)`` on the ledger. See ``docs/web.md`` for the ones that
make the problem lists cheap on very large ledgers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from celery_cronstore.records import Fire
from celery_cronstore.states import PROBLEM_STATES
from celery_cronstore.store.outcomes import failing_clause
from celery_cronstore.store.rows import FIRE_COLUMNS, to_fire
from celery_cronstore.store.schema import beat, fire, periodic_task

__all__ = [
    "PROBLEM_STATES",
    "SORTS",
    "BeatRow",
    "Figures",
    "Page",
    "Problems",
    "TaskQuery",
    "TaskRow",
    "beats",
    "fire_page",
    "fire_series",
    "problems",
    "store_figures",
    "task_page",
]

_PT = periodic_task.c
_F = fire.c

#: Sort keys of the task list, each backed by an index (the id breaks ties).
SORTS = ("name", "task", "next", "owner")
#: Longest search text accepted (longer text cannot match a 200-character name anyway).
MAX_SEARCH = 200
MAX_PAGE_SIZE = 500


@dataclass(frozen=True)
class TaskQuery:
    """What the task list shows: search, filters, sort and page (all optional)."""

    search: str = ""
    enabled: bool | None = None
    in_error: bool | None = None
    owner_type: str | None = None
    kind: str | None = None
    #: Only tasks whose newest finished fire ended badly (``False``: only the others).
    failing: bool | None = None
    sort: str = "name"
    descending: bool = False
    page: int = 1
    per_page: int = 50

    def __post_init__(self) -> None:
        if self.sort not in SORTS:
            raise ValueError(f"sort must be one of {', '.join(SORTS)}, got {self.sort!r}")
        if self.page < 1:
            raise ValueError(f"page must be 1 or more, got {self.page}")
        if not 1 <= self.per_page <= MAX_PAGE_SIZE:
            raise ValueError(f"per_page must be 1..{MAX_PAGE_SIZE}, got {self.per_page}")


@dataclass(frozen=True)
class TaskRow:
    """One line of the task list: the definition's visible columns and its last outcome."""

    id: int
    name: str
    task: str
    timer_kind: str
    timer: str
    tz: str
    enabled: bool
    owner_type: str | None
    owner_id: str | None
    next_run: datetime | None
    last_fire: datetime | None
    error: str | None
    last_state: str | None
    #: Set while it is paused (``policy.pause``): when, by whom, why, until, then what.
    paused_at: datetime | None = None
    paused_by: str | None = None
    paused_note: str | None = None
    paused_until: datetime | None = None
    paused_resume: str = "skip"


@dataclass(frozen=True)
class BeatRow:
    """A beat process and how long ago it last ticked."""

    node: str
    started_at: datetime
    last_tick: datetime
    age: float


@dataclass(frozen=True)
class Page:
    """One page of rows; ``has_next`` is known without counting the table."""

    rows: Sequence[Any]
    page: int
    per_page: int
    has_next: bool


@dataclass(frozen=True)
class Problems:
    """What needs an operator: rows in error, fires that did not run, beats, re-publishes."""

    in_error: Sequence[TaskRow]
    not_run: Sequence[Fire]
    republished: Sequence[Fire]
    beats: Sequence[BeatRow]
    since: datetime


_TASK_COLUMNS = (
    _PT.id,
    _PT.name,
    _PT.task,
    _PT.timer_kind,
    _PT.timer,
    _PT.tz,
    _PT.enabled,
    _PT.owner_type,
    _PT.owner_id,
    _PT.next_run,
    _PT.last_fire,
    _PT.error,
    _PT.paused_at,
    _PT.paused_by,
    _PT.paused_note,
    _PT.paused_until,
    _PT.paused_resume,
)


def _order(query: TaskQuery) -> list[sa.ColumnElement[Any]]:
    columns: Sequence[sa.ColumnElement[Any]] = {
        "name": [_PT.name],
        "task": [_PT.task, _PT.id],
        "next": [_PT.next_run, _PT.id],
        "owner": [_PT.owner_type, _PT.owner_id, _PT.id],
    }[query.sort]
    return [c.desc() if query.descending else c.asc() for c in columns]


def _where(query: TaskQuery) -> list[sa.ColumnElement[bool]]:
    where: list[sa.ColumnElement[bool]] = []
    text = query.search.strip()[:MAX_SEARCH]
    if text:
        owner_type, sep, owner_id = text.partition(":")
        if sep and owner_type and owner_id and " " not in owner_type:
            # TYPE:ID is an exact owner lookup (the owner index), as in `cronstore list`.
            where += [_PT.owner_type == owner_type, _PT.owner_id == owner_id]
        else:
            where.append(
                sa.or_(
                    _PT.name.icontains(text, autoescape=True),
                    _PT.task.icontains(text, autoescape=True),
                    _PT.owner_id.icontains(text, autoescape=True),
                )
            )
    if query.sort == "next":
        # Only enabled tasks with a planned fire have a place on the (enabled, next_run)
        # index; the others show under "no next fire" filters and on the problems page.
        where += [_PT.enabled == sa.true(), _PT.next_run.is_not(None)]
    if query.enabled is not None:
        where.append(_PT.enabled == sa.true() if query.enabled else _PT.enabled == sa.false())
    if query.in_error is not None:
        where.append(_PT.error.is_not(None) if query.in_error else _PT.error.is_(None))
    if query.owner_type:
        where.append(_PT.owner_type == query.owner_type)
    if query.kind:
        where.append(_PT.timer_kind == query.kind)
    if query.failing is not None:
        # A bounded walk of each candidate's newest fires (store.outcomes); pages filtered
        # this way cost one short index walk per task scanned, not per task shown.
        failing = failing_clause()
        where.append(failing if query.failing else sa.not_(failing))
    return where


def task_page(conn: sa.Connection, query: TaskQuery) -> Page:
    """Return one page of the task list with each row's newest ledger state.

    Two queries: the page (``LIMIT per_page + 1`` along the sort's index) and the newest
    fire of each of its rows (the ledger's unique index).
    """
    select = (
        sa.select(*_TASK_COLUMNS)
        .where(*_where(query))
        .order_by(*_order(query))
        .limit(query.per_page + 1)
        .offset((query.page - 1) * query.per_page)
    )
    rows = conn.execute(select).all()
    has_next = len(rows) > query.per_page
    rows = rows[: query.per_page]
    states = _last_states(conn, [r.id for r in rows])
    tasks = [TaskRow(**r._asdict(), last_state=states.get(r.id)) for r in rows]
    return Page(tasks, query.page, query.per_page, has_next)


def _last_states(conn: sa.Connection, ids: list[int]) -> dict[int, str]:
    if not ids:
        return {}
    newer = fire.alias("newer")
    newest = (
        sa.select(sa.func.max(newer.c.fire_time))
        .where(newer.c.periodic_task_id == _F.periodic_task_id)
        .scalar_subquery()
    )
    query = sa.select(_F.periodic_task_id, _F.state).where(
        _F.periodic_task_id.in_(ids), _F.fire_time == newest
    )
    return {r.periodic_task_id: r.state for r in conn.execute(query)}


def fire_page(conn: sa.Connection, task_id: int, *, page: int = 1, per_page: int = 50) -> Page:
    """Return one page of a task's ledger, newest fire first (its unique index)."""
    if page < 1 or not 1 <= per_page <= MAX_PAGE_SIZE:
        raise ValueError(f"bad page {page} / page size {per_page}")
    query = (
        _with_names()
        .where(_F.periodic_task_id == task_id)
        .order_by(_F.fire_time.desc())
        .limit(per_page + 1)
        .offset((page - 1) * per_page)
    )
    rows = [to_fire(r) for r in conn.execute(query)]
    return Page(rows[:per_page], page, per_page, len(rows) > per_page)


def fire_series(conn: sa.Connection, task_id: int, *, limit: int = 200) -> list[Fire]:
    """Return a task's newest ``limit`` fires, oldest first (for the chart)."""
    query = (
        _with_names()
        .where(_F.periodic_task_id == task_id)
        .order_by(_F.fire_time.desc())
        .limit(limit)
    )
    return [to_fire(r) for r in conn.execute(query)][::-1]


def _with_names() -> sa.Select[Any]:
    """Ledger rows with their task's name (the join is by primary key)."""
    return sa.select(*FIRE_COLUMNS).join_from(fire, periodic_task, _F.periodic_task_id == _PT.id)


def beats(conn: sa.Connection, now: datetime) -> list[BeatRow]:
    """Return every beat that ever ticked, newest tick first, with its age at ``now``."""
    query = sa.select(beat.c.node, beat.c.started_at, beat.c.last_tick).order_by(
        beat.c.last_tick.desc()
    )
    return [
        BeatRow(r.node, r.started_at, r.last_tick, (now - r.last_tick).total_seconds())
        for r in conn.execute(query.limit(MAX_PAGE_SIZE))
    ]


def problems(
    conn: sa.Connection,
    now: datetime,
    *,
    window: timedelta = timedelta(hours=24),
    limit: int = 100,
) -> Problems:
    """Return what needs attention at ``now``: each list is the newest ``limit`` rows.

    * tasks in error (with the reason beat gave);
    * fires missed, expired or dropped within ``window`` before ``now``;
    * fires published more than once within ``window`` (the start watchdog re-published
      them, or a lease ran out before the publish was recorded);
    * every beat with the age of its last heartbeat.
    """
    since = now - window
    in_error = sa.select(*_TASK_COLUMNS).where(_PT.error.is_not(None)).order_by(_PT.id).limit(limit)
    error_rows = [TaskRow(**r._asdict(), last_state=None) for r in conn.execute(in_error)]
    joined = _with_names()
    not_run = joined.where(
        _F.state.in_(PROBLEM_STATES), _F.fire_time >= since, _F.fire_time <= now
    ).order_by(_F.fire_time.desc())
    republished = joined.where(
        _F.attempts > 1, _F.fire_time >= since, _F.fire_time <= now
    ).order_by(_F.fire_time.desc())
    return Problems(
        in_error=error_rows,
        not_run=[to_fire(r) for r in conn.execute(not_run.limit(limit))],
        republished=[to_fire(r) for r in conn.execute(republished.limit(limit))],
        beats=beats(conn, now),
        since=since,
    )


@dataclass(frozen=True)
class Figures:
    """Store-wide counts for metrics (these read whole tables: scrape, do not poll)."""

    fires_by_state: dict[str, int]
    enabled: int
    disabled: int
    in_error: int
    beats: Sequence[BeatRow]

    @property
    def ledger_rows(self) -> int:
        return sum(self.fires_by_state.values())


def store_figures(conn: sa.Connection, now: datetime) -> Figures:
    """Return ledger rows by state, tasks by enabled flag and in error, beats at ``now``."""
    by_state = {
        r.state: int(r.n)
        for r in conn.execute(sa.select(_F.state, sa.func.count().label("n")).group_by(_F.state))
    }
    enabled = {
        bool(r.enabled): int(r.n)
        for r in conn.execute(
            sa.select(_PT.enabled, sa.func.count().label("n")).group_by(_PT.enabled)
        )
    }
    in_error = conn.execute(
        sa.select(sa.func.count()).select_from(periodic_task).where(_PT.error.is_not(None))
    ).scalar_one()
    return Figures(
        by_state, enabled.get(True, 0), enabled.get(False, 0), int(in_error), beats(conn, now)
    )
