"""Claims taken ahead of their fire time (``cronstore_claim_ahead``): beat's timing.

A mixin of :class:`celery_cronstore.Scheduler`. Beat claims a fire up to
``claim_ahead`` seconds before its time (planned as of that time), holds the claim and
publishes it when its time comes on this host's monotonic clock, so the claim's
transaction does not make the fire late. Just before publishing, the tasks of the claims
taken ahead are read again: one disabled or removed meanwhile is recorded ``dropped``
(``Claimer.recheck``), so a disable committed before a fire's time stops it, as it
does without claiming ahead. Housekeeping and new claims wait while a held fire is due
sooner than twice what they lately take.

Before a burst (more fires due within a second than one claim takes) beat starts sooner
than ``claim_ahead``: early enough to claim them all at the pace its claims lately kept
(``policy.lead``), so the whole burst is held when its time comes.

While held fires follow each other closely (a burst), beat spends its time publishing
them: it does not look at the database while the next one is due within :data:`NEAR`,
and marks the published ones in the ledger together once the fires leave a gap of
:data:`MARK_GAP` (or after :data:`MARK_AGE`, or :data:`MARK_MOST` of them) instead of one
transaction per tick. Only fires a second publish cannot start twice wait for that mark
(CronTask, whose guard starts one copy, or a task that acknowledges late): a claim not yet
marked is still ``claimed`` under beat's lease, so a crash before the mark has the fire
published again, under the same task id, by the replica that takes the lease over. A plain
task's fires are marked as soon as they went, as always.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery_cronstore.beat.chores import HEARTBEAT_EVERY
from celery_cronstore.config import Config
from celery_cronstore.policy.lead import (
    BURST_SPAN,
    COUNT_CAP,
    MIN_ROWS_TIMED,
    claim_lead,
    lead_bound,
)
from celery_cronstore.records import Claim
from celery_cronstore.store import Claimer

__all__ = ["MARK_AGE", "MARK_GAP", "MARK_MOST", "NEAR", "ClaimAhead", "Held", "lately"]

logger = logging.getLogger("celery.beat")

#: Seconds: a held fire due sooner than this is published before beat looks at anything.
NEAR = 0.002
#: Published held fires are marked once the next held fire is at least this far (seconds).
MARK_GAP = 0.02
#: ... or once the oldest of them was published this long ago (seconds) ...
MARK_AGE = 1.0
#: ... or once this many wait.
MARK_MOST = 2000


@dataclass(frozen=True)
class Held:
    """A claim waiting for its fire time."""

    #: The ``time.monotonic()`` at which it is due.
    due: float
    claim: Claim
    #: Claimed before its fire time: its task is read again before it is published.
    ahead: bool


def lately(cost: float, took: float) -> float:
    """The longest recent duration: ``took`` if longer, else ``cost`` decaying by a tenth."""
    return max(took, 0.9 * cost)


class ClaimAhead:
    """The scheduler's held claims (see the module docstring)."""

    config: Config
    claimer: Claimer | None
    _early: list[Held]
    _ahead: float
    _claim_cost: float
    #: Seconds one due row's claim lately took, and the last burst counted (its earliest
    #: fire, the rows due with it): ``policy.lead``.
    _row_cost: float
    _counted: tuple[datetime, int] | None
    #: The end of the burst being claimed (its earliest fire plus ``BURST_SPAN``).
    _burst_end: datetime | None
    _chores_cost: float
    _next_housekeeping: float
    #: Held fires published and not yet marked in the ledger, and when the oldest went.
    _unmarked: list[tuple[Claim, float]]

    def _publish(self, claimer: Claimer, claims: list[Claim], mark: bool = True) -> bool:
        raise NotImplementedError

    def _watched(self, claim: Claim) -> bool:
        raise NotImplementedError

    def _redeliverable(self, name: str) -> bool:
        raise NotImplementedError

    def _scrub(self, exc: BaseException) -> str:
        raise NotImplementedError

    def _hold_early(self, claims: list[Claim], looked_at: datetime, looked: float) -> None:
        """Hold ``claims`` until their fire time. The database read ``looked_at`` on its
        clock just before ``time.monotonic()`` was ``looked``: a fire is due at ``looked``
        plus its fire time minus ``looked_at`` (never sooner; later by at most the reply
        of that read). Those due already go out with the next :meth:`_publish_early`."""
        if claims:
            held = [
                Held(looked + (c.fire_time - looked_at).total_seconds(), c, c.fire_time > looked_at)
                for c in claims
            ]
            # Fire-time order, not due order: each claim maps the database clock to this
            # host's with an error of up to one reply, which must not reorder close fires.
            self._early = sorted(self._early + held, key=lambda item: item.claim.fire_time)

    def _publish_early(self, claimer: Claimer) -> bool:
        """Publish the claims taken ahead whose fire time has come (in fire-time order)."""
        clock = time.monotonic()
        count = 0
        while count < len(self._early) and self._early[count].due <= clock:
            count += 1
        if not count:
            return True
        due = self._early[:count]
        del self._early[:count]
        sent = self._publish(claimer, _still_enabled(claimer, due), mark=False)
        self._settle_marks(claimer, force=not sent)
        return sent

    def _defer_marks(self, claimer: Claimer, sent: list[Claim]) -> None:
        """Keep published held fires to mark later (:meth:`_settle_marks`); a fire that a
        second publish could start twice is marked now."""
        clock = time.monotonic()
        now: list[Claim] = []
        for claim in sent:
            if self._redeliverable(claim.task):
                self._unmarked.append((claim, clock))
            else:
                now.append(claim)
        if now:
            claimer.mark_published(now, self._watched)

    def _settle_marks(self, claimer: Claimer, force: bool = False) -> None:
        """Mark the published held fires in the ledger (with the time each went), unless
        more follow closely (and they are few and recent)."""
        if not self._unmarked:
            return
        clock = time.monotonic()
        if not (
            force
            or len(self._unmarked) >= MARK_MOST
            or clock - self._unmarked[0][1] >= MARK_AGE
            or self._early_wait() >= MARK_GAP
        ):
            return
        sent, self._unmarked = self._unmarked, []
        ago = {claim.task_id: clock - went for claim, went in sent}
        claimer.mark_published([claim for claim, _ in sent], self._watched, ago)

    def _held_near(self) -> bool:
        """Whether a held fire falls due within :data:`NEAR` (publish it before anything),
        unless the chores are a whole period late (as :meth:`_housekeeping_due`)."""
        return self._early_wait() < NEAR and not self._chores_overdue(time.monotonic())

    def _lead(self, claimer: Claimer, now: datetime, earliest: datetime | None) -> float:
        """Seconds ahead of ``now`` that beat claims (``policy.lead``): ``claim_ahead``,
        or more before a burst. Once a burst's lead has begun, up to the burst's end, so
        beat claims it batch after full batch without pausing. While the earliest fire is
        farther than any lead could be, the bound itself: beat wakes there and counts."""
        if not self._ahead or earliest is None:
            return self._ahead
        end = self._burst_end
        if end is not None and earliest <= end:
            return max(self._ahead, (end - now).total_seconds())
        self._burst_end = None
        until = (earliest - now).total_seconds()
        bound = lead_bound(self.config.lease)
        if until > bound:
            return max(self._ahead, bound)
        if self._counted is None or self._counted[0] != earliest:
            counted_to = earliest + timedelta(seconds=BURST_SPAN)
            self._counted = (earliest, claimer.count_due(counted_to, COUNT_CAP))
        due = self._counted[1]
        lead = claim_lead(self._ahead, due, claimer.batch_size, self._row_cost, self.config.lease)
        if lead > self._ahead and until <= lead:  # a burst's lead begins: claim all of it
            self._burst_end = earliest + timedelta(seconds=BURST_SPAN)
            return max(lead, (self._burst_end - now).total_seconds())
        return lead

    def _timed_claim(self, rows: int, took: float) -> None:
        """Note what a claim of ``rows`` due rows took (seconds)."""
        self._claim_cost = lately(self._claim_cost, took)
        if rows >= MIN_ROWS_TIMED:
            self._row_cost = lately(self._row_cost, took / rows)

    def _early_wait(self) -> float:
        """Seconds until the next claim taken ahead falls due (inf when none)."""
        if not self._early:
            return float("inf")
        return max(0.0, self._early[0].due - time.monotonic())

    def _claim_fits(self) -> bool:
        """Whether a claim transaction may start: it must not hold up a fire taken ahead."""
        return self._early_wait() > 2 * self._claim_cost

    def _housekeeping_due(self) -> bool:
        """Whether the chores run now: they are due and no fire taken ahead is so near that
        they would hold it up (unless they are a whole period late)."""
        clock = time.monotonic()
        if clock < self._next_housekeeping:
            return False
        return self._early_wait() > 2 * self._chores_cost or self._chores_overdue(clock)

    def _chores_overdue(self, clock: float) -> bool:
        """Whether the chores are a whole heartbeat period late at monotonic ``clock``:
        then no held fire holds them back any longer."""
        return clock >= self._next_housekeeping + HEARTBEAT_EVERY

    def _flush_early(self) -> None:
        """At close: wait for the claims taken ahead (at most the lead away, a quarter of
        the lease at most) and publish them; whatever fails is taken over when its lease
        runs out."""
        if not self._early or self.claimer is None:
            return
        try:
            time.sleep(max(0.0, max(h.due for h in self._early) - time.monotonic()))
            held, self._early = self._early, []
            self._publish(self.claimer, _still_enabled(self.claimer, held), mark=False)
            self._settle_marks(self.claimer, force=True)
        except Exception as exc:  # closing must go on
            logger.error("beat: publishing the claims taken ahead failed (%s)", self._scrub(exc))


def _still_enabled(claimer: Claimer, held: list[Held]) -> list[Claim]:
    """The claims of ``held`` to publish, in order: those taken before their fire time only
    if their task is still there and enabled (the others are recorded dropped)."""
    ahead = [h.claim for h in held if h.ahead]
    if not ahead:
        return [h.claim for h in held]
    kept = {c.task_id for c in claimer.recheck(ahead)}
    return [h.claim for h in held if not h.ahead or h.claim.task_id in kept]
