"""The failures view and the summary line: what ended badly, grouped by task, and the
store in five numbers.

:func:`failures` answers "what failed, and since when?": every fire that ended badly
(:data:`~celery_cronstore.states.BAD_ENDS`) with a fire time in ``[since, now]``, one
group per task, newest failure first, in **two** statements whatever the window holds:

1. one grouped read of the window's bad ends (counts per state, first and last
   occurrence, and the fire times of the newest bad end and of the newest one that left
   a traceback), ``LIMIT limit + 1``. It filters on ``state`` and ``fire_time``, the
   columns of ``ix_cronstore_fire_task_state`` (the ledger has no index on
   ``fire_time`` alone: the window is what bounds the rows read, at most
   :data:`WINDOWS`' longest, and retention what bounds the ledger);
2. the reason and traceback of those fires, each found through the unique
   ``(periodic_task_id, fire_time)`` index.

A ``missed`` row standing for N grid points counts N. :func:`summary` counts the tasks,
the enabled ones, those in error, those late and those failing (the same rule as the
task list's "failing" filter, :func:`~celery_cronstore.store.outcomes.failing_clause`).

:func:`clip` bounds the traceback a worker stores in ``fire.detail`` (head and tail kept:
the outer frames say where the run was, the tail what went wrong).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from celery_cronstore.policy.outcomes import LATE_GRACE
from celery_cronstore.records import EPOCH
from celery_cronstore.states import BAD_ENDS
from celery_cronstore.store.outcomes import failing_clause
from celery_cronstore.store.schema import beat, fire, periodic_task

__all__ = [
    "ALIVE_WITHIN",
    "DEFAULT_WINDOW",
    "DETAIL_MAX",
    "FAILING_CAP",
    "FAILURE_LIMIT",
    "MAX_FAILURE_LIMIT",
    "WINDOWS",
    "Failures",
    "Summary",
    "TaskFailures",
    "clip",
    "failures",
    "summary",
    "window_of",
]

_PT = periodic_task.c
_F = fire.c
_BAD = [s.value for s in BAD_ENDS]

#: The windows the failures view offers, by the name a URL or a command line gives.
WINDOWS: Mapping[str, timedelta] = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
}
DEFAULT_WINDOW = "24h"
#: Tasks listed by default, and at most (the second statement looks up two fires of
#: each: 4 bound values a task stays far below SQLite's oldest limit of 999).
FAILURE_LIMIT = 100
MAX_FAILURE_LIMIT = 200
#: Longest traceback kept in ``fire.detail`` (characters).
DETAIL_MAX = 8000
#: The summary counts failing tasks up to this many (then shows ``10000+``).
FAILING_CAP = 10_000
#: A beat counts as running in the summary when it ticked this recently (its heartbeat
#: comes every 5 s).
ALIVE_WITHIN = timedelta(seconds=60)


def window_of(text: str | None) -> str:
    """Return the window ``text`` names (empty: :data:`DEFAULT_WINDOW`), or raise
    ``ValueError`` naming the choices."""
    value = (text or "").strip().lower() or DEFAULT_WINDOW
    if value not in WINDOWS:
        shown = value[:40].encode("ascii", "backslashreplace").decode("ascii")
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, got {shown!r}")
    return value


def clip(text: str, limit: int = DETAIL_MAX) -> str:
    """Return ``text`` cut to at most ``limit`` characters, saying how much was cut.

    The first quarter and the last three quarters (less the note) are kept: a traceback's
    head names the outer frames, its tail the innermost ones and the exception itself.
    """
    if len(text) <= limit:
        return text
    # The note is sized for the largest count it can show: the result never passes limit.
    room = max(limit - len(_note(len(text))), 0)
    head = room // 4
    tail = len(text) - (room - head)
    return text[:head] + _note(tail - head) + text[tail:]


def _note(cut: int) -> str:
    return f"\n… [{cut:,} characters cut] …\n"


@dataclass(frozen=True)
class TaskFailures:
    """One task's bad ends in the window."""

    periodic_task_id: int
    name: str
    #: Fires (grid points) by state, in :data:`BAD_ENDS` order, states with none left out.
    counts: Mapping[str, int]
    #: Fire time of the oldest bad end in the window, and of the newest (a ``missed`` row's
    #: last grid point).
    first: datetime
    last: datetime
    #: The newest bad end: its state and one-line reason.
    state: str
    reason: str | None
    #: The newest traceback in the window (a ``missed`` fire has none), and its fire time.
    detail: str | None
    detail_at: datetime | None

    @property
    def total(self) -> int:
        """Return how many fires ended badly in the window."""
        return sum(self.counts.values())


@dataclass(frozen=True)
class Failures:
    """The failures view: ``tasks`` newest failure first; ``more`` when some were left off."""

    since: datetime
    until: datetime
    tasks: Sequence[TaskFailures]
    more: bool


@dataclass(frozen=True)
class Summary:
    """The store in five numbers (the summary line on every page)."""

    tasks: int
    enabled: int
    in_error: int
    #: Tasks whose newest finished fire ended badly (counted up to :data:`FAILING_CAP`).
    failing: int
    late: int
    #: The failing count reached :data:`FAILING_CAP`.
    failing_capped: bool = False
    #: Beats that ticked within :data:`ALIVE_WITHIN`: those that fire, and those started
    #: with firing off (``CRONSTORE_FIRE=0``: they claim and publish nothing).
    beats_firing: int = 0
    beats_off: int = 0


def failures(
    conn: sa.Connection,
    now: datetime,
    *,
    window: timedelta = WINDOWS[DEFAULT_WINDOW],
    limit: int = FAILURE_LIMIT,
) -> Failures:
    """Return the bad ends with a fire time in ``[now - window, now]``, grouped by task.

    At most ``limit`` tasks (1..:data:`MAX_FAILURE_LIMIT`), the one that failed most
    recently first; two statements (see the module docstring).
    """
    if not 1 <= limit <= MAX_FAILURE_LIMIT:
        raise ValueError(f"limit must be 1..{MAX_FAILURE_LIMIT}, got {limit}")
    since = now - window
    newest = sa.func.max(_F.fire_time)
    counts = [sa.func.sum(sa.case((_F.state == s, _F.fire_count), else_=0)) for s in _BAD]
    groups = conn.execute(
        sa.select(
            _F.periodic_task_id,
            sa.func.min(_F.fire_time),
            sa.func.max(sa.func.coalesce(_F.fire_until, _F.fire_time)),
            newest,
            sa.func.max(sa.case((_F.detail.is_not(None), _F.fire_time))),
            *counts,
        )
        .where(_F.state.in_(_BAD), _F.fire_time >= since, _F.fire_time <= now)
        .group_by(_F.periodic_task_id)
        .order_by(newest.desc(), _F.periodic_task_id)
        .limit(limit + 1)
    ).all()
    more = len(groups) > limit
    groups = groups[:limit]
    fires = _fires(conn, [(g[0], t) for g in groups for t in (g[3], g[4]) if t is not None])
    tasks = []
    for task_id, first, last, newest_at, detail_at, *numbers in groups:
        found = fires.get((task_id, newest_at))
        if found is None:  # pruned or removed between the two statements
            continue
        name, state, reason, _ = found
        detail = fires.get((task_id, detail_at), found)[3] if detail_at is not None else None
        by_state = {
            s: int(n or 0) for s, n in zip(_BAD, numbers, strict=True) if n
        }  # Decimal on MariaDB
        tasks.append(
            TaskFailures(task_id, name, by_state, first, last, state, reason, detail, detail_at)
        )
    return Failures(since, now, tasks, more)


def _fires(
    conn: sa.Connection, keys: list[tuple[int, datetime]]
) -> dict[tuple[int, datetime], tuple[str, str, str | None, str | None]]:
    """Name, state, reason and detail of the fires ``keys`` (task id, fire time): one
    statement, one unique-index lookup per key."""
    if not keys:
        return {}
    query = (
        sa.select(_F.periodic_task_id, _F.fire_time, _PT.name, _F.state, _F.reason, _F.detail)
        .join_from(fire, periodic_task, _F.periodic_task_id == _PT.id)
        .where(sa.or_(*(sa.and_(_F.periodic_task_id == i, _F.fire_time == t) for i, t in keys)))
    )
    return {(r[0], r[1]): (r[2], r[3], r[4], r[5]) for r in conn.execute(query)}


def summary(
    conn: sa.Connection,
    now: datetime,
    *,
    grace: float = LATE_GRACE,
    failing_since: timedelta = WINDOWS["7d"],
) -> Summary:
    """Return how many tasks there are, enabled, in error, late and failing at ``now``.

    *Late*: enabled, planned, and ``next_run`` more than ``grace`` seconds past (no beat
    claimed it). *Failing*: the newest finished fire ended badly, among the tasks with a
    bad end since ``now - failing_since`` (a task whose last failure is older has had no
    fire since: it shows as late, or is disabled). Two statements: one pass over the
    tasks table, and the failing count (a window of the ledger, then a few index
    lookups per candidate, stopping at :data:`FAILING_CAP`).
    """
    enabled = _PT.enabled == sa.true()
    late = sa.and_(enabled, _PT.next_run > EPOCH, _PT.next_run < now - timedelta(seconds=grace))
    row = conn.execute(
        sa.select(
            sa.func.count(),
            _count(enabled),
            _count(_PT.error.is_not(None)),
            _count(late),
        ).select_from(periodic_task)
    ).one()
    candidates = sa.select(_F.periodic_task_id).where(
        _F.state.in_(_BAD), _F.fire_time >= now - failing_since
    )
    failing = (
        sa.select(_PT.id)
        .where(_PT.id.in_(candidates), failing_clause())
        .limit(FAILING_CAP + 1)
        .subquery()
    )
    n_failing = int(conn.execute(sa.select(sa.func.count()).select_from(failing)).scalar_one())
    off = beat.c.firing == sa.false()
    beats = conn.execute(
        sa.select(_count(sa.or_(beat.c.firing.is_(None), ~off)), _count(off)).where(
            beat.c.last_tick >= now - ALIVE_WITHIN
        )
    ).one()
    return Summary(
        tasks=int(row[0]),
        enabled=_int(row[1]),
        in_error=_int(row[2]),
        failing=min(n_failing, FAILING_CAP),
        late=_int(row[3]),
        failing_capped=n_failing > FAILING_CAP,
        beats_firing=_int(beats[0]),
        beats_off=_int(beats[1]),
    )


def _count(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[Any]:
    return sa.func.sum(sa.case((condition, 1), else_=0))


def _int(value: Any) -> int:
    """A ``SUM`` over no rows is NULL; MariaDB's is a Decimal."""
    return int(value or 0)
