"""Since when one beat has had due fires it could not claim or publish: the stall.

The loop records what it knows (:class:`Stall`): when each tick began and what it waits
on, the earliest due fire of its last look, and since when due work could not be done (a
tick that failed on the database, a broker that refused the claims, rows locked by
another process). :meth:`Stall.seconds` turns that into the stall at the moment it is
asked, so a Prometheus scrape sees the stall grow while beat's loop is blocked (a paused
database link, a table locked by a migration) and never gets to "the next tick".

A :class:`Watchdog` thread says it in the log, once per episode: a tick blocked longer
than :data:`WAIT_LOG` seconds with fires due, and the moment it answers again; the loop
says the same of a failing database (one line when it starts, one when it ends) so an
outage is never silence. A tick that has waited on the database longer than the server
would ever let a statement run (its session limit plus :data:`CUT_SLACK`) is waiting on
a link that carries nothing: the watchdog cuts the link (``store.links``), the call
fails as on a lost connection, and beat backs off and retries.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

__all__ = ["CUT_SLACK", "PUBLISHING", "TICK_BOUND", "WAIT_LOG", "Stall", "Watchdog"]

logger = logging.getLogger("celery.beat")

#: Seconds a tick may run with fires due before it counts as stalled (a claim of a large
#: batch, a prune slice and a publish all fit well within it).
TICK_BOUND = 1.0
#: Seconds a tick may be blocked, with fires due, before the watchdog logs it.
WAIT_LOG = 3.0
#: What a tick waits on while it publishes (the broker, then the ledger's marks).
PUBLISHING = "the broker or the database"
#: Seconds between two looks of the watchdog.
WATCH_EVERY = 0.5
#: Seconds past the server's own statement limit after which a wait for the database is
#: given up (the link is cut).
CUT_SLACK = 5.0


class Stall:
    """One beat's stall accounting (monotonic seconds; see the module docstring).

    Written by beat's loop, read by the metrics thread and the watchdog: each field is
    one reference, replaced whole, so a reader sees a consistent enough picture without
    a lock.
    """

    def __init__(self) -> None:
        #: ``time.monotonic()`` since when due work could not be done, or ``None``.
        self.since: float | None = None
        #: When the running tick began (``None``: beat is between ticks).
        self.began: float | None = None
        #: What the running tick waits on, for the log ("the database", "the broker").
        self.waiting_on = "the database"
        #: When the earliest planned fire falls due (``time.monotonic()`` scale), as the
        #: last look saw it; ``None``: nothing is planned.
        self.due: float | None = None
        #: The same as a wall-clock instant, for the log.
        self.due_at: datetime | None = None
        #: The failure being logged (one line per episode), and when it began.
        self.failing: str | None = None
        self.failing_since: float | None = None

    def seconds(self, now: float | None = None) -> float:
        """Return how long due fires have waited for this beat at monotonic ``now`` (0:
        none waits): since the stall the loop recorded, else since a tick that has run
        longer than :data:`TICK_BOUND` with fires due began (or they fell due)."""
        now = time.monotonic() if now is None else now
        since = self.since
        began, due = self.began, self.due
        if since is None and began is not None and due is not None and now - began > TICK_BOUND:
            since = max(began, due)
        if since is None or since > now:
            return 0.0
        return now - since

    def begin(self, now: float) -> None:
        """Note that a tick begins at monotonic ``now``."""
        self.began = now
        self.waiting_on = "the database"

    def end(self) -> None:
        """Note that the tick ended."""
        self.began = None

    def looked(self, db_now: datetime, earliest: datetime | None, now: float) -> None:
        """Take in a look at the store: database time ``db_now``, earliest planned fire."""
        if earliest is None:
            self.due = self.due_at = None
            return
        ahead = (earliest - db_now).total_seconds()
        self.due = now + ahead
        self.due_at = datetime.now(timezone.utc) + timedelta(seconds=ahead)

    def due_now(self, now: float) -> None:
        """Note that fires are due now (claims wait for the broker)."""
        if self.due is None or self.due > now:
            self.due = now
            self.due_at = datetime.now(timezone.utc)

    def stuck(self, now: float) -> None:
        """Note that this tick could not do due work (the stall starts, unless it runs)."""
        if self.since is None:
            self.since = now

    def unstuck(self) -> None:
        """Note that the due work was done."""
        self.since = None

    def failed(self, what: str, reason: str, now: float, pending: int) -> None:
        """Note a tick that failed on ``what``; log the episode's first line.

        The stall starts with the failing tick when fires are due, or when the earliest
        of them falls due (the outage goes on: nothing will claim it)."""
        if pending:
            self.due_now(now)
        if self.due is not None:
            self.stuck(max(self.due, now if self.began is None else self.began))
        if self.failing is not None:
            return
        start = now if self.began is None else self.began  # the failed tick's start
        self.failing, self.failing_since = what, start
        logger.error(
            "beat: %s has not answered since %s (%s); %s; nothing is published until it "
            "answers, retrying",
            what,
            _clock(datetime.now(timezone.utc) - timedelta(seconds=now - start)),
            reason,
            self.owed(now, pending),
        )

    def recovered(self, now: float) -> None:
        """Note a tick that went through; log the end of a failure episode."""
        if self.failing is None or self.failing_since is None:
            return
        logger.warning(
            "beat: %s answers again after %.1fs; catching up",
            self.failing,
            now - self.failing_since,
        )
        self.failing = self.failing_since = None

    def owed(self, now: float, pending: int = 0) -> str:
        """Return what is due, in words, for a log line."""
        parts = []
        if pending:
            parts.append(f"{pending} claimed fire(s) wait to be published")
        if self.due is not None and self.due <= now and self.due_at is not None:
            parts.append(f"fires due since {_clock(self.due_at)}")
        elif self.due_at is not None:
            parts.append(f"next fire due at {_clock(self.due_at)}")
        else:
            parts.append("no fire planned")
        return ", ".join(parts)


class Watchdog:
    """A daemon thread logging a tick blocked longer than :data:`WAIT_LOG` with fires due
    (once per blocked tick), and the moment it ends; with ``cut`` (and ``cut_after``
    seconds), giving up a wait for the database that lasts longer. It stops when its
    :class:`Stall` is gone."""

    def __init__(
        self,
        stall: Stall,
        cut: Callable[[], int] | None = None,
        cut_after: float = 0.0,
    ) -> None:
        self._stall = weakref.ref(stall)
        self._cut = cut
        self._cut_after = cut_after
        self._thread = threading.Thread(target=self._run, name="cronstore-watchdog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        told: float | None = None  # the ``began`` of the blocked tick already logged
        cut: float | None = None  # the ``began`` of the tick whose links were cut
        while True:
            time.sleep(WATCH_EVERY)
            stall = self._stall()
            if stall is None:
                return
            now = time.monotonic()
            began = stall.began
            if told is not None and began != told:
                logger.warning(
                    "beat: the wait for %s ended after %.1fs", stall.waiting_on, now - told
                )
                told = None
            if (
                told is None
                and stall.failing is None  # the loop has said it already
                and began is not None
                and now - began > WAIT_LOG
                and stall.seconds(now) > 0
            ):
                told = began
                logger.error(
                    "beat: a tick has waited %.0fs for %s (no answer); %s; nothing is "
                    "published until it answers",
                    now - began,
                    stall.waiting_on,
                    stall.owed(now),
                )
            if (
                self._cut is not None
                and began is not None
                and began != cut
                and "database" in stall.waiting_on
                and now - began > self._cut_after
            ):
                cut = began
                logger.error(
                    "beat: no answer from the database for %.0fs, longer than it lets a "
                    "statement run: the link carries nothing; cut %d connection(s) to give "
                    "up the wait",
                    now - began,
                    self._cut(),
                )
            del stall


def _clock(instant: datetime) -> str:
    return instant.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
