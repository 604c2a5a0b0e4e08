"""The ledger side of a plain task's start: one transaction that starts it or refuses it.

A worker whose app reaches the store calls :func:`start_plain` just before the body of a
plain task's fire runs (``worker.plain``). It reads the fire's row and its task's
``enabled``, asks :func:`~celery_cronstore.policy.decide_plain_start`, and writes the
answer fenced on the state it read: of two deliveries of one fire racing, one starts.
"""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from celery_cronstore import policy
from celery_cronstore.policy.plain import NOT_STARTED
from celery_cronstore.states import FireState
from celery_cronstore.store.db import Database
from celery_cronstore.store.restore import kept_report
from celery_cronstore.store.schema import fire, periodic_task

__all__ = ["start_plain"]

_PT = periodic_task.c
_F = fire.c


def start_plain(
    db: Database,
    task_id: str,
    *,
    node: str,
    abandon_after: float,
    retries: int = 0,
    acks_late: bool = False,
) -> tuple[policy.PlainDecision, int | None]:
    """Start fire ``task_id`` of a plain task on ``node``, or refuse it.

    Started: the fire becomes ``started`` with a liveness lease (as a CronTask's), its
    task's ``last_run`` the start. Refused: the fire may be recorded ``dropped`` with the
    reason (a disabled task). Return the decision and, when started, which run of the
    fire it is (its ``reruns``, to fence the end record on).
    """
    with db.begin() as conn:
        now = db.now(conn)
        row = conn.execute(
            sa.select(_F.id, _F.state, _F.reruns, _F.periodic_task_id, _PT.enabled)
            .join_from(fire, periodic_task, _F.periodic_task_id == _PT.id, isouter=True)
            .where(_F.task_id == task_id)
        ).first()
        state = None if row is None else FireState(row.state)
        decision = policy.decide_plain_start(
            policy.PlainSnapshot(
                state=state,
                enabled=bool(row is not None and row.enabled),
                retries=retries,
                acks_late=acks_late,
            )
        )
        if row is None:
            return decision, None
        # Beat may mark the fire published (from ``sending``) between this read and the
        # write: a fire not yet started is fenced on being not yet started, not on the
        # very state read; a second start finds it ``started`` and is refused.
        fence = (_F.id == row.id, _F.state.in_(NOT_STARTED if state in NOT_STARTED else (state,)))
        if not decision.start:
            if decision.record is not None:
                conn.execute(
                    sa.update(fire)
                    .where(*fence)
                    .values(
                        state=decision.record,
                        reason=decision.reason,
                        finished_at=now,
                        lease_until=None,
                    )
                )
            return decision, None
        done = conn.execute(
            sa.update(fire)
            .where(*fence)
            .values(
                state=FireState.STARTED,
                started_at=now,
                node=node,
                reason=kept_report(),
                lease_until=now + timedelta(seconds=abandon_after),
                published_at=sa.func.coalesce(
                    _F.published_at, sa.literal(now, _F.published_at.type)
                ),
            )
        )
        if done.rowcount != 1:  # another delivery of it started first
            return policy.PlainDecision(
                False, None, "duplicate delivery: the fire just started"
            ), None
        conn.execute(
            sa.update(periodic_task).where(_PT.id == row.periodic_task_id).values(last_run=now)
        )
        return decision, int(row.reruns)
