"""Beat's upkeep between ticks: heartbeat, lost work, history, clock (every few seconds).

:class:`Chores` owns it: the heartbeat that ``cronstore health`` reads (with the stall
and the clock offset), fires whose worker went silent recorded ``abandoned``, published
fires that never started handed back, lapsed claims taken over, old history pruned in
small batches (the rest of a pass beat has no room for goes on in
:mod:`celery_cronstore.beat.threads`'s thread), and on PostgreSQL a look now and then
(``policy.vacuum.LOOK_EVERY``) whether the hot tables need a vacuum autovacuum has not
done (also on a thread), and now and then a pass of the alerts
(:mod:`celery_cronstore.beat.alerts`, a thread again). :func:`warn_shared_sqlite` is its
one look at start.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone

from celery_cronstore.beat.alerts import AlertRunner
from celery_cronstore.beat.held import lately
from celery_cronstore.beat.send import Sender
from celery_cronstore.beat.threads import Finisher, Vacuumer
from celery_cronstore.config import Config
from celery_cronstore.policy import CLOCK_WARN, CLOCK_WARN_EVERY
from celery_cronstore.store import Claimer, Store, idle
from celery_cronstore.store.engine import DATABASE_ERRORS
from celery_cronstore.store.retention import Pruner

__all__ = ["HEARTBEAT_EVERY", "PRUNE_BUDGET", "Chores", "warn_shared_sqlite"]

logger = logging.getLogger("celery.beat")

#: Seconds between heartbeats (``cronstore health``) and between looks for expired leases.
HEARTBEAT_EVERY = 5.0
#: Most seconds one housekeeping spends pruning while the ledger has a backlog (a tenth
#: of the time between two): a batch of 1,000 rows takes about 50 ms on PostgreSQL, so
#: beat keeps up with about 2,000 fires/s (one batch per housekeeping: 200/s).
PRUNE_BUDGET = 0.5
#: Seconds the pruning leaves free before the next fire is claimed.
PRUNE_MARGIN = 0.05


class Chores:
    """Beat's chores between ticks (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        claimer: Claimer,
        sender: Sender,
        *,
        started_at: datetime,
    ) -> None:
        self.config = config
        self.claimer = claimer
        self.sender = sender
        self.started_at = started_at
        #: The history pruner (made at the first prune).
        self.pruner: Pruner | None = None
        #: The ``time.monotonic()`` at which the chores are due next.
        self.next_due = 0.0
        #: What a housekeeping pass takes (seconds; the longest lately, decaying): beat
        #: starts none when a claim taken ahead falls due sooner than twice that.
        self._cost = 0.0
        self._clock_offset: float | None = None
        self._next_clock_warning = 0.0
        #: The rest of a prune pass, and (PostgreSQL) beat's own vacuum: their threads.
        self.finisher: Finisher | None = None
        self.vacuumer: Vacuumer | None = None
        #: Alert episodes judged and delivered on a thread of their own (docs/alerts.md).
        self.alerts = AlertRunner(config, claimer.db, sender.scrub)

    def due(self, held_wait: float) -> bool:
        """Return whether the chores run now: they are due, and no held fire (due in
        ``held_wait`` seconds) is so near that they would hold it up (unless they are a
        whole period late)."""
        clock = time.monotonic()
        if clock < self.next_due:
            return False
        return held_wait > 2 * self._cost or self.overdue(clock)

    def overdue(self, clock: float) -> bool:
        """Return whether the chores are a whole heartbeat period late at monotonic
        ``clock``: then no held fire holds them back any longer."""
        return clock >= self.next_due + HEARTBEAT_EVERY

    def run(self, stalled_since: datetime | None) -> bool:
        """Run the chores: heartbeat, hand back lost deliveries, take over lapsed leases,
        prune; return whether the broker took the re-published claims. ``stalled_since``:
        since when due work could not be done (``cronstore health``)."""
        began = time.monotonic()
        done = self._run(stalled_since)
        self._cost = lately(self._cost, time.monotonic() - began)
        return done

    def close(self) -> None:
        """Stop the prune thread and let a vacuum end (at most a few seconds each)."""
        if self.finisher is not None:
            self.finisher.stop()
        if self.vacuumer is not None:
            self.vacuumer.wait(5.0)  # a VACUUM cannot be stopped half-way: let it end
        self.alerts.close()

    def _run(self, stalled_since: datetime | None) -> bool:
        claimer = self.claimer
        # One statement on PostgreSQL: the heartbeat, and which of the writes below have work.
        chores = claimer.chores(self.started_at, stalled_since, self._clock_offset)
        self._check_clock(chores.now)
        abandoned = claimer.abandon_silent() if chores.silent else 0
        if abandoned:
            logger.warning(
                "beat: %d started fire(s) whose worker stopped reporting: recorded abandoned, "
                "or published again under the same task id where their abandon policy is rerun",
                abandoned,
            )
        unstarted = claimer.redeliver_unstarted() if chores.unstarted else 0
        if unstarted:
            logger.warning(
                "beat: %d fire(s) not started %gs after publishing; "
                "publishing again under the same task id",
                unstarted,
                self.config.start_timeout,
            )
        # Fires handed back (never started, or re-run after their worker went silent) are
        # claims whose lease ran out: the same take-over publishes them again.
        reclaimed = claimer.reclaim_expired() if chores.expired or unstarted or abandoned else []
        self.next_due = time.monotonic() + HEARTBEAT_EVERY
        self._prune(chores)
        self.alerts.look(time.monotonic())
        if claimer.db.dialect.name == "postgresql" and claimer.db.threads:
            if self.vacuumer is None:
                self.vacuumer = Vacuumer(claimer.db, self.sender.scrub)
            self.vacuumer.look(time.monotonic())
        if reclaimed:
            logger.warning("beat: re-publishing %d claim(s) whose lease ran out", len(reclaimed))
            return self.sender.publish(reclaimed)
        return True

    def _prune(self, chores: idle.Chores) -> None:
        """Delete old fire history (``cronstore_history_days``) in small batches.

        Bounded transactions while a pass has work, for at most ``PRUNE_BUDGET`` seconds
        per housekeeping and never past the next fire's claim (one batch at least); what
        is left of the pass then goes on in a :class:`~celery_cronstore.beat.threads.Finisher`
        thread (not for an in-memory SQLite database: one connection). A minute's pause
        after each pass; no pass while housekeeping's look (database time, oldest fire)
        shows nothing old. A failure is logged and never stops the firing.
        """
        claimer = self.claimer
        if self.pruner is None:
            self.pruner = Pruner(claimer.db)
        if self.finisher is not None:
            if self.finisher.running:
                return
            self.finisher = None
        moment = time.monotonic()
        keep = self.config.history
        try:
            if keep is None or moment < self.pruner.resume_at:
                return
            look = (chores.now, chores.oldest_fire) if chores.looked else None
            now, earliest = (chores.now, chores.earliest) if chores.looked else claimer.peek()
            budget = PRUNE_BUDGET
            if earliest is not None:
                room = (earliest - now).total_seconds() - self.config.claim_ahead
                budget = max(0.0, min(budget, room - PRUNE_MARGIN))
            step = self.pruner.pace(keep, moment, look, budget)
        except DATABASE_ERRORS as exc:
            logger.warning("beat: pruning the fire ledger failed (%s)", self.sender.scrub(exc))
            return
        if step is not None and step.deleted:
            logger.debug("beat: pruned %d old ledger row(s)", step.deleted)
        if step is not None and not step.done and claimer.db.threads:
            # No room before the next fire: the rest of the pass goes on off this thread.
            self.finisher = Finisher(self.pruner, keep, self.sender.scrub)
            self.finisher.start()

    def _check_clock(self, db_now: datetime) -> None:
        """Note (and now and then log) how far this host's clock is from the database's."""
        offset = (datetime.now(timezone.utc) - db_now).total_seconds()
        self._clock_offset = round(offset, 3)
        if abs(offset) > CLOCK_WARN and time.monotonic() >= self._next_clock_warning:
            self._next_clock_warning = time.monotonic() + CLOCK_WARN_EVERY
            logger.warning(
                "beat: this host's clock is %+.1fs off the database's; due times, leases and "
                "deadlines use the database's, but beat wakes at the wrong moment (fix NTP)",
                offset,
            )


def warn_shared_sqlite(
    store: Store, claimer: Claimer, node: str, started_at: datetime, *, firing: bool = True
) -> None:
    """Say so at start when another live beat (not ``node``) uses the same SQLite file
    (``firing``: whether this one fires, for its first heartbeat)."""
    now = claimer.heartbeat(started_at, firing=firing)
    window = 3 * HEARTBEAT_EVERY
    for other in store.beats():
        if other.node != node and (now - other.last_tick).total_seconds() <= window:
            logger.warning(
                "beat: another beat (%s) uses this SQLite store: several beats on one "
                "SQLite file serialize on its write lock, and a frozen one stops them "
                "all; HA needs PostgreSQL or MariaDB",
                other.node,
            )
            return
