"""The worker side of the ledger: the SQL behind :class:`celery_cronstore.CronTask`.

A CronTask run that beat published (it carries the ``cronstore_*`` headers) asks
:func:`start_fire` before its body runs. In ONE transaction it locks the periodic task's
row (``FOR UPDATE``; SQLite transactions are ``BEGIN IMMEDIATE`` already), reads a
snapshot of the fire, lets :func:`celery_cronstore.policy.decide_start` decide (the
decision table is documented there) and writes the outcome: ``started`` with
``last_run = now`` (start time, not finish time), or the refusal with its reason.
:func:`finish_fire`, :func:`expire_fire` and :func:`checkpoint` record the rest of a run.
Time is the store's clock (the database's; an injected clock in tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from celery_cronstore import policy
from celery_cronstore.records import PeriodicTask
from celery_cronstore.states import FINISH_STATES, STARTABLE, WORKER_RUNNING, FireState
from celery_cronstore.store.db import Database
from celery_cronstore.store.failures import clip
from celery_cronstore.store.restore import kept_report
from celery_cronstore.store.rows import summarize, to_task
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.store.start_reads import fire_interval, snapshot
from celery_cronstore.store.types import dumps

__all__ = [
    "RunStart",
    "checkpoint",
    "expire_fire",
    "finish_fire",
    "keep_alive",
    "record_start",
    "start_fire",
]

_PT = periodic_task.c
_F = fire.c


@dataclass(frozen=True)
class RunStart:
    """What :func:`start_fire` decided for one delivery of one fire, and what the run needs."""

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
    #: Which run of the fire this is: 0, or 1 for a re-run after its worker went silent.
    #: The worker's end-of-run records and heartbeats are fenced on it.
    rerun: int = 0


def start_fire(
    db: Database,
    task_id: str,
    *,
    node: str,
    tolerance: float = 5.0,
    retries: int = 0,
    interval: float | None = None,
    abandon_after: float = 120.0,
    requested: bool = False,
) -> RunStart:
    """Decide whether the delivery of fire ``task_id`` starts; record it (one transaction).

    ``tolerance`` is the default slack (the periodic task's own ``tolerance`` column wins);
    ``interval`` is the ``cronstore_interval`` header (recomputed from the timer when
    ``None``); ``retries`` is Celery's ``request.retries``. A started fire gets a liveness
    lease of ``abandon_after`` seconds, which the worker's heartbeats renew
    (:func:`keep_alive`). ``requested``: the message says the fire was asked for by hand
    (run-now, backfill): it is not judged early or superseded, and its start does not
    move the task's ``last_run`` (the next scheduled fire is judged against its own).
    """
    with db.begin() as conn:
        pt_id = conn.execute(
            sa.select(_F.periodic_task_id).where(_F.task_id == task_id)
        ).scalar_one_or_none()
        if pt_id is None:
            reason = "no ledger row for this task id (periodic task removed?)"
            return RunStart(False, "unknown", task_id, reason, db.now(conn))
        task = to_task(
            conn.execute(db.locked(sa.select(periodic_task).where(_PT.id == pt_id))).one()
        )
        # Read the clock now that we hold the lock: a run that waited for it must not be
        # judged "early" against a last_run written after an earlier reading.
        now = db.now(conn)
        row = conn.execute(
            db.locked(
                sa.select(_F.id, _F.state, _F.fire_time, _F.reruns).where(_F.task_id == task_id)
            )
        ).one()
        if interval is None:
            interval = fire_interval(task, row.fire_time)
        snap = snapshot(
            db, conn, task, row, now, retries, interval, tolerance, task_id, requested=requested
        )
        decision = policy.decide_start(snap)
        recorded = False
        if not decision.started:
            recorded = decision.recorded and _record_refusal(conn, row.id, decision, node, now)
        elif not _record_start(
            conn, task, row, decision, node, now, abandon_after, moves_last_run=not requested
        ):
            # Cannot happen while we hold the locks; be safe anyway.
            decision = policy.StartDecision(
                "duplicate", f"duplicate delivery: fire {task_id} changed state"
            )
        return RunStart(
            decision.started,
            decision.outcome,
            task_id,
            decision.reason,
            now,
            name=task.name,
            periodic_task_id=pt_id,
            fire_time=row.fire_time,
            last_run=task.last_run,
            interval=interval,
            tolerance=snap.tolerance,
            deadline=policy.deadline(now, interval) if decision.started else None,
            resume_state=task.resume_state,
            max_retries=int(task.max_retries),
            recorded=recorded,
            rerun=int(row.reruns),
        )


def _record_refusal(
    conn: sa.Connection, fire_id: int, decision: policy.StartDecision, node: str, now: datetime
) -> bool:
    result = conn.execute(
        sa.update(fire)
        .where(_F.id == fire_id, _F.state.in_(STARTABLE))
        .values(
            state=decision.outcome,
            reason=decision.reason,
            node=node,
            finished_at=now,
            lease_until=None,
        )
    )
    return bool(result.rowcount == 1)


def _record_start(
    conn: sa.Connection,
    task: PeriodicTask,
    row: sa.Row[Any],
    decision: policy.StartDecision,
    node: str,
    now: datetime,
    abandon_after: float,
    *,
    moves_last_run: bool = True,
) -> bool:
    alive = now + timedelta(seconds=abandon_after)
    if decision.outcome == "retry":
        conn.execute(
            sa.update(fire)
            .where(_F.id == row.id, _F.state == FireState.RETRYING)
            .values(state=FireState.STARTED, node=node, reason=kept_report(), lease_until=alive)
        )
        return True
    values: dict[str, Any] = {
        "state": FireState.STARTED,
        "started_at": now,
        "node": node,
        "lease_until": alive,
        "published_at": _published_by(now),
    }
    if not row.reruns:
        values["reason"] = None  # a re-run keeps why it runs again
    result = conn.execute(
        sa.update(fire)
        .where(_F.id == row.id, _F.state.in_(STARTABLE), _F.reruns == row.reruns)
        .values(**values)
    )
    if result.rowcount != 1:
        return False
    if not row.reruns and moves_last_run:
        # A re-run leaves last_run at its fire's first start: judged against the re-run's
        # start, the next on-time fire would be dropped as early. So does a fire asked
        # for by hand (a backfilled one would make the next scheduled one "early").
        conn.execute(sa.update(periodic_task).where(_PT.id == task.id).values(last_run=now))
    return True


def finish_fire(
    db: Database,
    task_id: str,
    state: str,
    *,
    result: Any = None,
    error: str | None = None,
    detail: str | None = None,
    hold: float | None = None,
    run: int | None = None,
    node: str | None = None,
    started_before: timedelta | None = None,
) -> bool:
    """Record how a started fire ended; return whether the fire was still in flight.

    ``state`` is one of :data:`~celery_cronstore.states.FINISH_STATES`. ``result`` is
    summarized into the ledger; ``error`` goes to the row's ``reason`` (a re-run that
    ends without one keeps why it ran again); ``detail`` (a traceback the worker scrubbed)
    to ``detail``, clipped (``failures.clip``). ``retrying`` keeps the fire in flight until
    its retry starts (:func:`start_fire`, ``retries > 0``); ``hold`` is then how long it
    may wait for that (its liveness lease, in seconds). ``run``
    (:attr:`RunStart.rerun`) fences the record on the run it belongs to: a worker that
    went silent and comes back after its fire was re-run elsewhere records nothing.
    A caller that does not know the run (the worker's main process, after a hard time
    limit kill) fences on what it does know instead: the ``node`` that ran it, and that
    it started at least ``started_before`` ago (:func:`~celery_cronstore.policy.
    killed_run_age`).
    """
    if state not in FINISH_STATES:
        # Plain values: the message reads as it did when the states were bare strings.
        allowed = tuple(s.value for s in FINISH_STATES)
        raise ValueError(f"state must be one of {allowed}, got {str(state)!r}")
    values: dict[str, Any] = {
        "state": state,
        "reason": error if error is not None else sa.case((_F.reruns > 0, _F.reason)),
        "detail": None if detail is None else clip(detail),
    }
    if result is not None:
        values["result"] = summarize(result)
    with db.begin() as conn:
        now = db.now(conn)
        if state == FireState.RETRYING:
            values["lease_until"] = now + timedelta(seconds=hold or 0)
        else:
            values.update(finished_at=now, lease_until=None)
        fences = list(_fence(run))
        if node is not None:
            fences.append(_F.node == node)
        if started_before is not None:
            fences.append(_F.started_at <= now - started_before)
        done = conn.execute(
            sa.update(fire)
            .where(_F.task_id == task_id, _F.state.in_(WORKER_RUNNING), *fences)
            .values(**values)
        )
        return bool(done.rowcount == 1)


def _published_by(now: datetime) -> sa.ColumnElement[Any]:
    """``published_at`` of a fire that starts: a start may overtake beat's mark (beat marks
    a burst's fires together, after they went), and the fire was published by then."""
    return sa.func.coalesce(_F.published_at, sa.literal(now, _F.published_at.type))


def _fence(run: int | None) -> tuple[sa.ColumnElement[bool], ...]:
    """The condition that a record of run ``run`` of a fire still belongs to it."""
    return () if run is None else (_F.reruns == run,)


def record_start(db: Database, task_id: str, *, node: str, abandon_after: float) -> int | None:
    """Record that a fire of a plain task (no guard) started on ``node``.

    Its ledger row becomes ``started`` (with a liveness lease, as a CronTask's) and the
    periodic task's ``last_run`` its start. Return which run of the fire was started
    (its ``reruns``: 0, or 1 for a re-run after its worker went silent), to fence the
    end record on (:func:`finish_fire`'s ``run``); ``None`` if no published fire was.
    """
    with db.begin() as conn:
        now = db.now(conn)
        done = conn.execute(
            sa.update(fire)
            .where(_F.task_id == task_id, _F.state.in_(STARTABLE))
            .values(
                state=FireState.STARTED,
                started_at=now,
                node=node,
                lease_until=now + timedelta(seconds=abandon_after),
                published_at=_published_by(now),
            )
        )
        if done.rowcount != 1:
            return None
        row = conn.execute(
            sa.select(_F.periodic_task_id, _F.reruns).where(_F.task_id == task_id)
        ).one()
        conn.execute(
            sa.update(periodic_task).where(_PT.id == row.periodic_task_id).values(last_run=now)
        )
        return int(row.reruns)


def keep_alive(
    db: Database, task_ids: list[str], abandon_after: float, *, run: int | None = None
) -> int:
    """Renew the liveness lease of the running fires ``task_ids`` (one statement).

    A worker calls this every quarter of ``abandon_after`` for the fires it runs; beat
    records a fire whose lease lapsed ``abandoned``. ``run`` fences it as in
    :func:`finish_fire`. Return how many fires were renewed.
    """
    if not task_ids:
        return 0
    with db.begin() as conn:
        now = db.now(conn)
        done = conn.execute(
            sa.update(fire)
            .where(_F.task_id.in_(task_ids), _F.state.in_(WORKER_RUNNING), *_fence(run))
            .values(lease_until=now + timedelta(seconds=abandon_after))
        )
        return max(done.rowcount, 0)


def expire_fire(db: Database, task_id: str, reason: str) -> bool:
    """Record that a worker discarded fire ``task_id`` unstarted because its message expired.

    Return whether a published (or still claimed) fire was moved to ``expired``.
    """
    with db.begin() as conn:
        now = db.now(conn)
        done = conn.execute(
            sa.update(fire)
            .where(_F.task_id == task_id, _F.state.in_(STARTABLE))
            .values(state=FireState.EXPIRED, reason=reason, finished_at=now, lease_until=None)
        )
        return bool(done.rowcount == 1)


def checkpoint(db: Database, task_id: str, state: Any, *, run: int | None = None) -> bool:
    """Store ``state`` (JSON) as the resume state of the task whose fire ``task_id`` runs.

    Fenced on the fire still being ``started`` (and on ``run``, as in
    :func:`finish_fire`): a run that was already recorded as ended (or never started, or
    re-run elsewhere) cannot overwrite the state. Return whether it was stored.
    """
    text = None if state is None else dumps(state)
    running = (
        sa.select(_F.periodic_task_id)
        .where(_F.task_id == task_id, _F.state == FireState.STARTED, *_fence(run))
        .scalar_subquery()
    )
    with db.begin() as conn:
        done = conn.execute(
            sa.update(periodic_task).where(_PT.id == running).values(resume_state=text)
        )
        return bool(done.rowcount == 1)
