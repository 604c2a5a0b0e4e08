"""Alert episodes in ``cronstore_alert``: the facts the rules read, opening and resolving
episodes, and their delivery state (what beat owes a webhook, and since when).

The rules are :mod:`celery_cronstore.policy.alerts`'; this module reads and writes.

- **Facts, set-based, of the tasks that can have something to say.** :func:`task_facts`
  reads in one statement every task with an open episode and every enabled task that has
  a bad end in the ledger or a dead man's switch (its own ``alert_after``; every enabled
  task when ``cronstore_alert_after`` sets one for all). The others, healthy and
  unwatched, cannot open an episode (:func:`celery_cronstore.policy.alerts.evaluate`
  returns nothing for them), and with a million of them reading each one every pass held
  beat's process for seconds (benchmarks/scaleout.py's sustain run). Per task read it
  costs an index seek for the newest success and a range of the ``(periodic_task_id,
  state, fire_time)`` index holding its bad ends after that success. The newest bad
  end's reason is then read for the failing tasks alone.
- **Once, whoever opens it.** An open episode holds ``open_key = "<task id>:<kind>"``,
  unique in the table: a second beat opening the same episode inserts nothing. Resolving
  clears the key (the next episode of that kind may open) in an ``UPDATE`` that only the
  first resolver's statement finds open.
- **Delivery owed, in the row.** ``next_attempt_at`` is when a delivery (the open, then
  the resolve) is due; ``NULL`` when nothing is owed. A runner :func:`take` s a due
  episode by compare-and-set on ``attempts`` and moves ``next_attempt_at`` a lease ahead,
  so another beat leaves it alone while the request runs; it then records the outcome
  (:func:`delivered`, :func:`delivery_failed`) fenced on that same ``attempts``. A beat
  that dies mid-request leaves the lease to lapse and another beat sends again: a
  receiver sees a delivery at least once, and once in the normal case (the delivery id
  tells a repeat apart).
- **Bounded.** Resolved episodes with nothing owed go with the ledger's retention
  (:func:`prune_resolved`, called by :class:`~celery_cronstore.store.retention.Pruner`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from celery_cronstore.errors import CronstoreError
from celery_cronstore.policy.alerts import (
    BAD_ENDS,
    OPEN,
    RESOLVE,
    UPDATE,
    BadEnd,
    Change,
    Episode,
    TaskFacts,
)
from celery_cronstore.records import EPOCH, Fire
from celery_cronstore.states import FireState
from celery_cronstore.store.db import Database
from celery_cronstore.store.rows import to_fire
from celery_cronstore.store.schema import alert, fire, periodic_task
from celery_cronstore.store.types import UTCDateTime
from celery_cronstore.timers import Timer, parse_timer

__all__ = [
    "ERROR_CHARS",
    "PRUNE_BATCH",
    "NewestFire",
    "apply_changes",
    "delivered",
    "delivery_failed",
    "due",
    "episodes",
    "newest_fires",
    "open_episodes",
    "prune_resolved",
    "settled",
    "take",
    "task_facts",
]

_A = alert.c
_F = fire.c
_PT = periodic_task.c
#: Most characters of a delivery error kept in ``last_error``.
ERROR_CHARS = 500
#: Most resolved episodes one prune deletes.
PRUNE_BATCH = 1000
_IN_CHUNK = 1000
_EPOCH = sa.literal(EPOCH, UTCDateTime())


def _newest_success() -> sa.ScalarSelect[Any]:
    # An alias of its own: nested in a read of the ledger, it must not correlate to it.
    # Correlated to the task by name: auto-correlation only reaches the select one level
    # up, and this one is also nested two deep (in ``bad_run``).
    ok = fire.alias("ok")
    query = sa.select(sa.func.max(ok.c.fire_time)).where(
        ok.c.periodic_task_id == _PT.id, ok.c.state == FireState.SUCCEEDED
    )
    return query.correlate(periodic_task).scalar_subquery()


def task_facts(db: Database, *, every_enabled: bool = True) -> list[TaskFacts]:
    """Return the facts of every task with an open episode and of the enabled tasks
    that can open one: those with a bad end in the ledger or their own ``alert_after``,
    or every enabled task if ``every_enabled`` (a default dead man's switch is set)."""
    success = sa.type_coerce(_newest_success(), UTCDateTime())
    bad_run = (
        sa.select(sa.func.coalesce(sa.func.sum(_F.fire_count), 0))
        .where(
            _F.periodic_task_id == _PT.id,
            _F.state.in_(BAD_ENDS),
            _F.fire_time > sa.func.coalesce(_newest_success(), _EPOCH),
        )
        .correlate(periodic_task)
        .scalar_subquery()
    )
    with_open = sa.select(_A.periodic_task_id).where(_A.open_key.is_not(None))
    judged = _PT.enabled == sa.true()
    if not every_enabled:
        with_bad = sa.select(_F.periodic_task_id).where(_F.state.in_(BAD_ENDS))
        watched = sa.or_(_PT.alert_after.is_not(None), _PT.id.in_(with_bad))
        judged = sa.and_(judged, watched)
    query = sa.select(
        _PT.id,
        _PT.name,
        _PT.enabled,
        _PT.timer_kind,
        _PT.timer,
        _PT.tz,
        _PT.alert_after,
        _PT.updated_at,
        success.label("last_success"),
        bad_run.label("bad_run"),
    ).where(sa.or_(judged, _PT.id.in_(with_open)))
    with db.engine.connect() as conn:
        rows = conn.execute(query).all()
        failing = [r.id for r in rows if r.bad_run]
        newest = _newest_bad(conn, failing) if failing else {}
    return [
        TaskFacts(
            id=r.id,
            name=r.name,
            enabled=bool(r.enabled),
            timer=_timer(r.timer, r.timer_kind, r.tz),
            alert_after=r.alert_after,
            changed_at=r.updated_at,
            last_success=r.last_success,
            bad_run=int(r.bad_run or 0),
            newest_bad=newest.get(r.id),
        )
        for r in rows
    ]


def _timer(expression: str, kind: str, tz: str) -> Timer | None:
    try:
        return parse_timer(expression, kind=kind, tz=tz)
    except (CronstoreError, ValueError):  # a row in error: beat reports it elsewhere
        return None


def _newest_bad(conn: sa.Connection, task_ids: Sequence[int]) -> dict[int, BadEnd]:
    """Return the newest bad end of each of ``task_ids`` (one seek each on the unique
    ``(periodic_task_id, fire_time)``)."""
    inner = fire.alias("newer")
    newest = (
        sa.select(sa.func.max(inner.c.fire_time))
        .where(inner.c.periodic_task_id == _F.periodic_task_id, inner.c.state.in_(BAD_ENDS))
        .scalar_subquery()
    )
    found: dict[int, BadEnd] = {}
    for start in range(0, len(task_ids), _IN_CHUNK):
        chunk = task_ids[start : start + _IN_CHUNK]
        query = sa.select(_F.periodic_task_id, _F.state, _F.fire_time, _F.reason).where(
            _F.periodic_task_id.in_(chunk), _F.state.in_(BAD_ENDS), _F.fire_time == newest
        )
        for row in conn.execute(query):
            found[row.periodic_task_id] = BadEnd(row.state, row.fire_time, row.reason)
    return found


class NewestFire(NamedTuple):
    """An enabled task's newest fire, with what names and times the task."""

    name: str
    timer_kind: str
    timer: str
    tz: str
    fire: Fire


def newest_fires(db: Database) -> list[NewestFire]:
    """Return the newest fire of every enabled task that has fired (one seek per task on
    the unique ``(periodic_task_id, fire_time)``): Sentry's check-ins."""
    last = fire.alias("last")
    newest = (
        sa.select(last.c.id)
        .where(last.c.periodic_task_id == _PT.id)
        .order_by(last.c.fire_time.desc())
        .limit(1)
        .scalar_subquery()
    )
    query = (
        sa.select(*fire.c, _PT.name, _PT.timer_kind, _PT.timer, _PT.tz)
        .join(periodic_task, _PT.id == _F.periodic_task_id)
        .where(_PT.enabled == sa.true(), _F.id == newest)
    )
    with db.engine.connect() as conn:
        rows: list[sa.Row[Any]] = list(conn.execute(query))
    return [NewestFire(r.name, r.timer_kind, r.timer, r.tz, to_fire(r)) for r in rows]


# -- episodes ---------------------------------------------------------------------------


def _episodes() -> sa.Select[Any]:
    return sa.select(*alert.c, _PT.name).join(periodic_task, _PT.id == _A.periodic_task_id)


def _to_episode(row: sa.Row[Any]) -> Episode:
    m = row._mapping
    return Episode(
        id=m["id"],
        periodic_task_id=m["periodic_task_id"],
        name=m["name"],
        kind=m["kind"],
        opened_at=m["opened_at"],
        resolved_at=m["resolved_at"],
        reason=m["reason"],
        count=m["count"],
        sent_at=m["sent_at"],
        resolve_sent_at=m["resolve_sent_at"],
        attempts=m["attempts"],
        next_attempt_at=m["next_attempt_at"],
        last_error=m["last_error"],
    )


def open_episodes(db: Database) -> list[Episode]:
    """Return every open episode, oldest first (at most two per task)."""
    query = _episodes().where(_A.open_key.is_not(None)).order_by(_A.opened_at, _A.id)
    with db.engine.connect() as conn:
        return [_to_episode(r) for r in conn.execute(query)]


def episodes(db: Database, *, limit: int = 50) -> list[Episode]:
    """Return the newest ``limit`` episodes, open or resolved, newest first."""
    query = _episodes().order_by(_A.opened_at.desc(), _A.id.desc()).limit(limit)
    with db.engine.connect() as conn:
        return [_to_episode(r) for r in conn.execute(query)]


def _key(task_id: int, kind: str) -> str:
    return f"{task_id}:{kind}"


def apply_changes(
    db: Database, task_id: int, changes: Sequence[Change], now: datetime, *, deliver: bool
) -> list[Change]:
    """Write what the rules decided for one task; return the opens and resolves this call
    wrote (not those another beat wrote first).

    ``deliver``: whether a destination is set (an episode opened without one owes none;
    nor does its resolve).
    """
    done: list[Change] = []
    with db.begin() as conn:
        for change in changes:
            key = _key(task_id, change.kind)
            if change.action == OPEN:
                values = {
                    "periodic_task_id": task_id,
                    "kind": change.kind,
                    "open_key": key,
                    "opened_at": now,
                    "reason": change.reason,
                    "count": change.count,
                    "attempts": 0,
                    "next_attempt_at": now if deliver else None,
                }
                # Another beat opened it first (or the task is gone): nothing to add.
                with contextlib.suppress(IntegrityError), conn.begin_nested():
                    conn.execute(sa.insert(alert).values(**values))
                    done.append(change)
            elif change.action == UPDATE:
                conn.execute(
                    sa.update(alert)
                    .where(_A.open_key == key)
                    .values(reason=change.reason, count=change.count)
                )
            elif change.action == RESOLVE:
                # A resolve is owed only for an open that went; an open still owed (or
                # being sent) schedules it once it is delivered (see ``delivered``).
                owed = sa.case(
                    (sa.and_(_A.sent_at.is_not(None), _A.next_attempt_at.is_(None)), now),
                    else_=_A.next_attempt_at,
                )
                resolved = conn.execute(
                    sa.update(alert)
                    .where(_A.open_key == key)
                    .values(resolved_at=now, open_key=None, next_attempt_at=owed)
                )
                if resolved.rowcount == 1:
                    done.append(change)
    return done


def due(db: Database, now: datetime, *, limit: int = 50) -> list[Episode]:
    """Return up to ``limit`` episodes whose delivery is due at ``now``, longest due first."""
    query = (
        _episodes()
        .where(_A.next_attempt_at <= now)
        .order_by(_A.next_attempt_at, _A.id)
        .limit(limit)
    )
    with db.engine.connect() as conn:
        return [_to_episode(r) for r in conn.execute(query)]


def take(db: Database, episode: Episode, now: datetime, *, lease: float) -> Episode | None:
    """Take ``episode``'s due delivery for ``lease`` seconds; return it as it is now (its
    ``attempts`` counts this one), or ``None`` if another beat took it first."""
    with db.begin() as conn:
        taken = conn.execute(
            sa.update(alert)
            .where(
                _A.id == episode.id,
                _A.attempts == episode.attempts,
                _A.next_attempt_at <= now,
            )
            .values(attempts=_A.attempts + 1, next_attempt_at=now + timedelta(seconds=lease))
        )
        if taken.rowcount != 1:
            return None
        row = conn.execute(_episodes().where(_A.id == episode.id)).one()
    return _to_episode(row)


def delivered(db: Database, episode: Episode, event: str, now: datetime) -> bool:
    """Record that ``event`` (``open`` or ``resolve``) of the taken ``episode`` reached its
    receiver; return whether the take still held. After the open, the resolve is due at
    once if the episode resolved meanwhile."""
    if event == OPEN:
        values: dict[str, Any] = {
            "sent_at": now,
            "next_attempt_at": sa.case((_A.resolved_at.is_(None), None), else_=now),
        }
    else:
        values = {"resolve_sent_at": now, "next_attempt_at": None}
    return _fenced(db, episode, values)


def delivery_failed(db: Database, episode: Episode, error: str, retry_at: datetime) -> bool:
    """Record a failed delivery of the taken ``episode`` and when to try again."""
    text = error if len(error) <= ERROR_CHARS else error[: ERROR_CHARS - 1] + "…"
    return _fenced(db, episode, {"last_error": text, "next_attempt_at": retry_at})


def settled(db: Database, episode: Episode) -> bool:
    """Record that the taken ``episode`` owes nothing after all."""
    return _fenced(db, episode, {"next_attempt_at": None})


def _fenced(db: Database, episode: Episode, values: dict[str, Any]) -> bool:
    with db.begin() as conn:
        written = conn.execute(
            sa.update(alert)
            .where(_A.id == episode.id, _A.attempts == episode.attempts)
            .values(**values)
        )
        return bool(written.rowcount == 1)


def prune_resolved(db: Database, cutoff: datetime, *, batch: int = PRUNE_BATCH) -> int:
    """Delete up to ``batch`` episodes resolved before ``cutoff`` that owe nothing."""
    with db.begin() as conn:
        ids = list(
            conn.execute(
                sa.select(_A.id)
                .where(_A.resolved_at < cutoff, _A.next_attempt_at.is_(None))
                .limit(batch)
            ).scalars()
        )
        if not ids:
            return 0
        return max(conn.execute(sa.delete(alert).where(_A.id.in_(ids))).rowcount, 0)
