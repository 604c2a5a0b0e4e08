"""Beat's upkeep between ticks: heartbeat, lost work, history, clock (every few seconds).

A mixin of :class:`celery_cronstore.Scheduler`: the heartbeat that ``cronstore health``
reads (with the stall and the clock offset), fires whose worker went silent recorded
``abandoned``, published fires that never started handed back, lapsed claims taken over,
old history pruned in small batches (the rest of a pass beat has no room for goes on in
:mod:`celery_cronstore.beat.threads`'s thread), and on PostgreSQL a look now and then
(``policy.vacuum.LOOK_EVERY``) whether the hot tables need a vacuum autovacuum has not
done (also on a thread).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone

from sqlalchemy.exc import SQLAlchemyError

from celery_cronstore.beat.threads import Finisher, Vacuumer
from celery_cronstore.config import Config
from celery_cronstore.policy import CLOCK_WARN, CLOCK_WARN_EVERY
from celery_cronstore.records import Claim
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.idle import Chores
from celery_cronstore.store.retention import Pruner

__all__ = ["HEARTBEAT_EVERY", "PRUNE_BUDGET", "Upkeep"]

logger = logging.getLogger("celery.beat")

#: Seconds between heartbeats (``cronstore health``) and between looks for expired leases.
HEARTBEAT_EVERY = 5.0
#: Most seconds one housekeeping spends pruning while the ledger has a backlog (a tenth
#: of the time between two): a batch of 1,000 rows takes about 50 ms on PostgreSQL, so
#: beat keeps up with about 2,000 fires/s (one batch per housekeeping: 200/s).
PRUNE_BUDGET = 0.5
#: Seconds the pruning leaves free before the next fire is claimed.
PRUNE_MARGIN = 0.05


class Upkeep:
    """The scheduler's chores between ticks (see the module docstring)."""

    config: Config
    node: str
    _started_at: datetime | None
    _stalled_since: datetime | None
    _clock_offset: float | None
    _next_clock_warning: float
    _next_housekeeping: float
    _pruner: Pruner | None
    _finisher: Finisher | None
    _vacuumer: Vacuumer | None

    def _publish(self, claimer: Claimer, claims: list[Claim]) -> bool:
        raise NotImplementedError

    def _scrub(self, exc: BaseException) -> str:
        raise NotImplementedError

    def _redeliverable(self, name: str) -> bool:
        raise NotImplementedError

    def _housekeeping(self, claimer: Claimer) -> bool:
        """Heartbeat, hand back lost deliveries, take over lapsed leases (every few s)."""
        assert self._started_at is not None
        # One statement on PostgreSQL: the heartbeat, and which of the writes below have work.
        chores = claimer.chores(self._started_at, self._stalled_since, self._clock_offset)
        self._check_clock(chores.now)
        abandoned = claimer.abandon_silent(self._redeliverable) if chores.silent else 0
        if abandoned:
            logger.warning(
                "beat: %d started fire(s) whose worker stopped reporting: recorded abandoned, "
                "or published again under the same task id where their abandon policy is rerun",
                abandoned,
            )
        unstarted = claimer.redeliver_unstarted(self._redeliverable) if chores.unstarted else 0
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
        self._next_housekeeping = time.monotonic() + HEARTBEAT_EVERY
        self._prune(claimer, chores)
        if claimer.db.dialect.name == "postgresql" and claimer.db.threads:
            if self._vacuumer is None:
                self._vacuumer = Vacuumer(claimer.db, self._scrub)
            self._vacuumer.look(time.monotonic())
        if reclaimed:
            logger.warning("beat: re-publishing %d claim(s) whose lease ran out", len(reclaimed))
            return self._publish(claimer, reclaimed)
        return True

    def _prune(self, claimer: Claimer, chores: Chores) -> None:
        """Delete old fire history (``cronstore_history_days``) in small batches.

        Bounded transactions while a pass has work, for at most ``PRUNE_BUDGET`` seconds
        per housekeeping and never past the next fire's claim (one batch at least); what
        is left of the pass then goes on in a :class:`~celery_cronstore.beat.threads.Finisher`
        thread (not for an in-memory SQLite database: one connection). A minute's pause
        after each pass; no pass while housekeeping's look (database time, oldest fire)
        shows nothing old. A failure is logged and never stops the firing.
        """
        if self._pruner is None:
            self._pruner = Pruner(claimer.db)
        if self._finisher is not None:
            if self._finisher.running:
                return
            self._finisher = None
        moment = time.monotonic()
        keep = self.config.history
        try:
            if keep is None or moment < self._pruner.resume_at:
                return
            look = (chores.now, chores.oldest_fire) if chores.looked else None
            now, earliest = (chores.now, chores.earliest) if chores.looked else claimer.peek()
            budget = PRUNE_BUDGET
            if earliest is not None:
                room = (earliest - now).total_seconds() - self.config.claim_ahead
                budget = max(0.0, min(budget, room - PRUNE_MARGIN))
            step = self._pruner.pace(keep, moment, look, budget)
        except SQLAlchemyError as exc:
            logger.warning("beat: pruning the fire ledger failed (%s)", self._scrub(exc))
            return
        if step is not None and step.deleted:
            logger.debug("beat: pruned %d old ledger row(s)", step.deleted)
        if step is not None and not step.done and claimer.db.threads:
            # No room before the next fire: the rest of the pass goes on off this thread.
            self._finisher = Finisher(self._pruner, keep, self._scrub)
            self._finisher.start()

    def _warn_shared_sqlite(self, store: Store, claimer: Claimer, started_at: datetime) -> None:
        """Say so at start when another live beat uses the same SQLite file."""
        now = claimer.heartbeat(started_at)
        window = 3 * HEARTBEAT_EVERY
        for other in store.beats():
            if other.node != self.node and (now - other.last_tick).total_seconds() <= window:
                logger.warning(
                    "beat: another beat (%s) uses this SQLite store: several beats on one "
                    "SQLite file serialize on its write lock, and a frozen one stops them "
                    "all; HA needs PostgreSQL or MariaDB",
                    other.node,
                )
                return

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
