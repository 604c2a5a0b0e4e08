"""Claims taken ahead of their fire time (``cronstore_claim_ahead``): beat's timing.

:class:`HeldClaims` owns them. Beat claims a fire up to ``claim_ahead`` seconds before
its time (planned as of that time), holds the claim and publishes it when its time comes
on this host's monotonic clock, so the claim's transaction does not make the fire late;
its message is rendered when it is held (``Sender.prepare``), so it costs one ``LPUSH``
then. Just before publishing, a fire taken ahead is checked again: one whose task was
disabled, paused or removed meanwhile is recorded ``dropped``, so a disable committed
before a fire's time stops it, as it does without claiming ahead. A fire recorded
``sending`` before it goes is checked by that write; any other by ``Claimer.recheck``. Housekeeping
and new claims wait while a held fire is due sooner than twice what they lately take.

Before a burst (more fires due within a second than one claim takes) beat starts sooner
than ``claim_ahead``: early enough to claim them all at the pace its claims lately kept
(``policy.lead``), so the whole burst is held when its time comes.

While held fires follow each other closely (a burst), beat spends its time publishing
them: it does not look at the database while the next one is due within :data:`NEAR`,
and marks the published ones in the ledger together once the fires leave a gap of
:data:`MARK_GAP` (or after :data:`MARK_AGE`, or :data:`MARK_MOST` of them) instead of one
transaction per tick. A fire a second publish cannot start twice (CronTask, whose guard
starts one copy, or a task that acknowledges late) is still ``claimed`` under beat's lease
until then, so a crash before the mark has it published again, under the same task id, by
the replica that takes the lease over. Any other fire was recorded ``sending`` before it
went: a crash before the mark has it recorded as one that may have gone out, never sent
again (``store.marks``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery_cronstore.beat.send import Sender
from celery_cronstore.config import Config
from celery_cronstore.policy.lead import (
    BURST_SPAN,
    COUNT_CAP,
    DEFAULT_ROW_COST,
    MIN_ROWS_TIMED,
    claim_lead,
    lead_bound,
)
from celery_cronstore.records import Claim
from celery_cronstore.store import Claimer
from celery_cronstore.store.engine import DATABASE_ERRORS

__all__ = ["MARK_AGE", "MARK_GAP", "MARK_MOST", "NEAR", "Held", "HeldClaims", "lately"]

logger = logging.getLogger("celery.beat")

#: Seconds: a held fire due sooner than this is published before beat looks at anything.
NEAR = 0.002
#: Published held fires are marked once the next held fire is at least this far (seconds).
MARK_GAP = 0.02
#: ... or once the oldest of them was published this long ago (seconds) ...
MARK_AGE = 1.0
#: ... or once this many wait (a burst's fires: marked after it, not during it).
MARK_MOST = 10_000


@dataclass(frozen=True)
class Held:
    """A claim waiting for its fire time."""

    #: The ``time.monotonic()`` at which it is due.
    due: float
    claim: Claim
    #: Claimed before its fire time: its task is read again before it is published.
    ahead: bool


def lately(cost: float, took: float) -> float:
    """Return the longest recent duration: ``took`` if longer, else ``cost`` decaying by
    a tenth."""
    return max(took, 0.9 * cost)


class HeldClaims:
    """The claims beat holds until their fire time, and the timing of its claims (see the
    module docstring)."""

    def __init__(self, config: Config, claimer: Claimer, sender: Sender, *, ahead: float) -> None:
        self.config = config
        self.claimer = claimer
        self.sender = sender
        #: Seconds before its fire time that beat claims a fire (0: claimed when due).
        self.ahead = ahead
        #: Seconds one due row's claim lately took (``policy.lead``).
        self.row_cost = DEFAULT_ROW_COST
        self._early: list[Held] = []
        #: Held fires published and not yet marked in the ledger, and when each went.
        self._unmarked: list[tuple[Claim, float]] = []
        #: What a claim transaction lately takes (seconds; the longest lately, decaying):
        #: beat starts none when a claim taken ahead falls due sooner than twice that.
        self._claim_cost = 0.0
        #: The last burst counted (its earliest fire, the rows due with it).
        self._counted: tuple[datetime, int] | None = None
        #: The end of the burst being claimed (its earliest fire plus ``BURST_SPAN``).
        self._burst_end: datetime | None = None

    @property
    def count(self) -> int:
        """Return how many claims are held."""
        return len(self._early)

    @property
    def counted(self) -> tuple[datetime, int] | None:
        """Return the last burst counted: its earliest fire and the rows due with it."""
        return self._counted

    def hold(self, claims: list[Claim], looked_at: datetime, looked: float) -> None:
        """Hold ``claims`` until their send time (the fire time, or later by the task's
        jitter). The database read ``looked_at`` on its clock just before
        ``time.monotonic()`` was ``looked``: a fire is due at ``looked`` plus its send
        time minus ``looked_at`` (never sooner; later by at most the reply of that read).
        Those due already go out with the next :meth:`publish_due`."""
        if claims:
            held = [
                Held(looked + (c.send_at - looked_at).total_seconds(), c, c.send_at > looked_at)
                for c in claims
            ]
            # Send-time order, not due order: each claim maps the database clock to this
            # host's with an error of up to one reply, which must not reorder close fires.
            self._early = sorted(self._early + held, key=lambda item: item.claim.send_at)
            # Their messages now, while there is time: each costs one LPUSH when it is due.
            self.sender.prepare([h.claim for h in held if h.ahead])

    def publish_due(self) -> bool:
        """Publish the held claims whose fire time has come (in fire-time order); return
        whether the broker took them all (also when none was due)."""
        clock = time.monotonic()
        count = 0
        while count < len(self._early) and self._early[count].due <= clock:
            count += 1
        if not count:
            return True
        due = self._early[:count]
        del self._early[:count]
        sent = self.sender.publish(self._still_enabled(due), self._defer_marks)
        self._settle_marks(force=not sent)
        return sent

    def wait(self) -> float:
        """Return the seconds until the next held claim falls due (inf when none)."""
        if not self._early:
            return float("inf")
        return max(0.0, self._early[0].due - time.monotonic())

    def claim_fits(self) -> bool:
        """Return whether a claim transaction may start: it must not hold up a held fire."""
        return self.wait() > 2 * self._claim_cost

    def lead(self, now: datetime, earliest: datetime | None) -> float:
        """Return the seconds ahead of ``now`` that beat claims (``policy.lead``):
        ``claim_ahead``, or more before a burst. Once a burst's lead has begun, up to the
        burst's end, so beat claims it batch after full batch without pausing. While the
        earliest fire is farther than any lead could be, the bound itself: beat wakes
        there and counts."""
        if not self.ahead or earliest is None:
            return self.ahead
        end = self._burst_end
        if end is not None and earliest <= end:
            return max(self.ahead, (end - now).total_seconds())
        self._burst_end = None
        until = (earliest - now).total_seconds()
        bound = lead_bound(self.config.lease)
        if until > bound:
            return max(self.ahead, bound)
        if self._counted is None or self._counted[0] != earliest:
            counted_to = earliest + timedelta(seconds=BURST_SPAN)
            self._counted = (earliest, self.claimer.count_due(counted_to, COUNT_CAP))
        due = self._counted[1]
        batch = self.claimer.batch_size
        lead = claim_lead(self.ahead, due, batch, self.row_cost, self.config.lease)
        if lead > self.ahead and until <= lead:  # a burst's lead begins: claim all of it
            self._burst_end = earliest + timedelta(seconds=BURST_SPAN)
            return max(lead, (self._burst_end - now).total_seconds())
        return lead

    def timed_claim(self, rows: int, took: float) -> None:
        """Note what a claim of ``rows`` due rows took (seconds)."""
        self._claim_cost = lately(self._claim_cost, took)
        if rows >= MIN_ROWS_TIMED:
            self.row_cost = lately(self.row_cost, took / rows)

    def flush(self, wait: float = 1.0) -> None:
        """At close: publish the held claims due within ``wait`` seconds (waiting for
        them), mark what went, and hand the rest back to the next beat at once (their
        lease run out): beat stops within a bound, whatever its lead."""
        try:
            held, self._early = self._early, []
            soon = time.monotonic() + wait
            due = [h for h in held if h.due <= soon]
            later = [h.claim for h in held if h.due > soon]
            if due:
                time.sleep(max(0.0, max(h.due for h in due) - time.monotonic()))
                self.sender.publish(self._still_enabled(due), self._defer_marks)
            self._settle_marks(force=True)
            if later:
                self.sender.forget(later)
                self.claimer.hand_back(later)
                logger.info("beat: %d claim(s) taken ahead handed back", len(later))
        except Exception as exc:  # closing must go on
            logger.error(
                "beat: publishing the claims taken ahead failed (%s)", self.sender.scrub(exc)
            )

    def _defer_marks(self, sent: list[Claim]) -> None:
        """Keep published held fires to mark later (:meth:`_settle_marks`)."""
        clock = time.monotonic()
        self._unmarked.extend((claim, clock) for claim in sent)

    def _settle_marks(self, force: bool = False) -> None:
        """Mark the published held fires in the ledger (with the time each went), unless
        more follow closely (and they are few and recent)."""
        if not self._unmarked:
            return
        clock = time.monotonic()
        if not (
            force
            or len(self._unmarked) >= MARK_MOST
            or clock - self._unmarked[0][1] >= MARK_AGE
            or self.wait() >= MARK_GAP
        ):
            return
        sent, self._unmarked = self._unmarked, []
        ago = {claim.task_id: clock - went for claim, went in sent}
        try:
            # As a send: a SIGTERM now lets the mark finish (then beat stops), instead of
            # cutting it off with the fires half-recorded.
            with self.sender.stop.sending():
                self.sender.mark([claim for claim, _ in sent], ago)
        except DATABASE_ERRORS:  # kept, and marked with the next ones
            self._unmarked = sent + self._unmarked
            raise

    def _still_enabled(self, held: list[Held]) -> list[Claim]:
        """Return the claims of ``held`` to publish, in order: those taken before their
        fire time only if their task is still there, enabled and not paused (the others
        are recorded dropped). A fire recorded ``sending`` before it goes is not read
        here: that write is its re-check (``Marks.mark_sending``)."""
        redeliverable = self.claimer.seam.redeliverable
        ahead = [h.claim for h in held if h.ahead and redeliverable(h.claim.task)]
        if not ahead:
            return [h.claim for h in held]
        kept = {c.task_id for c in self.claimer.recheck(ahead)}
        gone = [c for c in ahead if c.task_id not in kept]
        self.sender.forget(gone)
        dropped = {c.task_id for c in gone}
        return [h.claim for h in held if h.claim.task_id not in dropped]
