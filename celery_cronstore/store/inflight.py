"""Settle fires that went out but went quiet: started and silent, or published and unstarted.

:class:`InFlight` finds them by their lapsed leases (:func:`~celery_cronstore.store.leases.silent`,
:func:`~celery_cronstore.store.leases.unstarted`), asks policy what becomes of each
(:func:`~celery_cronstore.policy.decide_abandoned`,
:func:`~celery_cronstore.policy.decide_redelivery`) and writes it in the same transaction,
fenced on the fire still being as it was read. A fire handed back for another publish is
left ``claimed`` with its lease run out: ``store.takeover`` publishes it again under the
same task id.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from celery_cronstore import policy
from celery_cronstore.states import STARTABLE, FireState
from celery_cronstore.store.db import Database
from celery_cronstore.store.leases import IN_CHUNK, silent, unstarted
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.store.seam import TaskSeam

__all__ = ["InFlight"]

_PT = periodic_task.c
_F = fire.c


class InFlight:
    """Abandon silent fires and redeliver unstarted ones, as one beat process sees them."""

    def __init__(
        self,
        db: Database,
        seam: TaskSeam,
        *,
        batch_size: int,
        start_timeout: float | None,
        max_redeliveries: int,
    ) -> None:
        self.db = db
        #: Says whether a second publish of a task starts at most once (``redeliverable``).
        self.seam = seam
        self.batch_size = batch_size
        self.start_timeout = start_timeout
        #: How many times a fire that never started may be published again.
        self.max_redeliveries = max_redeliveries

    def abandon_silent(self) -> int:
        """Settle started fires whose worker stopped heartbeating; return how many.

        A worker renews the liveness lease of each fire it runs; one killed (kill -9, an
        OOM kill, a lost host) or cut off from the database stops. Such a fire no longer
        blocks its task (overlap policy ``skip``). What becomes of it is the task's
        ``abandon_policy`` (the rule: :func:`celery_cronstore.policy.decide_abandoned`),
        written in this one transaction: recorded ``abandoned`` with the reason, or, for
        a fire the rule re-runs, handed back (state ``claimed``, lease run out,
        ``reruns`` + 1) to be published again under the same task id. Whether a second
        publish of a task starts at most once is the seam's ``redeliverable``.
        """
        again = self.seam.redeliverable
        settled = 0
        with self.db.begin() as conn:
            now = self.db.now(conn)
            # The rule's first line in SQL: every silent fire of a task whose policy is
            # "leave" (the default) is recorded in one statement, however many there are.
            rerun_tasks = sa.select(_PT.id).where(_PT.abandon_policy == "rerun")
            result = conn.execute(
                sa.update(fire)
                .where(silent(now), _F.periodic_task_id.not_in(rerun_tasks))
                .values(
                    state=FireState.ABANDONED,
                    finished_at=now,
                    lease_until=None,
                    reason=sa.literal("its worker ")
                    + sa.func.coalesce(_F.node, "?")
                    + sa.literal(policy.ABANDONED),
                )
            )
            settled += max(result.rowcount, 0)
            query = (
                sa.select(
                    _F.id,
                    _F.periodic_task_id,
                    _F.fire_time,
                    _F.node,
                    _F.reruns,
                    _PT.task,
                    _PT.enabled,
                    _PT.start_deadline,
                    _PT.abandon_policy,
                )
                .join_from(fire, periodic_task, _F.periodic_task_id == _PT.id)
                .where(silent(now), _PT.abandon_policy == "rerun")
                .limit(self.batch_size)
            )
            for row in conn.execute(query).all():
                decision = policy.decide_abandoned(
                    policy.AbandonSnapshot(
                        now=now,
                        fire_time=row.fire_time,
                        node=row.node,
                        policy=row.abandon_policy,
                        reruns=row.reruns,
                        enabled=bool(row.enabled),
                        start_deadline=row.start_deadline,
                        later=_later_fire(conn, row.periodic_task_id, row.fire_time),
                        redeliverable=again(row.task),
                    )
                )
                values: dict[str, Any] = {"reason": decision.reason}
                if decision.rerun:
                    values.update(
                        state=FireState.CLAIMED,
                        lease_until=policy.handed_back_lease(now),
                        reruns=row.reruns + 1,
                    )
                else:
                    values.update(state=FireState.ABANDONED, finished_at=now, lease_until=None)
                # Fenced: a heartbeat that came in meanwhile, or another beat that settled
                # the fire first, leaves it alone.
                result = conn.execute(
                    sa.update(fire)
                    .where(_F.id == row.id, _F.reruns == row.reruns, silent(now))
                    .values(**values)
                )
                settled += max(result.rowcount, 0)
        return settled

    def redeliver_unstarted(self) -> int:
        """Hand back published fires whose start lease ran out without a start.

        Each is decided by :func:`celery_cronstore.policy.decide_redelivery`: put back in
        state ``claimed`` with an expired lease (published again under the same task id,
        up to ``max_redeliveries`` times) when the seam says its task is
        ``redeliverable``, else recorded ``lost`` with the reason: sending it again could
        run it twice. Return how many were handed back.
        """
        again = self.seam.redeliverable
        with self.db.begin() as conn:
            now = self.db.now(conn)
            query = (
                sa.select(_F.id, _F.attempts, _PT.task)
                .join_from(fire, periodic_task, _F.periodic_task_id == _PT.id)
                .where(unstarted(now))
                .limit(self.batch_size)
            )
            # One statement per outcome (the lost ones per reason), not one per fire.
            outcomes: dict[policy.RedeliveryDecision, list[int]] = {}
            for row in conn.execute(query):
                decision = policy.decide_redelivery(
                    policy.RedeliverySnapshot(
                        now=now,
                        attempts=row.attempts,
                        redeliverable=again(row.task),
                        max_redeliveries=self.max_redeliveries,
                        start_timeout=self.start_timeout or 0,
                    )
                )
                outcomes.setdefault(decision, []).append(row.id)
            handed_back = 0
            for decision, ids in outcomes.items():
                values: dict[str, Any] = {"state": decision.state, "lease_until": None}
                if decision.again:
                    handed_back += len(ids)
                    values["lease_until"] = decision.lease_until
                else:
                    values.update(finished_at=now, reason=decision.reason)
                for start in range(0, len(ids), IN_CHUNK):
                    conn.execute(
                        sa.update(fire)
                        .where(_F.id.in_(ids[start : start + IN_CHUNK]), unstarted(now))
                        .values(**values)
                    )
            return handed_back


def _later_fire(conn: sa.Connection, task_id: int, fire_time: datetime) -> datetime | None:
    """Fire time of a later fire of task ``task_id`` that started or will (claimed or
    published), if any: what supersedes an abandoned fire."""
    return conn.execute(
        sa.select(_F.fire_time)
        .where(
            _F.periodic_task_id == task_id,
            _F.fire_time > fire_time,
            sa.or_(_F.started_at.is_not(None), _F.state.in_(STARTABLE)),
        )
        .limit(1)
    ).scalar_one_or_none()
