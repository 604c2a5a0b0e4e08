"""The worker side of the ledger: the SQL behind :class:`celery_cronstore.CronTask`.

A CronTask run that beat published (it carries the ``cronstore_*`` headers) asks
:func:`start_fire` before its body runs. In ONE transaction, holding the periodic task's
row lock (``FOR UPDATE``; SQLite transactions are ``BEGIN IMMEDIATE`` already), it reads
the fire's ledger row and the task's ``last_run`` and decides:

* a second delivery of a fire that already started or ended is a **duplicate**: the run
  is refused and nothing is written (the ledger row belongs to the first delivery);
* a retry (``retries > 0``) of a fire in state ``retrying`` starts again: same fire, no
  early check, ``last_run`` unchanged;
* a fire started later than its task's ``start_deadline`` after its fire time is
  **expired** (beat does not give a CronTask's message an ``expires``: Celery would
  measure it on beat's clock);
* with overlap policy ``skip``, a fire whose predecessor is still running is **skipped**;
* a fire older than one that already started is **superseded**: it is **dropped**;
* ``now < last_run + gap - tolerance`` is **early** (``gap``: from the previous fire to
  this one, at most the interval to the next): the fire is **dropped**;
* otherwise the fire is **started**: ledger state ``started`` with ``started_at`` and the
  node, and ``periodic_task.last_run = now`` (start time, not finish time).

Refusals that concern the fire itself (skipped, dropped) are written with a reason.
Time is the store's clock (the database's; an injected clock in tests).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from celery_cronstore.errors import TimerError
from celery_cronstore.store.rows import summarize
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.store.store import Store
from celery_cronstore.store.types import dumps, loads
from celery_cronstore.timers import parse_timer

__all__ = [
    "FINISH_STATES",
    "STALE_RUNNING",
    "StartDecision",
    "checkpoint",
    "expire_fire",
    "finish_fire",
    "start_fire",
]

logger = logging.getLogger("celery_cronstore.task")

_PT = periodic_task.c
_F = fire.c

#: Ledger states a started fire may end in (``retrying`` waits for the retry message).
FINISH_STATES = ("succeeded", "failed", "timed_out", "retrying")
#: Ledger states of a fire that was published but has not started.
_STARTABLE = ("claimed", "published")
#: Ledger states of a fire that is in progress on a worker.
_RUNNING = ("started", "retrying")
#: A run that started this long ago without finishing no longer blocks (worker died).
STALE_RUNNING = timedelta(hours=6)


@dataclass(frozen=True)
class StartDecision:
    """What :func:`start_fire` decided for one delivery of one fire."""

    #: Whether the body may run.
    started: bool
    #: ``started``, ``retry`` (a retry of a started fire), ``dropped``, ``skipped``,
    #: ``expired`` (past the starting deadline, on the store's clock) or ``duplicate``
    #: (refused; nothing written) or ``unknown`` (no ledger row).
    outcome: str
    task_id: str
    #: Why the run was refused (``None`` when it starts).
    reason: str | None
    #: The store's time when the decision was taken (the run's start when it starts).
    now: datetime
    name: str | None = None
    periodic_task_id: int | None = None
    fire_time: datetime | None = None
    #: ``last_run`` as the guard read it, before this decision changed it.
    last_run: datetime | None = None
    #: Seconds from this fire to the timer's next one (``None``: no next fire).
    interval: float | None = None
    tolerance: float | None = None
    #: The cooperative deadline: start + interval / 2 (``None`` without an interval).
    deadline: datetime | None = None
    resume_state: Any = None
    max_retries: int = 0
    #: Whether the refusal was written to the ledger.
    recorded: bool = False


def _locked(store: Store, query: sa.Select[Any], *, read: bool = False) -> sa.Select[Any]:
    # A locking read also sees the newest committed row under MariaDB's REPEATABLE READ.
    if store.engine.dialect.name == "sqlite":
        return query
    return query.with_for_update(read=read)


def _interval_from_timer(row: Any, fire_time: datetime) -> float | None:
    try:
        timer = parse_timer(row.timer, kind=row.timer_kind, tz=row.tz)
    except (TimerError, ValueError):
        return None
    following = timer.next_after(fire_time)
    return None if following is None else (following - fire_time).total_seconds()


def _gap_before(conn: sa.Connection, pt_id: int, fire_time: datetime) -> float | None:
    """Return seconds from the task's previous ledger fire to ``fire_time`` (``None``: none)."""
    previous = conn.execute(
        sa.select(sa.func.max(_F.fire_time)).where(
            _F.periodic_task_id == pt_id, _F.fire_time < fire_time
        )
    ).scalar_one_or_none()
    if previous is None:
        return None
    return float((fire_time - previous).total_seconds())


def start_fire(
    store: Store,
    task_id: str,
    *,
    node: str,
    tolerance: float = 5.0,
    retries: int = 0,
    interval: float | None = None,
) -> StartDecision:
    """Decide whether the delivery of fire ``task_id`` starts; record it (one transaction).

    ``tolerance`` is the default slack (the periodic task's own ``tolerance`` column wins);
    ``interval`` is the ``cronstore_interval`` header (recomputed from the timer when
    ``None``); ``retries`` is Celery's ``request.retries``.
    """
    with store.begin() as conn:
        pt_id = conn.execute(
            sa.select(_F.periodic_task_id).where(_F.task_id == task_id)
        ).scalar_one_or_none()
        now = store.now(conn)
        if pt_id is None:
            return StartDecision(
                False,
                "unknown",
                task_id,
                "no ledger row for this task id (periodic task removed?)",
                now,
            )
        task = conn.execute(_locked(store, sa.select(periodic_task).where(_PT.id == pt_id))).one()
        # Read the clock again now that we hold the lock: a run that waited for it must
        # not be judged "early" against a last_run written after its first reading.
        now = store.now(conn)
        row = conn.execute(
            _locked(
                store,
                sa.select(_F.id, _F.state, _F.fire_time, _F.started_at).where(
                    _F.task_id == task_id
                ),
            )
        ).one()
        tol = float(task.tolerance) if task.tolerance is not None else float(tolerance)
        if interval is None:
            interval = _interval_from_timer(task, row.fire_time)
        base = {
            "task_id": task_id,
            "now": now,
            "name": task.name,
            "periodic_task_id": pt_id,
            "fire_time": row.fire_time,
            "last_run": task.last_run,
            "interval": interval,
            "tolerance": tol,
            "resume_state": loads(task.resume_state, None),
            "max_retries": int(task.max_retries),
        }
        deadline = None if interval is None else now + timedelta(seconds=interval / 2)

        def refuse(outcome: str, reason: str) -> StartDecision:
            recorded = False
            if outcome in ("dropped", "skipped", "expired"):
                result = conn.execute(
                    sa.update(fire)
                    .where(_F.id == row.id, _F.state.in_(_STARTABLE))
                    .values(
                        state=outcome,
                        reason=reason,
                        node=node,
                        finished_at=now,
                        lease_until=None,
                    )
                )
                recorded = result.rowcount == 1
            return StartDecision(False, outcome, reason=reason, recorded=recorded, **base)

        if retries > 0 and row.state == "retrying":
            conn.execute(
                sa.update(fire)
                .where(_F.id == row.id, _F.state == "retrying")
                .values(state="started", node=node, reason=None)
            )
            return StartDecision(True, "retry", reason=None, deadline=deadline, **base)
        if row.state not in _STARTABLE:
            return refuse("duplicate", f"duplicate delivery: fire {task_id} is already {row.state}")
        if not task.enabled:
            return refuse("dropped", "periodic task is disabled")
        if task.start_deadline is not None:
            late = (now - row.fire_time).total_seconds()
            if late > float(task.start_deadline):
                return refuse(
                    "expired",
                    f"not started: {late:.1f}s late, past the starting deadline of "
                    f"{float(task.start_deadline):g}s",
                )
        if task.overlap_policy == "skip":
            running = conn.execute(
                _locked(
                    store,
                    sa.select(_F.fire_time, _F.state)
                    .where(
                        _F.periodic_task_id == pt_id,
                        _F.id != row.id,
                        _F.state.in_(_RUNNING),
                        _F.started_at > now - STALE_RUNNING,
                    )
                    .order_by(_F.fire_time.desc())
                    .limit(1),
                    read=True,
                )
            ).first()
            if running is not None:
                return refuse(
                    "skipped",
                    f"not started: fire {running.fire_time.isoformat()} is still "
                    f"{running.state} (overlap policy skip)",
                )
        later = conn.execute(
            sa.select(_F.fire_time)
            .where(
                _F.periodic_task_id == pt_id,
                _F.fire_time > row.fire_time,
                _F.started_at.is_not(None),
            )
            .limit(1)
        ).first()
        if later is not None:
            # A re-published fire (its beat died before marking it) that arrives after a
            # later fire already ran: running it now would also push the next on-time
            # fire out as "early".
            return refuse(
                "dropped",
                f"superseded: the later fire {later.fire_time.isoformat()} already started",
            )
        if interval is not None and task.last_run is not None:
            # The gap that led up to THIS fire, not the one after it: they differ for
            # irregular timers (seconds 19, 20, 41: the on-time :20 run is not early).
            gap = min(interval, _gap_before(conn, pt_id, row.fire_time) or interval)
            earliest = task.last_run + timedelta(seconds=gap - tol)
            if now < earliest:
                return refuse(
                    "dropped",
                    f"early: started at {now.isoformat()}, before last run "
                    f"{task.last_run.isoformat()} + interval {gap:g}s - tolerance "
                    f"{tol:g}s = {earliest.isoformat()}",
                )
        result = conn.execute(
            sa.update(fire)
            .where(_F.id == row.id, _F.state.in_(_STARTABLE))
            .values(state="started", started_at=now, node=node, reason=None, lease_until=None)
        )
        if result.rowcount != 1:  # cannot happen while we hold the locks; be safe anyway
            return refuse("duplicate", f"duplicate delivery: fire {task_id} changed state")
        conn.execute(sa.update(periodic_task).where(_PT.id == pt_id).values(last_run=now))
        return StartDecision(True, "started", reason=None, deadline=deadline, **base)


def finish_fire(
    store: Store,
    task_id: str,
    state: str,
    *,
    result: Any = None,
    error: str | None = None,
) -> bool:
    """Record how a started fire ended; return whether the fire was still in flight.

    ``state`` is one of :data:`FINISH_STATES`. ``result`` is summarized into the ledger;
    ``error`` goes to the row's ``reason``. ``retrying`` keeps the fire in flight until
    its retry starts (:func:`start_fire` with ``retries > 0``).
    """
    if state not in FINISH_STATES:
        raise ValueError(f"state must be one of {FINISH_STATES}, got {state!r}")
    values: dict[str, Any] = {"state": state, "reason": error}
    if result is not None:
        values["result"] = summarize(result)
    with store.begin() as conn:
        if state != "retrying":
            values["finished_at"] = store.now(conn)
        done = conn.execute(
            sa.update(fire).where(_F.task_id == task_id, _F.state.in_(_RUNNING)).values(**values)
        )
        return bool(done.rowcount == 1)


def expire_fire(store: Store, task_id: str, reason: str) -> bool:
    """Record that a worker discarded fire ``task_id`` unstarted because its message expired.

    Return whether a published (or still claimed) fire was moved to ``expired``.
    """
    with store.begin() as conn:
        now = store.now(conn)
        done = conn.execute(
            sa.update(fire)
            .where(_F.task_id == task_id, _F.state.in_(_STARTABLE))
            .values(state="expired", reason=reason, finished_at=now, lease_until=None)
        )
        return bool(done.rowcount == 1)


def checkpoint(store: Store, task_id: str, state: Any) -> bool:
    """Store ``state`` (JSON) as the resume state of the task whose fire ``task_id`` runs.

    Fenced on the fire still being ``started``: a run that was already recorded as ended
    (or never started) cannot overwrite the state. Return whether it was stored.
    """
    text = None if state is None else dumps(state)
    running = (
        sa.select(_F.periodic_task_id)
        .where(_F.task_id == task_id, _F.state == "started")
        .scalar_subquery()
    )
    with store.begin() as conn:
        done = conn.execute(
            sa.update(periodic_task).where(_PT.id == running).values(resume_state=text)
        )
        return bool(done.rowcount == 1)
