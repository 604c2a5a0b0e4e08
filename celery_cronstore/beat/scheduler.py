"""``celery_cronstore.Scheduler``: the beat scheduler, thin glue over the store.

Run it with ``celery -A app beat -S celery_cronstore.Scheduler`` (or ``-S cronstore``).
Instead of Celery's heap of every entry, each tick asks the database one indexed question
(what is the earliest planned fire?) and claims only what is due; see ``store.claims``.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import socket
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from celery import beat
from kombu.exceptions import OperationalError
from sqlalchemy.exc import SQLAlchemyError

from celery_cronstore import faults
from celery_cronstore.beat.chores import Upkeep
from celery_cronstore.beat.dispatch import Dispatcher
from celery_cronstore.beat.held import ClaimAhead, Held, lately
from celery_cronstore.beat.metrics import BeatMetrics, start_metrics
from celery_cronstore.beat.publish import publish
from celery_cronstore.beat.schedule_sync import sync_beat_schedule
from celery_cronstore.beat.threads import Finisher, Vacuumer
from celery_cronstore.calls import call_problem
from celery_cronstore.config import Config
from celery_cronstore.errors import (
    SchemaVersionError,
    StoreError,
)
from celery_cronstore.policy.lead import DEFAULT_ROW_COST
from celery_cronstore.records import Claim
from celery_cronstore.secrets import app_passwords, scrub
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.engine import redact
from celery_cronstore.store.listen import Listener
from celery_cronstore.store.retention import Pruner
from celery_cronstore.store.sweep import LOGGED, replan_strays
from celery_cronstore.urls import driver_hint

__all__ = ["Scheduler"]

logger = logging.getLogger("celery.beat")

#: Messages sent per broker batch.
PUBLISH_CHUNK = 250
#: Shortest and longest wait (seconds) when every due row is locked by another process.
LOCKED_BACKOFF = (0.05, 0.2)


class Scheduler(ClaimAhead, Upkeep, beat.Scheduler):  # type: ignore[misc]  # Celery ships no types
    """A Celery beat scheduler that keeps periodic tasks in SQL (see the package docs)."""

    def __init__(self, app: Any, *args: Any, lazy: bool = False, **kwargs: Any) -> None:
        self.config = Config.from_app(app)
        self.node = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.store: Store | None = None
        self.claimer: Claimer | None = None
        self._listener: Listener | None = None  # PostgreSQL: wake on change (store.listen)
        self._pending: list[Claim] = []
        #: Claims taken ahead of their fire time (``cronstore_claim_ahead``; see ``ahead``).
        self._early: list[Held] = []
        self._unmarked: list[tuple[Claim, float]] = []
        self._ahead = 0.0
        self._row_cost = DEFAULT_ROW_COST
        self._counted: tuple[datetime, int] | None = None
        self._burst_end: datetime | None = None
        #: What a claim transaction and a housekeeping pass take (seconds; the longest
        #: lately, decaying): beat starts neither when a claim taken ahead falls due sooner
        #: than twice that.
        self._claim_cost = 0.0
        self._chores_cost = 0.0
        self._dispatcher: Dispatcher | None = None
        self._failures = 0
        self._next_housekeeping = 0.0
        self._pruner: Pruner | None = None
        self._finisher: Finisher | None = None  # the rest of a prune pass (``pruning``)
        self._vacuumer: Vacuumer | None = None  # PostgreSQL: beat's own vacuum (``pruning``)
        self._started_at: datetime | None = None
        self._closed = False
        self._reported_errors: set[tuple[str, str]] = set()
        #: Since when due work could not be done (``cronstore health``), and the current
        #: wait while every due row is locked by someone else.
        self._stalled_since: datetime | None = None
        self._locked_out = 0.0
        self._clock_offset: float | None = None
        self._told_transport = False
        self._next_clock_warning = 0.0
        #: Prometheus metrics (``cronstore_metrics_port``), started with the store.
        self.metrics: BeatMetrics | None = None
        # Celery builds the scheduler once with lazy=True for the banner: no I/O then.
        super().__init__(app, *args, lazy=lazy, **kwargs)

    # -- Celery hooks ---------------------------------------------------------------------

    def setup_schedule(self) -> None:
        """Open the store, check its schema and sync ``beat_schedule`` (retried if down)."""
        try:
            self._ready()
        except SQLAlchemyError as exc:
            logger.error(
                "beat: store %s unreachable at start (%s); retrying", self._url, self._scrub(exc)
            )

    @property
    def schedule(self) -> dict[str, Any]:
        """Return an empty mapping: entries live in the database, not in beat's memory."""
        return {}

    @property
    def info(self) -> str:
        """Return the banner line naming the store (password removed)."""
        return f"    . store -> {self._url}"

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Claim and publish what is due; return the seconds to sleep until the next look."""
        if self._closed:
            return self.config.poll_interval
        try:
            claimer = self._ready()
            began = time.perf_counter()
            sleep = self._tick(claimer)
            if self.metrics is not None:
                self.metrics.tick_seconds.observe(time.perf_counter() - began)
                stalled = self._stalled_since
                self.metrics.stalled.set(
                    0 if stalled is None else (datetime.now(timezone.utc) - stalled).total_seconds()
                )
        except SchemaVersionError:
            raise
        except (SQLAlchemyError, OSError) as exc:
            if self._listener is not None:
                self._listener.drop()  # likely as dead as the rest: listen afresh later
            return self._backoff("database", exc)
        self._failures = 0
        sleep = min(sleep, float(self.max_interval))
        # Sleep here, on the LISTEN socket: an edit making a task due sooner ends the wait
        # (0: Celery's loop ticks again at once). Unable to listen: Celery sleeps the rest.
        return sleep if self._listener is None else self._listener.wait(sleep)

    def sync(self) -> None:
        """Nothing to do: every change is committed as it happens."""

    def close(self) -> None:
        """Publish the claims taken ahead at their time, then release the broker connection
        and the database pool (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._flush_early()
            super().close()
        finally:
            if self._finisher is not None:
                self._finisher.stop()
            if self._vacuumer is not None:
                self._vacuumer.wait(5.0)  # a VACUUM cannot be stopped half-way: let it end
            for held in (self._listener, self.claimer):
                if held is not None:
                    held.close()
            if self.store is not None:
                self.store.close()

    # -- the loop -------------------------------------------------------------------------

    @property
    def _url(self) -> str:
        return redact(self.config.url)

    def _ready(self) -> Claimer:
        if self.claimer is not None:
            return self.claimer
        # No pre-ping for beat: a dead connection fails one tick, which backs off and
        # retries anyway, and a ping would cost every idle tick a round trip.
        # A beat frozen mid-claim (SIGSTOP, a VM pause) must not hold its row locks past
        # the lease: the server cuts its session off and the other replicas claim them.
        options = {
            "pool_pre_ping": False,
            "session_timeout": self.config.lease / 2,
            "app_name": self.app.main,
            **self.config.engine_options,
        }
        try:
            store = self.store or Store(self.config.url, **options)
        except StoreError as exc:  # a URL or driver problem: one line that names the fix
            logger.critical("beat: %s", exc)
            raise SystemExit(f"celery-cronstore: {exc}") from None
        self.store = store
        if self.config.is_sqlite and self.config.auto_migrate_sqlite:
            store.upgrade()
        try:
            store.check_schema()
        except SchemaVersionError as exc:
            logger.critical("beat: %s", exc)
            raise SystemExit(f"celery-cronstore: {exc}") from None
        if self.config.sync_beat_schedule:
            sync_beat_schedule(store, self.app)
        self._started_at = store.now()
        claimer = Claimer(
            store,
            self.node,
            lease=self.config.lease,
            batch_size=self.config.batch_size,
            misfire_grace=self.config.misfire_grace,
            allowlist=self.config.task_allowlist,
            task_check=self._unregistered if self.config.require_registered else None,
            call_check=functools.partial(call_problem, self.app),
            start_timeout=self.config.start_timeout,
            hold=True,
        )
        if self.config.listen and store.db.dialect.name == "postgresql" and store.clock is None:
            self._listener = Listener(store.db.engine)  # connects on its first wait
        replanned = claimer.replan_errors()
        if replanned:
            logger.info("beat: checking %d periodic task(s) in error again", replanned)
        self._replan_strays(store)
        self.claimer = claimer
        # Claims are held until their time on this host's monotonic clock: an injected clock
        # (tests) has no such relation, so there beat claims a fire when it is due.
        self._ahead = 0.0 if store.clock is not None else self.config.claim_ahead
        if self.config.metrics_port and self.metrics is None:
            self.metrics = start_metrics(
                self.config.metrics_port,
                per_task=self.config.metrics_per_task,
                address=self.config.metrics_address,
            )
        logger.info("beat: cronstore %s ready as %s", self._url, self.node)
        _freeze_heap()
        if self.config.is_sqlite:
            self._warn_shared_sqlite(store, claimer, self._started_at)
        return claimer

    def _replan_strays(self, store: Store) -> None:
        """Plan again enabled rows whose ``next_run`` was set by hand (``store.sweep``)."""
        strays = replan_strays(store.db)
        for stray in strays[:LOGGED]:
            logger.warning(
                "beat: periodic task %r: %s (set by hand?); planning it again",
                stray.name,
                stray.reason,
            )
        if len(strays) > LOGGED:
            logger.warning("beat: %d more periodic task(s) planned again", len(strays) - LOGGED)

    def _tick(self, claimer: Claimer) -> float:
        if self._pending:
            # They waited for the broker: a task disabled meanwhile must not run.
            self._pending = claimer.recheck(self._pending)
            if not self._publish(claimer, self._pending):
                return self._backoff("broker", None)
        # Fires first: the claims taken ahead whose time has come, then the chores.
        if self._early and not self._publish_early(claimer):
            return self._backoff("broker", None)
        if self._held_near():  # a burst's fires follow closely: they come first
            return self._early_wait()
        if self._housekeeping_due():
            began = time.monotonic()
            done = self._housekeeping(claimer)
            self._chores_cost = lately(self._chores_cost, time.monotonic() - began)
            if not done:
                return self._backoff("broker", None)
        now, earliest = claimer.peek()
        looked_at, looked = now, time.monotonic()
        if self.config.is_sqlite:  # the host's clock is the store's: read both together
            looked_at, looked = datetime.now(timezone.utc), time.monotonic()
        lead = self._lead(claimer, now, earliest)
        ahead = timedelta(seconds=lead)
        if earliest is None or earliest > now + ahead:
            self._progress(None)
            wait = (
                self.config.poll_interval
                if earliest is None
                else (earliest - now).total_seconds() - lead
            )
            return max(0.0, min(self.config.poll_interval, wait, self._early_wait()))
        if not self._claim_fits():
            return self._early_wait()  # a fire taken ahead first; claim after it
        began = time.monotonic()
        result = claimer.claim_due(ahead)
        self._timed_claim(result.rows, time.monotonic() - began)
        self._report(result.errors)
        if self.metrics is not None:
            self.metrics.claimed(result)
        faults.hit("after_claim")
        if self._ahead:
            self._hold_early(result.claims, looked_at, looked)
            sent = self._publish_early(claimer)
        else:
            sent = not result.claims or self._publish(claimer, result.claims)
        if not sent:
            self._progress(now)
            return self._backoff("broker", None)
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

    def _publish(self, claimer: Claimer, claims: list[Claim], mark: bool = True) -> bool:
        """Publish claims in order; keep the unsent ones pending. Return whether all went.

        ``mark``: mark the sent ones published now (else they wait for
        :meth:`_settle_marks`).

        Only the broker's connection and channel errors hold claims back (they are sent
        again, same task ids, once it is back). Anything else raised for one message (a
        row whose message cannot be built) drops that fire and puts its task in error
        with the reason: the rest of the batch goes out.
        """
        if not claims:
            self._pending = []
            return True
        sent: list[Claim] = []
        failed: list[tuple[Claim, str]] = []
        done = 0
        try:
            producer = self.producer
            broker_errors = self._broker_errors()
            dispatcher = self._dispatcher
            if dispatcher is None or dispatcher.producer is not producer:
                # One per broker connection, as kombu's own declare cache: the queues are
                # declared and the tasks looked up once, not again for every fire.
                dispatcher = self._dispatcher = Dispatcher(self.app, producer)
            for start in range(0, len(claims), PUBLISH_CHUNK):
                done = start
                chunk = claims[start : start + PUBLISH_CHUNK]
                went: list[Claim] = []
                # One Redis pipeline (kombu >= 5.7) or one wait for RabbitMQ's confirms per
                # chunk; a failed flush leaves the whole chunk pending, same task ids.
                with dispatcher.batch(PUBLISH_CHUNK):
                    for claim in chunk:
                        try:
                            self._send(claim, producer, dispatcher)
                        except broker_errors:
                            raise
                        except Exception as exc:
                            failed.append((claim, _unsendable(exc)))
                        else:
                            went.append(claim)
                sent.extend(went)
            done = len(claims)
        except Exception as exc:  # broker errors come in many types; none may kill beat
            if isinstance(exc, ImportError) and not self._told_transport:
                # kombu imports its transport lazily: a missing package shows up here.
                self._told_transport = True
                logger.critical("beat: %s", driver_hint(exc, str(self.app.conf.broker_url)))
            lost = {c.task_id for c, _ in failed}
            self._pending = [c for c in claims[done:] if c.task_id not in lost]
            if self.metrics is not None:
                self.metrics.failed("broker")
            logger.error(
                "beat: publishing failed (%s); %d fire(s) wait",
                self._scrub(exc),
                len(self._pending),
            )
            self.__dict__.pop("producer", None)
            self.__dict__.pop("connection", None)
            self._dispatcher = None
            self._record_sent(claimer, sent, failed, mark)
            return False
        self._pending = []
        faults.hit("after_publish")
        self._record_sent(claimer, sent, failed, mark)
        return True

    def _record_sent(
        self, claimer: Claimer, sent: list[Claim], failed: list[tuple[Claim, str]], mark: bool
    ) -> None:
        if sent and mark:
            claimer.mark_published(sent, self._watched)
        elif sent:
            self._defer_marks(claimer, sent)
        if failed:
            claimer.drop(failed)
            self._report([(claim.name, reason) for claim, reason in failed])
        if self.metrics is not None:
            self.metrics.published(sent, datetime.now(timezone.utc))
            self.metrics.failed("message", len(failed))

    def _broker_errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions that mean "the broker is unavailable" (not "this message is bad")."""
        connection = self.connection
        return (
            OperationalError,
            OSError,
            *getattr(connection, "connection_errors", ()),
            *getattr(connection, "channel_errors", ()),
        )

    def _watched(self, claim: Claim) -> bool:
        """Whether the ledger will see this fire start (CronTask; plain tasks' workers)."""
        task = self.app.tasks.get(claim.task)
        if task is None:  # sent by name: this app does not know who runs it
            return False
        return getattr(task, "cronstore_guarded", False) or self.config.watch_plain_tasks

    def _redeliverable(self, name: str) -> bool:
        """Whether a fire of task ``name`` that never started may be published again."""
        task = self.app.tasks.get(name)
        return bool(getattr(task, "cronstore_guarded", False) or getattr(task, "acks_late", False))

    def _send(self, claim: Claim, producer: Any, dispatcher: Dispatcher | None = None) -> None:
        if dispatcher is None:
            publish(self.app, claim, producer)
        else:
            dispatcher.send(claim)
        faults.hit("mid_batch")

    def _scrub(self, exc: BaseException) -> str:
        """Return the first line of ``exc`` with every password removed (drivers and
        brokers may echo a URL or a connection string)."""
        return scrub(_first_line(exc), app_passwords(self.app, self.config.url))

    def _unregistered(self, name: str) -> str | None:
        """Return why beat refuses task ``name``: not registered in its app."""
        if name in self.app.tasks:
            return None
        return (
            f"task {name!r} is not registered in beat's app: import its module in beat "
            "(Celery's imports/include settings or autodiscover_tasks), or set "
            "cronstore_require_registered = False to send tasks by name"
        )

    def _report(self, errors: list[tuple[str, str]]) -> None:
        for item in errors:
            if item not in self._reported_errors:
                self._reported_errors.add(item)
                logger.error("beat: periodic task %r is in error and will not fire: %s", *item)

    def _backoff(self, what: str, exc: BaseException | None) -> float:
        self._failures += 1
        # Never wait longer than the poll interval: recovery is noticed within one tick.
        delay = min(self.config.poll_interval, 0.5 * 2.0 ** min(self._failures, 8))
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


_frozen = False


def _freeze_heap() -> None:
    """Once per process: what the first beat holds once set up (modules, the app, engines,
    compiled SQL) lives as long as the process; keep it out of the cycle collector's full
    passes, which would otherwise walk it all (20-60 ms here, a pause that makes fires
    late). Objects are still freed when their last reference goes."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()


def _unsendable(exc: BaseException) -> str:
    return (
        f"the message could not be built ({type(exc).__name__}: {_first_line(exc)}); "
        "fix the row with cronstore edit"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""
