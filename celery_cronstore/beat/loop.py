"""Beat's tick: what one call of ``Scheduler.tick`` does once the store is open.

:class:`Loop` puts the parts together in the order the fires need: the claims that waited
for the broker, the held claims whose time has come, the chores (unless a held fire is
near), then one look at the database and, when something is due, one claim. It owns only
the tick's own state: since when due work could not be done, and the wait while every due
row is locked by someone else. :class:`Backoff` is the wait after a failure.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone

from celery_cronstore import faults
from celery_cronstore.beat.chores import Chores
from celery_cronstore.beat.held import NEAR, HeldClaims
from celery_cronstore.beat.metrics import BeatMetrics
from celery_cronstore.beat.send import Sender
from celery_cronstore.beat.stall import CUT_SLACK, PUBLISHING, Stall, Watchdog
from celery_cronstore.config import Config
from celery_cronstore.errors import StoreUnavailableError
from celery_cronstore.store import Claimer
from celery_cronstore.store.engine import deadlock
from celery_cronstore.store.links import Links
from celery_cronstore.store.server import ServerWatch

__all__ = [
    "FAST_FOR",
    "FAST_RETRY",
    "LOCKED_BACKOFF",
    "REMIND_EVERY",
    "RESTORE_GRACE",
    "Backoff",
    "Loop",
]

logger = logging.getLogger("celery.beat")

#: How often (seconds) beat looks whether a buffered fire's predecessor has ended
#: (overlap policy buffer_one), while one waits.
BUFFER_POLL = 1.0

#: Shortest and longest wait (seconds) when every due row is locked by another process.
LOCKED_BACKOFF = (0.05, 0.2)
#: Seconds between retries early in a database outage, and how long (seconds) that lasts
#: before the wait doubles: a failover (the standby promoted, the pool's dead connections
#: dropped) is over in a second or two, and should cost the fires no more than that.
FAST_RETRY = 0.25
FAST_FOR = 3.0
#: Seconds between two reminders that the database is still unavailable.
REMIND_EVERY = 300.0
#: Seconds a beat claims nothing once its connections reach another server (a failover):
#: every beat reconnects within a few :data:`FAST_RETRY` of the others and first writes
#: back the fires it sent whose claims were lost, so none claims such a fire again.
RESTORE_GRACE = 1.0


class Backoff:
    """The wait after a failure.

    A database outage is retried every :data:`FAST_RETRY` seconds for its first
    :data:`FAST_FOR` seconds (a failover completing: beat claims again within a quarter
    of a second of the new primary accepting writes), then at waits doubling from there,
    never past the poll interval. Its first and last lines are the loop's (``beat.stall``:
    one when it starts, one when it ends); here each failed retry is logged at debug level
    only, and an outage that goes on is recalled every :data:`REMIND_EVERY` seconds.
    A broker failure waits and logs as it always did: one line each, the wait doubling
    from one second while nothing reaches the database in between.
    """

    def __init__(self, poll_interval: float, scrub: Callable[[BaseException], str]) -> None:
        self.poll_interval = poll_interval
        self._scrub = scrub
        self._failures = 0
        #: The database outage going on: since when (monotonic), the retries so far, and
        #: when it was last recalled in the log.
        self._since: float | None = None
        self._tries = 0
        self._recalled = 0.0
        #: The retries made within the fast window (``None``: the window is not over).
        self._fast_tries: int | None = None

    @property
    def failures(self) -> int:
        """Return the failures in a row so far."""
        return self._failures

    def failed(self, what: str, exc: BaseException | None) -> float:
        """Note that ``what`` (the database, the broker) is unavailable; return the wait.

        ``exc`` is the database's error (``None``: the broker failed, the sender logged
        why)."""
        self._failures += 1
        if exc is None:
            delay = min(self.poll_interval, 0.5 * 2.0 ** min(self._failures, 8))
            logger.error("beat: %s unavailable; retrying in %.1fs", what, delay)
            return delay
        clock = time.monotonic()
        if self._since is None:
            self._since, self._tries, self._recalled = clock, 0, clock
            self._fast_tries = None
        self._tries += 1
        lasted = clock - self._since
        delay = FAST_RETRY
        if lasted >= FAST_FOR:  # doubling from FAST_RETRY, counted from the window's end
            if self._fast_tries is None:
                self._fast_tries = self._tries - 1
            delay *= 2.0 ** min(self._tries - self._fast_tries, 8)
        delay = min(self.poll_interval, delay)
        # Never log the URL from the exception: drivers may include the password.
        reason = f"{type(exc).__name__}: {self._scrub(exc)}"
        if clock - self._recalled >= REMIND_EVERY:
            self._recalled = clock
            logger.error("beat: %s still unavailable after %.0fs (%s)", what, lasted, reason)
        else:
            logger.debug("beat: %s unavailable (%s); retrying in %.2fs", what, reason, delay)
        return delay

    def reset(self) -> None:
        """Forget the failures: the last tick got through to the database."""
        self._failures = 0
        if self._since is not None:
            logger.debug(
                "beat: the database answered after %.2fs and %d failed tries",
                time.monotonic() - self._since,
                self._tries,
            )
            self._since = None


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
        #: Whether buffered fires wait for their predecessor (overlap policy buffer_one):
        #: beat then looks every BUFFER_POLL seconds. False at start: a buffered fire a
        #: stopped beat left is released by the next claim of any beat (at the latest its
        #: task's own next fire), and beat claims nothing before something is due.
        self._buffered = False
        #: The stall as a scrape sees it, even while a tick is blocked (``beat.stall``).
        self.stall = Stall()
        self._watchdog: Watchdog | None = None
        #: The database connections beat has open, cut when a wait outlasts the server's
        #: own limit (``store.links``; not SQLite: no link).
        self._links = None if config.is_sqlite else Links(claimer.db.engine)
        #: New connections reach another server (a failover): before claiming again, the
        #: fires sent lately are written back if the database lost them (``store.restore``).
        self._server = ServerWatch(claimer.db.engine)
        self._server_changes = 0
        #: After the server changed, no claim before this (monotonic) time.
        self._claim_after = 0.0
        if metrics is not None:
            metrics.watch(self.stall.seconds)

    @property
    def stalled_since(self) -> datetime | None:
        """Return since when due work could not be done (``None``: it is done)."""
        return self._stalled_since

    def tick(self) -> float:
        """Publish, housekeep and claim what is due; return the seconds until the next
        look."""
        began = time.perf_counter()
        stall = self.stall
        if self._watchdog is None:
            links = self._links
            # The server ends any statement of beat's sessions after half the lease.
            after = self.config.lease / 2 + CUT_SLACK
            self._watchdog = Watchdog(stall, None if links is None else links.cut, after)
        stall.begin(time.monotonic())
        try:
            sleep = self._step()
        except StoreUnavailableError as exc:
            if not deadlock(exc):
                self._failed(exc)
                raise
            # Two beats' transactions locked rows (or MariaDB's index gaps) in opposite
            # orders and the server rolled this one back: a race lost, not an outage. What
            # it was doing is kept (pending sends, unmarked fires) and done again now.
            logger.info(
                "beat: a transaction lost a deadlock with another beat's (%s); trying again",
                stall.waiting_on,
            )
            return 0.0
        except Exception as exc:  # the database (the scheduler backs off and retries)
            self._failed(exc)
            raise
        finally:
            stall.end()
        stall.recovered(time.monotonic())
        if self.metrics is not None:
            self.metrics.tick_seconds.observe(time.perf_counter() - began)
        return sleep

    def fires_first(self) -> bool:
        """Return whether a held fire falls due within :data:`NEAR` (publish it before
        anything), unless the chores are a whole period late."""
        return self.held.wait() < NEAR and not self.chores.overdue(time.monotonic())

    def _step(self) -> float:
        claimer, sender, held, stall = self.claimer, self.sender, self.held, self.stall
        self._restore_if_needed()
        stall.waiting_on = PUBLISHING
        if not sender.retry_pending():
            return self._broker_failed()
        # Fires first: the claims taken ahead whose time has come, then the chores.
        if not held.publish_due():
            return self._broker_failed()
        if self.fires_first():  # a burst's fires follow closely: they come first
            return held.wait()
        stall.waiting_on = "the database"
        self._restore_if_needed()  # the sends above may have met a new server
        if self.chores.due(held.wait()) and not self.chores.run(self._stalled_since):
            return self._broker_failed()
        stall.waiting_on = "the database"
        now, earliest = claimer.peek()
        looked_at, looked = now, time.monotonic()
        stall.looked(now, earliest, looked)
        if self.config.is_sqlite:  # the host's clock is the store's: read both together
            looked_at, looked = datetime.now(timezone.utc), time.monotonic()
        lead = held.lead(now, earliest)
        ahead = timedelta(seconds=lead)
        idle = earliest is None or earliest > now + ahead
        poll = self.config.poll_interval
        wait = poll if earliest is None else (earliest - now).total_seconds() - lead
        idle_wait = max(0.0, min(poll, wait, held.wait()))
        if idle and not self._buffered:
            self._progress(None)
            return idle_wait
        if not held.claim_fits():
            return held.wait()  # a fire taken ahead first; claim after it
        self._restore_if_needed()
        began = time.monotonic()
        if began < self._claim_after:  # the other beats write back their sends first
            return min(self._claim_after - began, held.wait())
        # The fires due now go as soon as their claim commits, which records them
        # ``sending``: from the claim to their send, a SIGTERM waits (``StopSignal``) and
        # the send hands back what it did not send, instead of leaving them unsent.
        with self._stop_after():
            result = claimer.claim_due(ahead, sending=True)
            try:
                sender.report(result.errors)
                sender.revoke(result.revoke)
                self._buffered = result.buffered > 0 or (result.conflict and self._buffered)
                if self.metrics is not None:
                    self.metrics.claimed(result)
                faults.hit("after_claim")
            except BaseException:  # none of them went: back to ``claimed``, for a take-over
                sender.put_back(result.claims)
                raise
            stall.waiting_on = PUBLISHING
            if held.ahead:
                held.hold(result.claims, looked_at, looked)  # their messages rendered too
                held.timed_claim(result.rows, time.monotonic() - began)
                sent = held.publish_due()
            else:
                held.timed_claim(result.rows, time.monotonic() - began)
                sent = not result.claims or sender.publish(result.claims)
        if not sent:
            self._progress(now)
            stall.due_now(time.monotonic())
            return self.backoff.failed("broker", None)
        if result.rows:
            self._progress(None)
            return 0.0  # more may be due: look again at once
        if idle:  # only buffered fires looked after: look again soon while one waits
            self._progress(None)
            return min(BUFFER_POLL, idle_wait) if self._buffered else idle_wait
        # Due rows exist but another process holds every one of them (a beat mid-claim,
        # or frozen until its session is cut off): wait a little instead of spinning.
        self._progress(now)
        self._locked_out = min(LOCKED_BACKOFF[1], max(LOCKED_BACKOFF[0], self._locked_out * 2))
        return self._locked_out

    @contextlib.contextmanager
    def _stop_after(self) -> Iterator[None]:
        """A claim and the send of its due fires, as one send for SIGTERM and SIGINT
        (``StopSignal.sending``); a stop asked for during a claim that failed stops beat
        then, rather than at the next send."""
        stop = self.sender.stop
        try:
            with stop.sending():
                yield
        except Exception:
            stop.check()
            raise

    def _restore_if_needed(self) -> None:
        """Once new connections reached another server (only a failover or a restart can
        lose commits; a failed tick on the same server cannot), write back the fires sent
        lately whose claims the database lost, and claim nothing for
        :data:`RESTORE_GRACE` seconds, so that every beat has written back its own sends
        before any claims a fire another one sent."""
        changes = self._server.changes
        if changes != self._server_changes:
            self.sender.restore()
            self._claim_after = time.monotonic() + RESTORE_GRACE
            self._server_changes = changes

    def _progress(self, stuck_at: datetime | None) -> None:
        """Note whether this tick could do the due work (``None``) or not (since when)."""
        if stuck_at is None:
            self._stalled_since = None
            self._locked_out = 0.0
            self.stall.unstuck()
            return
        if self._stalled_since is None:
            self._stalled_since = stuck_at
        began = self.stall.began
        self.stall.stuck(time.monotonic() if began is None else began)

    def _broker_failed(self) -> float:
        """Note that claims wait for the broker (a stall from this tick); return the wait."""
        now = time.monotonic()
        self.stall.due_now(now)
        self.stall.stuck(now if self.stall.began is None else self.stall.began)
        if self._stalled_since is None:
            self._stalled_since = datetime.now(timezone.utc)
        return self.backoff.failed("broker", None)

    def _failed(self, exc: Exception) -> None:
        """Note a tick that failed on the database (or what it was waiting for)."""
        stall, now = self.stall, time.monotonic()
        # What escapes a tick is the database's (the sender keeps the broker's errors).
        stall.failed("the database", self.sender.scrub(exc), now, self.sender.pending)
        if stall.since is not None and self._stalled_since is None:
            ago = timedelta(seconds=now - stall.since)
            self._stalled_since = datetime.now(timezone.utc) - ago
