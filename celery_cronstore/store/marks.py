"""What beat records once it tried to send its claims: published, dropped, or gone stale.

:class:`Marks` writes the outcome of a publish to the ledger, fenced on the claimer (and
the claim's attempt), so a beat that lost its claim to a take-over changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import sqlalchemy as sa

from celery_cronstore import policy
from celery_cronstore.records import Claim
from celery_cronstore.states import FireState
from celery_cronstore.store.db import Database
from celery_cronstore.store.leases import IN_CHUNK
from celery_cronstore.store.look import Look
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.store.seam import TaskSeam

__all__ = ["MARK_STEP", "Marks"]

_PT = periodic_task.c
_F = fire.c
#: Seconds: a claim marked published after the fact has its ``published_at`` to this step.
MARK_STEP = 0.01


class Marks:
    """Mark, drop and recheck the claims of one beat process (``node``)."""

    def __init__(
        self,
        db: Database,
        node: str,
        seam: TaskSeam,
        look: Look,
        *,
        start_timeout: float | None,
    ) -> None:
        self.db = db
        self.node = node
        #: Says which fires' starts the ledger will record (``guarded``).
        self.seam = seam
        #: Reads which tasks are still enabled (on beat's held connection, if any).
        self.look = look
        #: Seconds a watched published fire may wait for its start (``None``: forever).
        self.start_timeout = start_timeout

    def mark_published(
        self,
        claims: list[Claim],
        ago: Mapping[str, float] | None = None,
    ) -> int:
        """Mark claims as published, fenced on this node and each claim's attempt.

        A claim whose task the seam calls ``guarded`` (a fire whose start the ledger will
        record) gets a *start lease* (:func:`~celery_cronstore.policy.start_lease`): if it
        has not started ``start_timeout`` seconds after it was published, beat hands it
        back for another publish or records it ``lost``
        (:func:`~celery_cronstore.policy.decide_redelivery`). ``ago``: seconds since
        each claim (by task id) was published, when it is marked later (``published_at``
        is then the store's now less that, to :data:`MARK_STEP`); else it is now.
        """
        if not claims:
            return 0
        watch = self._guarded
        groups: dict[tuple[int, bool, int], list[str]] = {}
        for claim in claims:
            # Asked only with a start timeout: without one no fire gets a start lease.
            watching = self.start_timeout is not None and watch(claim)
            steps = round(ago.get(claim.task_id, 0.0) / MARK_STEP) if ago else 0
            groups.setdefault((claim.attempt, watching, steps), []).append(claim.task_id)
        marked = 0
        with self.db.begin() as conn:
            now = self.db.now(conn)
            for (attempt, watching, steps), ids in groups.items():
                published = now - timedelta(seconds=steps * MARK_STEP)
                lease = policy.start_lease(published, self.start_timeout, watching)
                for start in range(0, len(ids), IN_CHUNK):
                    result = conn.execute(
                        sa.update(fire)
                        .where(
                            _F.task_id.in_(ids[start : start + IN_CHUNK]),
                            _F.state == FireState.CLAIMED,
                            _F.claimed_by == self.node,
                            _F.attempts == attempt,
                        )
                        .values(
                            state=FireState.PUBLISHED, published_at=published, lease_until=lease
                        )
                    )
                    marked += result.rowcount
        return marked

    def _guarded(self, claim: Claim) -> bool:
        return self.seam.guarded(claim.task)

    def drop(self, failed: list[tuple[Claim, str]]) -> int:
        """Record claims that could not be sent (not for a broker outage) and their tasks.

        Each fire becomes ``dropped`` with the reason, and its task goes in error with
        the same reason (no next run until an edit fixes it): one bad row never holds
        back the fires of the others. Return how many fires were recorded.
        """
        dropped = 0
        with self.db.begin() as conn:
            now = self.db.now(conn)
            for claim, reason in failed:
                result = conn.execute(
                    sa.update(fire)
                    .where(
                        _F.task_id == claim.task_id,
                        _F.state == FireState.CLAIMED,
                        _F.claimed_by == self.node,
                    )
                    .values(
                        state=FireState.DROPPED,
                        reason=f"not published: {reason}",
                        lease_until=None,
                        finished_at=now,
                    )
                )
                dropped += result.rowcount
                conn.execute(
                    sa.update(periodic_task)
                    .where(_PT.id == claim.periodic_task_id)
                    .values(error=reason, next_run=None, version=_PT.version + 1)
                )
        return dropped

    def recheck(self, claims: list[Claim]) -> list[Claim]:
        """Return the claims whose task still exists and is enabled; drop the others.

        Beat calls this before publishing claims that waited (a broker outage): a task
        disabled or removed in the meantime must not run. Each dropped fire is recorded
        with the reason.
        """
        if not claims:
            return []
        enabled = self.look.enabled_among(sorted({c.periodic_task_id for c in claims}))
        stale = [c.task_id for c in claims if c.periodic_task_id not in enabled]
        if not stale:
            return list(claims)
        with self.db.begin() as conn:
            now = self.db.now(conn)
            for start in range(0, len(stale), IN_CHUNK):
                conn.execute(
                    sa.update(fire)
                    .where(
                        _F.task_id.in_(stale[start : start + IN_CHUNK]),
                        _F.state == FireState.CLAIMED,
                    )
                    .values(
                        state=FireState.DROPPED,
                        reason="not published: the task was disabled while the fire waited",
                        lease_until=None,
                        finished_at=now,
                    )
                )
        return [c for c in claims if c.periodic_task_id in enabled]
