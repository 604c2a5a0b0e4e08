"""Beat's tick: what one call of ``Scheduler.tick`` does once the store is open.

:class:`Loop` puts the parts together in the order the fires need: the claims that waited
for the broker, the held claims whose time has come, the chores (unless a held fire is
near), then one look at the database and, when something is due, one claim. It owns only
the tick's own state: since when due work could not be done, and the wait while every due
row is locked by someone else. :class:`Backoff` is the wait after a failure.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from celery_cronstore import faults
from celery_cronstore.beat.chores import Chores
from celery_cronstore.beat.held import NEAR, HeldClaims
from celery_cronstore.beat.metrics import BeatMetrics
from celery_cronstore.beat.send import Sender
from celery_cronstore.config import Config
from celery_cronstore.store import Claimer

__all__ = ["LOCKED_BACKOFF", "Backoff", "Loop"]

logger = logging.getLogger("celery.beat")

#: Shortest and longest wait (seconds) when every due row is locked by another process.
LOCKED_BACKOFF = (0.05, 0.2)


class Backoff:
    """The wait after a failure: doubling from half a second, never past the poll
    interval (recovery is noticed within one tick)."""

    def __init__(self, poll_interval: float, scrub: Callable[[BaseException], str]) -> None:
        self.poll_interval = poll_interval
        self._scrub = scrub
        self._failures = 0

    @property
    def failures(self) -> int:
        """Return the failures in a row so far."""
        return self._failures

    def failed(self, what: str, exc: BaseException | None) -> float:
        """Log that ``what`` (the database, the broker) is unavailable; return the wait."""
        self._failures += 1
        delay = min(self.poll_interval, 0.5 * 2.0 ** min(self._failures, 8))
        if exc is not None:
            # Never log the URL from the exception: drivers may include the password.
            logger.error(
                "beat: %s unavailable (%s: %s); nothing is published; retrying in %.1fs",
                what,
                type(exc).__name__,
                self._scrub(exc),
                delay,
            )
        else:
            logger.error("beat: %s unavailable; retrying in %.1fs", what, delay)
        return delay

    def reset(self) -> None:
        """Forget the failures: the last tick got through to the database."""
        self._failures = 0


class Loop:
    """One beat's tick over its parts (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        claimer: Claimer,
        *,
        sender: Sender,
        held: HeldClaims,
        chores: Chores,
        backoff: Backoff,
        metrics: BeatMetrics | None = None,
    ) -> None:
        self.config = config
        self.claimer = claimer
        self.sender = sender
        self.held = held
        self.chores = chores
        self.backoff = backoff
        self.metrics = metrics
        #: Since when due work could not be done (``cronstore health``), and the current
        #: wait while every due row is locked by someone else.
        self._stalled_since: datetime | None = None
        self._locked_out = 0.0

    @property
    def stalled_since(self) -> datetime | None:
        """Return since when due work could not be done (``None``: it is done)."""
        return self._stalled_since

    def tick(self) -> float:
        """Publish, housekeep and claim what is due; return the seconds until the next
        look."""
        began = time.perf_counter()
        sleep = self._step()
        if self.metrics is not None:
            self.metrics.tick_seconds.observe(time.perf_counter() - began)
            stalled = self._stalled_since
            self.metrics.stalled.set(
                0 if stalled is None else (datetime.now(timezone.utc) - stalled).total_seconds()
            )
        return sleep

    def fires_first(self) -> bool:
        """Return whether a held fire falls due within :data:`NEAR` (publish it before
        anything), unless the chores are a whole period late."""
        return self.held.wait() < NEAR and not self.chores.overdue(time.monotonic())

    def _step(self) -> float:
        claimer, sender, held = self.claimer, self.sender, self.held
        if not sender.retry_pending():
            return self.backoff.failed("broker", None)
        # Fires first: the claims taken ahead whose time has come, then the chores.
        if not held.publish_due():
            return self.backoff.failed("broker", None)
        if self.fires_first():  # a burst's fires follow closely: they come first
            return held.wait()
        if self.chores.due(held.wait()) and not self.chores.run(self._stalled_since):
            return self.backoff.failed("broker", None)
        now, earliest = claimer.peek()
        looked_at, looked = now, time.monotonic()
        if self.config.is_sqlite:  # the host's clock is the store's: read both together
            looked_at, looked = datetime.now(timezone.utc), time.monotonic()
        lead = held.lead(now, earliest)
        ahead = timedelta(seconds=lead)
        if earliest is None or earliest > now + ahead:
            self._progress(None)
            wait = (
                self.config.poll_interval
                if earliest is None
                else (earliest - now).total_seconds() - lead
            )
            return max(0.0, min(self.config.poll_interval, wait, held.wait()))
        if not held.claim_fits():
            return held.wait()  # a fire taken ahead first; claim after it
        began = time.monotonic()
        result = claimer.claim_due(ahead)
        held.timed_claim(result.rows, time.monotonic() - began)
        sender.report(result.errors)
        if self.metrics is not None:
            self.metrics.claimed(result)
        faults.hit("after_claim")
        if held.ahead:
            held.hold(result.claims, looked_at, looked)
            sent = held.publish_due()
        else:
            sent = not result.claims or sender.publish(result.claims)
        if not sent:
            self._progress(now)
            return self.backoff.failed("broker", None)
        if result.rows:
            self._progress(None)
            return 0.0  # more may be due: look again at once
        # Due rows exist but another process holds every one of them (a beat mid-claim,
        # or frozen until its session is cut off): wait a little instead of spinning.
        self._progress(now)
        self._locked_out = min(LOCKED_BACKOFF[1], max(LOCKED_BACKOFF[0], self._locked_out * 2))
        return self._locked_out

    def _progress(self, stuck_at: datetime | None) -> None:
        """Note whether this tick could do the due work (``None``) or not (since when)."""
        if stuck_at is None:
            self._stalled_since = None
            self._locked_out = 0.0
        elif self._stalled_since is None:
            self._stalled_since = stuck_at
