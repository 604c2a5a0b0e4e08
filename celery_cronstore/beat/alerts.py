"""Beat's alerts: every ``cronstore_alert_interval`` seconds, on a thread of its own, judge
every task's fires and deliver what the episodes owe.

A pass (:meth:`AlertRunner.run_once`) has three steps, each a few set-based reads:

1. **Evaluate.** Read the facts of every task and every open episode
   (:func:`celery_cronstore.store.alerts.task_facts`), let
   :func:`celery_cronstore.policy.alerts.evaluate` decide, and write the opens, updates
   and resolves. Every beat replica does this; the database makes each open and each
   resolve happen once (the unique ``open_key``).
2. **Deliver.** For each episode whose delivery is due, take it (compare-and-set: one
   beat wins), POST it to ``cronstore_alert_webhook`` and record the outcome: sent, or the
   error and the next attempt (doubling back-off, :func:`~celery_cronstore.policy.alerts.
   retry_delay`). The state lives in the row, so a restarted beat, or another replica,
   goes on where this one stopped: nothing is sent twice, nothing is lost.
3. **Check in.** When ``sentry_sdk`` is initialized, report each task's newest fire as a
   Sentry Crons check-in (:mod:`celery_cronstore.beat.sentry`); for the tasks with a URL
   in ``cronstore_alert_pings``, ping it (:mod:`celery_cronstore.beat.pings`). One read
   of the newest fires serves both; a monitor that does not answer costs its own ping.

The thread keeps slow receivers and the reads off beat's tick: :meth:`AlertRunner.look`
(from :class:`~celery_cronstore.beat.chores.Chores`) starts a pass only when the last one
has ended. Failures are logged and the next pass tries again; they never stop the firing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from celery_cronstore.beat.pings import Pings
from celery_cronstore.beat.sentry import SentryCheckins, sentry_active
from celery_cronstore.beat.webhook import DeliveryError, post
from celery_cronstore.config import Config
from celery_cronstore.policy.alerts import (
    OPEN,
    AlertSettings,
    Episode,
    by_kind,
    evaluate,
    every_task_watched,
    retry_delay,
)
from celery_cronstore.store import alerts as store_alerts
from celery_cronstore.store.db import Database
from celery_cronstore.store.engine import DATABASE_ERRORS

__all__ = ["DELIVERIES", "LEASE_MARGIN", "AlertPass", "AlertRunner"]

logger = logging.getLogger("celery.beat")

#: Most deliveries one pass attempts (the rest wait for the next pass).
DELIVERIES = 100
#: Seconds past the webhook's timeout that a taken delivery stays this beat's: a beat
#: that dies mid-request leaves it to another after that.
LEASE_MARGIN = 60.0


@dataclass
class AlertPass:
    """What one pass did (logs, tests)."""

    opened: int = 0
    resolved: int = 0
    sent: int = 0
    failed: int = 0
    checkins: int = 0
    pings: int = 0
    pings_failed: int = 0


class AlertRunner:
    """Judge the tasks and deliver their alerts (see the module docstring)."""

    def __init__(self, config: Config, db: Database, scrub: Callable[[BaseException], str]) -> None:
        self.db = db
        self.settings = AlertSettings(config.alert_failures, config.alert_after)
        self.webhook = config.alert_webhook
        self.secret = config.alert_secret
        self.timeout = config.alert_timeout
        self.interval = config.alert_interval
        self._scrub = scrub
        self.sentry = SentryCheckins()
        self.pings = Pings(config.alert_pings, timeout=config.alert_timeout)
        # The first pass comes one interval after beat starts: beat settles first (sync,
        # strays, the first claims), and a beat that runs for seconds never starts one.
        self._next_look = time.monotonic() + self.interval
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def running(self) -> bool:
        """Whether a pass is going on on its thread."""
        return self._thread is not None and self._thread.is_alive()

    def look(self, moment: float) -> bool:
        """At most every ``cronstore_alert_interval`` seconds of ``moment`` (monotonic),
        start a pass on a thread (inline when the store has one connection); return
        whether one was started."""
        if not self.interval or moment < self._next_look or self.running:
            return False
        self._next_look = moment + self.interval
        if not self.db.threads:  # an in-memory SQLite store: its one connection is beat's
            self._guarded()
            return True
        self._thread = threading.Thread(target=self._guarded, name="cronstore-alerts")
        self._thread.daemon = True
        self._thread.start()
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the pass on the thread to end; return whether it did."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def close(self, timeout: float = 5.0) -> None:
        """Stop after the current delivery and wait for the thread (bounded)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _guarded(self) -> None:
        try:
            self.run_once()
        except DATABASE_ERRORS as exc:
            logger.warning("beat: judging or delivering alerts failed (%s)", self._scrub(exc))
        except Exception:  # a bug here must not end beat's thread of alerts for good
            logger.exception("beat: the alert pass failed")

    def run_once(self) -> AlertPass:
        """Run one pass now, on this thread: evaluate, deliver, check in, ping."""
        done = AlertPass()
        self.evaluate(done)
        self.deliver(done)
        sentry = sentry_active()
        if not sentry and not self.pings:
            return done
        newest = store_alerts.newest_fires(self.db)
        now = self.db.now()
        if sentry:
            done.checkins = self.sentry.look(newest, now)
        if self.pings:
            done.pings, done.pings_failed = self.pings.look(newest, now, self._stop)
        return done

    def evaluate(self, done: AlertPass | None = None) -> AlertPass:
        """Open, update and resolve the episodes the tasks' fires call for."""
        done = done if done is not None else AlertPass()
        facts = store_alerts.task_facts(self.db, every_enabled=every_task_watched(self.settings))
        open_now = by_kind(store_alerts.open_episodes(self.db))
        now = self.db.now()
        deliver = bool(self.webhook)
        for task in facts:
            changes = evaluate(task, open_now.get(task.id, {}), self.settings, now)
            if not changes:
                continue
            for change in store_alerts.apply_changes(
                self.db, task.id, changes, now, deliver=deliver
            ):
                if change.action == OPEN:
                    done.opened += 1
                    logger.warning(
                        "beat: alert: %s is %s: %s", task.name, change.kind, change.reason
                    )
                else:
                    done.resolved += 1
                    logger.info("beat: alert resolved: %s is no longer %s", task.name, change.kind)
        return done

    def deliver(self, done: AlertPass | None = None) -> AlertPass:
        """Send the due deliveries (the open before the resolve of one episode)."""
        done = done if done is not None else AlertPass()
        if not self.webhook:
            return done
        budget = DELIVERIES
        while budget > 0 and not self._stop.is_set():
            now = self.db.now()
            due = store_alerts.due(self.db, now, limit=budget)
            progress = False
            for episode in due:
                if self._stop.is_set():
                    break
                taken = store_alerts.take(self.db, episode, now, lease=self.timeout + LEASE_MARGIN)
                if taken is None:
                    continue  # another beat has it
                budget -= 1
                progress = self._send(taken, done) or progress
            # An episode resolved while its open was out owes its resolve at once.
            if not progress or not due:
                break
        return done

    def _send(self, episode: Episode, done: AlertPass) -> bool:
        """Deliver what ``episode`` owes; return whether it reached the receiver."""
        event = episode.pending
        if event is None:  # delivered meanwhile by a beat whose lease had lapsed
            store_alerts.settled(self.db, episode)
            return False
        try:
            post(self.webhook, episode, event, secret=self.secret, timeout=self.timeout)
        except DeliveryError as exc:
            retry_at = self.db.now() + timedelta(seconds=retry_delay(episode.attempts))
            store_alerts.delivery_failed(self.db, episode, str(exc), retry_at)
            done.failed += 1
            logger.warning(
                "beat: alert webhook: %s of %s's %s episode not delivered (%s); "
                "attempt %d, next at %s",
                event,
                episode.name,
                episode.kind,
                exc,
                episode.attempts,
                retry_at.isoformat(),
            )
            return False
        store_alerts.delivered(self.db, episode, event, self.db.now())
        done.sent += 1
        return True
