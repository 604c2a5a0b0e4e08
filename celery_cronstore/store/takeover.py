"""Take over claims whose claimer let the lease run out before they were published.

A beat that dies (or stalls) between its claim and the mark leaves fires ``claimed``
(never handed to the broker) or ``sending`` (handed, or about to be: it may have gone).
:class:`TakeOver` locks those whose lease ran out
(:func:`~celery_cronstore.store.leases.unpublished`), asks
:func:`~celery_cronstore.policy.decide_take_over` what becomes of each, and writes it
fenced on the attempt it read. The ``claimed`` ones taken over go out again under the
same task id; a ``sending`` one is recorded published and never sent again. Fires handed
back on purpose (never started, or re-run after their worker went silent:
``store.inflight``) come this way too.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from celery_cronstore import policy
from celery_cronstore.policy.backfill import requested_by
from celery_cronstore.records import Claim
from celery_cronstore.states import FireState
from celery_cronstore.store.db import Database
from celery_cronstore.store.leases import unpublished
from celery_cronstore.store.refusal import SendCheck, timer_or_none
from celery_cronstore.store.rows import to_task
from celery_cronstore.store.schema import fire, periodic_task

__all__ = ["TakeOver"]

_PT = periodic_task.c
_F = fire.c


class TakeOver:
    """Reclaim lapsed claims for one beat process (``node``)."""

    def __init__(
        self,
        db: Database,
        node: str,
        check: SendCheck,
        *,
        lease: timedelta,
        batch_size: int,
        start_timeout: float | None = None,
    ) -> None:
        self.db = db
        self.node = node
        #: Refuses what beat would not send now (the row may have been edited).
        self.check = check
        self.lease = lease
        self.batch_size = batch_size
        #: Seconds a fire recorded published may wait for its start (``store.marks``).
        self.start_timeout = start_timeout

    def reclaim_expired(self) -> list[Claim]:
        """Take over claims whose lease ran out unpublished; return them to publish again."""
        with self.db.begin() as conn:
            now = self.db.now(conn)
            query = (
                # The task's columns first: both tables have an ``id``, and ``to_task`` reads
                # the task's by name (the ledger row's is read as ``_F.id``).
                sa.select(periodic_task, fire)
                .join_from(fire, periodic_task, _F.periodic_task_id == _PT.id)
                .where(unpublished(now))
                .order_by(_F.lease_until)
                .limit(self.batch_size)
            )
            claims: list[Claim] = []
            for row in conn.execute(self.db.locked(query, skip_locked=True, of=fire)).all():
                claim = self._take_over(conn, row, now)
                if claim is not None:
                    claims.append(claim)
        return claims

    def _take_over(self, conn: sa.Connection, row: sa.Row[Any], now: datetime) -> Claim | None:
        """Write what policy decides for one lapsed claim; return it if it goes out again."""
        m = row._mapping
        task = to_task(row)
        claim = policy.make_claim(
            task, m[_F.fire_time], m[_F.task_id], m[_F.attempts] + 1, timer_or_none(task)
        )
        claim = replace(claim, requested=requested_by(m[_F.reason]))  # run-now, backfill
        decision = policy.decide_take_over(
            policy.TakeOverSnapshot(
                now=now,
                node=self.node,
                lease=self.lease,
                lease_until=m[_F.lease_until],
                attempts=m[_F.attempts],
                refused=self.check.refusal(task, row),
                enabled=task.enabled,
                expires=claim.expires,
                sending=m[_F.state] == FireState.SENDING,
                start_lease=policy.start_lease(
                    now, self.start_timeout, self.check.seam.guarded(task.task)
                ),
            )
        )
        if decision is None:  # still its claimer's (the lock was taken as it renewed)
            return None
        result = conn.execute(
            sa.update(fire)
            .where(_F.id == m[_F.id], _F.attempts == m[_F.attempts], _F.state == m[_F.state])
            .values(**decision.values())
        )
        return claim if result.rowcount == 1 and decision.republish else None
