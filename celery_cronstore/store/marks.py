"""What beat records around sending its claims: sending, published, dropped, released.

:class:`Marks` writes each step of a send to the ledger, fenced on the claimer (and the
claim's attempt), so a beat that lost its claim to a take-over changes nothing:

- :meth:`Marks.mark_sending` just before a fire a second publish could run twice is
  handed to the broker (``claimed`` to ``sending``, only while its task is enabled: the
  re-check before every attempt). Only the fires it moved are sent.
- :meth:`Marks.mark_published` once the broker took them; :meth:`Marks.mark_maybe_sent`
  when the broker's answer was lost (recorded published with the reason, never sent
  again); :meth:`Marks.release` when they surely did not go (back to ``claimed``, sent
  again later); :meth:`Marks.hand_back` when beat stops (its lease run out at once, for
  the next beat to take over).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta

import sqlalchemy as sa

from celery_cronstore import policy
from celery_cronstore.records import Claim
from celery_cronstore.states import UNSENT, FireState
from celery_cronstore.store.bulk import among
from celery_cronstore.store.db import Database
from celery_cronstore.store.leases import IN_CHUNK
from celery_cronstore.store.look import Look
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.store.seam import TaskSeam

__all__ = ["ANSWER_LOST", "DISABLED_WAITING", "MARK_STEP", "Marks"]

_PT = periodic_task.c
_F = fire.c
#: Seconds: a claim marked published after the fact has its ``published_at`` to this step.
MARK_STEP = 0.01
#: Why a claim whose task was disabled (or removed) before it was sent is dropped.
DISABLED_WAITING = "not published: the task was disabled or paused while the fire waited"
#: Why a fire the broker may or may not have taken is recorded published.
ANSWER_LOST = (
    "the broker's answer was lost while it was sent: it may have gone out, so it is not "
    "sent again (a fire is sent at most once)"
)


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
        self._postgres = db.dialect.name == "postgresql"

    def mark_published(
        self,
        claims: list[Claim],
        ago: Mapping[str, float] | None = None,
        *,
        watch: bool = True,
    ) -> int:
        """Mark claims as published, fenced on this node and each claim's attempt.

        A claim whose task the seam calls ``guarded`` (a fire whose start the ledger will
        record) gets a *start lease* (:func:`~celery_cronstore.policy.start_lease`): if it
        has not started ``start_timeout`` seconds after it was published, beat hands it
        back for another publish or records it ``lost``
        (:func:`~celery_cronstore.policy.decide_redelivery`). ``ago``: seconds since
        each claim (by task id) was published, when it is marked later (``published_at``
        is then the store's now less that, to :data:`MARK_STEP`); else it is now.
        ``watch=False``: no start lease (a fire that may have started already, whose
        start record is lost: never sent again).
        """
        if not claims:
            return 0
        guarded = self._guarded
        groups: dict[tuple[int, bool, int], list[str]] = {}
        for claim in claims:
            # Asked only with a start timeout: without one no fire gets a start lease.
            watching = watch and self.start_timeout is not None and guarded(claim)
            steps = round(ago.get(claim.task_id, 0.0) / MARK_STEP) if ago else 0
            groups.setdefault((claim.attempt, watching, steps), []).append(claim.task_id)
        marked = 0
        with self._begin() as conn:
            now = self.db.now(conn)
            for (attempt, watching, steps), ids in groups.items():
                published = now - timedelta(seconds=steps * MARK_STEP)
                lease = policy.start_lease(published, self.start_timeout, watching)
                for start in range(0, len(ids), IN_CHUNK):
                    result = conn.execute(
                        sa.update(fire)
                        .where(*self._mine(ids[start : start + IN_CHUNK], attempt, UNSENT))
                        .values(
                            state=FireState.PUBLISHED, published_at=published, lease_until=lease
                        )
                    )
                    marked += result.rowcount
        return marked

    def mark_sending(self, claims: list[Claim], *, paused_ok: bool = False) -> list[Claim]:
        """Record that ``claims`` are about to be handed to the broker; return those to send.

        Each moves from ``claimed`` to ``sending``, fenced on this node and its attempt,
        and only while its task is enabled and not paused (``paused_ok``: paused or not,
        for a backfill asked by hand): what a take-over took, or a disable, a pause or a
        removal committed since the claim, is not sent. This is also the re-check of a
        claim taken ahead of its time. A claim of a disabled or paused task is recorded
        ``dropped`` with the reason. Once ``sending``, a fire is never sent again by
        anyone: if beat stops before :meth:`mark_published`, the beat that takes its lease
        over records it published (``policy.decide_take_over``).
        """
        if not claims:
            return []
        moved = 0
        with self._begin() as conn:
            # The tasks first, by primary key, then the fires, by task id: two look-ups
            # by key. One statement joining them left the plan to PostgreSQL's estimates,
            # which mid-burst drove it from every task (40-60 ms a chunk of 250).
            live = self._live(conn, sorted({c.periodic_task_id for c in claims}), paused_ok)
            by_attempt: dict[int, list[str]] = {}
            for claim in claims:
                if claim.periodic_task_id in live:
                    by_attempt.setdefault(claim.attempt, []).append(claim.task_id)
            for attempt, ids in by_attempt.items():
                for start in range(0, len(ids), IN_CHUNK):
                    result = conn.execute(
                        sa.update(fire)
                        .where(
                            *self._mine(
                                ids[start : start + IN_CHUNK], attempt, (FireState.CLAIMED,)
                            )
                        )
                        .values(state=FireState.SENDING)
                    )
                    moved += result.rowcount
            if moved == len(claims):
                return list(claims)
            # Some were not moved: find which are ours to send, drop the disabled ones.
            rows = conn.execute(
                sa.select(_F.task_id, _F.state, _F.claimed_by, _F.attempts).where(
                    among(_F.task_id, [c.task_id for c in claims], self._postgres)
                )
            ).all()
            now = self.db.now(conn)
            sending = {r.task_id for r in rows if r.state == FireState.SENDING}
            ours = {(r.task_id, r.attempts) for r in rows if r.claimed_by == self.node}
            stale = [
                c.task_id
                for c in claims
                if c.task_id not in sending and (c.task_id, c.attempt) in ours
            ]
            _drop_waiting(conn, stale, now, _F.claimed_by == self.node)
        return [c for c in claims if c.task_id in sending and (c.task_id, c.attempt) in ours]

    def mark_maybe_sent(self, claims: list[Claim]) -> int:
        """Record ``sending`` claims the broker may or may not have taken (its answer was
        lost) as published with the reason: at most once, they are not sent again."""
        if not claims:
            return 0
        watched = [c for c in claims if self.start_timeout is not None and self._guarded(c)]
        marked = 0
        with self.db.begin() as conn:
            now = self.db.now(conn)
        seen = {c.task_id for c in watched}
        unwatched = [c for c in claims if c.task_id not in seen]
        for group, watching in ((watched, True), (unwatched, False)):
            lease = policy.start_lease(now, self.start_timeout, watching)
            marked += self._set(
                group,
                (FireState.SENDING,),
                state=FireState.PUBLISHED,
                published_at=now,
                lease_until=lease,
                reason=ANSWER_LOST,
            )
        return marked

    def release(self, claims: list[Claim]) -> int:
        """Put ``sending`` claims that surely did not go back to ``claimed`` (still this
        beat's, under the same lease): they are sent again, after a new re-check."""
        return self._set(claims, (FireState.SENDING,), state=FireState.CLAIMED)

    def hand_back(self, claims: list[Claim]) -> int:
        """Hand claims not sent back at once (their lease run out), for the next beat to
        take over: beat is stopping. A ``sending`` one goes back to ``claimed`` first."""
        if not claims:
            return 0
        with self.db.begin() as conn:
            lapsed = policy.handed_back_lease(self.db.now(conn))
        return self._set(claims, UNSENT, state=FireState.CLAIMED, lease_until=lapsed)

    def _set(self, claims: list[Claim], states: tuple[FireState, ...], **values: object) -> int:
        if not claims:
            return 0
        by_attempt: dict[int, list[str]] = {}
        for claim in claims:
            by_attempt.setdefault(claim.attempt, []).append(claim.task_id)
        done = 0
        with self._begin() as conn:
            for attempt, ids in by_attempt.items():
                for start in range(0, len(ids), IN_CHUNK):
                    result = conn.execute(
                        sa.update(fire)
                        .where(*self._mine(ids[start : start + IN_CHUNK], attempt, states))
                        .values(**values)
                    )
                    done += result.rowcount
        return done

    @contextmanager
    def _begin(self) -> Iterator[sa.Connection]:
        """A write transaction for writes to lists of fires found by key
        (:meth:`Database.by_key`)."""
        with self.db.begin() as conn:
            self.db.by_key(conn)
            yield conn

    def _live(self, conn: sa.Connection, ids: list[int], paused_ok: bool) -> set[int]:
        """Return which periodic tasks ``ids`` exist, are enabled and (unless
        ``paused_ok``) are not paused."""
        live: set[int] = set()
        for start in range(0, len(ids), IN_CHUNK):
            # By primary key alone, judged here: with ``enabled`` in the statement a
            # planner that thinks the table small reads every enabled task instead.
            query = sa.select(_PT.id, _PT.enabled, _PT.paused_at).where(
                among(_PT.id, ids[start : start + IN_CHUNK], self._postgres)
            )
            live.update(
                row.id
                for row in conn.execute(query)
                if row.enabled and (paused_ok or row.paused_at is None)
            )
        return live

    def _mine(
        self, ids: list[str], attempt: int, states: tuple[FireState, ...]
    ) -> tuple[sa.ColumnElement[bool], ...]:
        """The fence of a write to this beat's claims ``ids`` of ``attempt`` in ``states``."""
        return (
            among(_F.task_id, ids, self._postgres),
            unindexed_state(states),
            _F.claimed_by == self.node,
            _F.attempts == attempt,
        )

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
                        _F.state.in_(UNSENT),
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
        """Return the claims whose task still exists, is enabled and is not paused; drop
        the others.

        Beat calls this before publishing claims that waited (a broker outage, a claim
        taken ahead of its time): a task disabled, paused or removed in the meantime must
        not run. Each dropped fire is recorded
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
            # Still this beat's and not sent (``claimed``, or ``sending`` from the claim).
            _drop_waiting(conn, stale, now, _F.claimed_by == self.node)
        return [c for c in claims if c.periodic_task_id in enabled]


def unindexed_state(states: tuple[str, ...]) -> sa.ColumnElement[bool]:
    """``state IN (states)`` written so that no database reads it through an index.

    A write to a list of fires must find them by task id (its unique index: one look-up
    each). With the state in the index's reach, SQLite and PostgreSQL (whose statistics
    say few fires are ever ``claimed``) found them through the state index instead: every
    claimed fire read by every mark of a burst, so each chunk cost more the larger the
    burst (``COALESCE`` of a column that is never NULL is the column).
    """
    return sa.func.coalesce(_F.state, "").in_(states)


def _drop_waiting(
    conn: sa.Connection, ids: list[str], now: datetime, *fence: sa.ColumnElement[bool]
) -> None:
    """Record the claims ``ids`` (not sent: ``claimed``, or ``sending`` by their claim)
    dropped: their task was disabled or removed while they waited to be sent."""
    for start in range(0, len(ids), IN_CHUNK):
        conn.execute(
            sa.update(fire)
            .where(
                _F.task_id.in_(ids[start : start + IN_CHUNK]),
                unindexed_state(UNSENT),
                *fence,
            )
            .values(
                state=FireState.DROPPED, reason=DISABLED_WAITING, lease_until=None, finished_at=now
            )
        )
