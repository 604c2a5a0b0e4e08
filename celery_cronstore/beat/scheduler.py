"""``celery_cronstore.Scheduler``: the beat scheduler, thin glue over the store.

Run it with ``celery -A app beat -S celery_cronstore.Scheduler`` (or ``-S cronstore``).
Instead of Celery's heap of every entry, each tick asks the database one indexed question
(what is the earliest planned fire?) and claims only what is due; see ``store.claims``.

The scheduler answers Celery's hooks and builds its parts once the store is open: the
:class:`~celery_cronstore.beat.send.Sender`, the
:class:`~celery_cronstore.beat.held.HeldClaims`, the
:class:`~celery_cronstore.beat.chores.Chores`, and the
:class:`~celery_cronstore.beat.loop.Loop` that ticks over them.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import uuid
from datetime import datetime
from typing import Any

from celery import beat

from celery_cronstore.beat.chores import Chores, warn_shared_sqlite
from celery_cronstore.beat.held import HeldClaims
from celery_cronstore.beat.loop import Backoff, Loop
from celery_cronstore.beat.metrics import BeatMetrics, start_metrics
from celery_cronstore.beat.off import Unarmed
from celery_cronstore.beat.schedule_sync import sync_beat_schedule
from celery_cronstore.beat.send import Sender, scrubbed
from celery_cronstore.beat.stop import StopSignal
from celery_cronstore.catalog import TaskCatalog
from celery_cronstore.config import Config
from celery_cronstore.errors import SchemaVersionError, StoreError, StoreUnavailableError
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.engine import DATABASE_ERRORS, redact
from celery_cronstore.store.listen import Listener, listener_for
from celery_cronstore.store.migrate import app_argument
from celery_cronstore.store.pooler import describe as pooler_line
from celery_cronstore.store.sweep import LOGGED, replan_strays

__all__ = ["Scheduler"]

logger = logging.getLogger("celery.beat")
#: What a tick backs off on and retries: the database away (or refusing), a socket error.
_RETRIED: tuple[type[Exception], ...] = (*DATABASE_ERRORS, OSError)


class Scheduler(beat.Scheduler):  # type: ignore[misc]  # Celery ships no types
    """A Celery beat scheduler that keeps periodic tasks in SQL (see the package docs)."""

    def __init__(self, app: Any, *args: Any, lazy: bool = False, **kwargs: Any) -> None:
        self.config = Config.from_app(app)
        self.node = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.store: Store | None = None
        self.claimer: Claimer | None = None
        #: The parts that tick, built once the store is open (:meth:`setup_schedule`).
        self.loop: Loop | None = None
        #: What ticks instead when firing is off (``cronstore_fire``, ``beat.off``).
        self.unarmed: Unarmed | None = None
        #: Prometheus metrics (``cronstore_metrics_port``), started with the store.
        self.metrics: BeatMetrics | None = None
        self._listener: Listener | None = None  # PostgreSQL: wake on change (store.listen)
        self._backoff = Backoff(self.config.poll_interval, self._scrub)
        self._started_at: datetime | None = None
        self._closed = False
        #: SIGTERM/SIGINT: stop between two chunks of a send, never inside one.
        self._stop = StopSignal()
        # Celery builds the scheduler once with lazy=True for the banner: no I/O then.
        super().__init__(app, *args, lazy=lazy, **kwargs)
        if not lazy:  # built by beat's service, after Celery installed its own handler
            self._stop.install()

    # -- Celery hooks ---------------------------------------------------------------------

    def setup_schedule(self) -> None:
        """Open the store, check its schema and sync ``beat_schedule`` (retried if down)."""
        try:
            self._ready()
        except DATABASE_ERRORS as exc:
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
            sleep = self._ready().tick()
        except SchemaVersionError:
            raise
        except _RETRIED as exc:
            if self._listener is not None:
                self._listener.drop()  # likely as dead as the rest: listen afresh later
            return self._backoff.failed("database", exc)
        self._backoff.reset()
        sleep = min(sleep, float(self.max_interval))
        # Sleep here, on the LISTEN socket: an edit making a task due sooner ends the wait
        # (0: Celery's loop ticks again at once). Unable to listen: Celery sleeps the rest.
        return sleep if self._listener is None else self._listener.wait(sleep)

    def sync(self) -> None:
        """Nothing to do: every change is committed as it happens."""

    def close(self) -> None:
        """Stop within a bound (idempotent): publish the claims taken ahead that fall due
        within a second (none after a SIGTERM), mark what went, hand every other claim
        back to the next beat at once, then release the broker connection and the
        database pool."""
        if self._closed:
            return
        self._closed = True
        self._stop.closing()
        try:
            if self.loop is not None:
                self.loop.held.flush()
                try:
                    self.loop.sender.hand_back()
                except Exception as exc:  # closing must go on; the lease hands them over
                    logger.error("beat: handing back unsent claims failed (%s)", self._scrub(exc))
            super().close()
        finally:
            if self.loop is not None:
                self.loop.chores.close()
            for held in (self._listener, self.claimer):
                if held is not None:
                    held.close()
            if self.store is not None:
                self.store.close()

    # -- building the parts ---------------------------------------------------------------

    @property
    def _url(self) -> str:
        return redact(self.config.url)

    def _ready(self) -> Loop | Unarmed:
        """Return the loop, opening the store and building the parts on the first call
        (a failed start is tried again at the next tick); with firing off, the heartbeat
        alone (``beat.off``)."""
        if self.loop is not None:
            return self.loop
        if self.unarmed is not None:
            return self.unarmed
        claimer = self.claimer or self._open()
        if not self.config.fire:
            assert self._started_at is not None
            self.unarmed = Unarmed(claimer, self._started_at, self.config.poll_interval)
            return self.unarmed
        self.loop = self._wire(claimer)
        return self.loop

    def _open(self) -> Claimer:
        """Open the store and check it, then make the claimer (and start the metrics)."""
        # No pre-ping for beat: a dead connection fails one tick, which backs off and
        # retries anyway, and a ping would cost every idle tick a round trip.
        # A beat frozen mid-claim (SIGSTOP, a VM pause) must not hold its row locks past
        # the lease: the server cuts its session off and the other replicas claim them.
        options = {
            "pool_pre_ping": False,
            "session_timeout": self.config.lease / 2,
            # The migrate hint names what -A was given (the app's own name may not import).
            "app_name": app_argument(),
            **self.config.engine_options,
        }
        try:
            store = self.store or Store(self.config.url, **options)
        except StoreUnavailableError:
            raise  # the database is down: backed off and tried again, not a config problem
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
        self._started_at = started_at = store.now()
        claimer = Claimer(
            store,
            self.node,
            lease=self.config.lease,
            batch_size=self.config.batch_size,
            misfire_grace=self.config.misfire_grace,
            allowlist=self.config.task_allowlist,
            seam=TaskCatalog(self.app, config=self.config, where="beat's app"),
            start_timeout=self.config.start_timeout,
            hold=True,
        )
        if store.db.dialect.name == "postgresql" and store.clock is None:
            # Through a transaction pooler LISTEN needs cronstore_listen_url, else beat polls.
            self._listener, changes = listener_for(
                store.db.engine,
                listen=self.config.listen,
                listen_url=self.config.listen_url,
                poll_interval=self.config.poll_interval,
            )  # a listener connects on its first wait
            logger.info("beat: database %s; %s", pooler_line(store.db.engine), changes)
        replanned = claimer.replan_errors()
        if replanned:
            logger.info("beat: checking %d periodic task(s) in error again", replanned)
        self._replan_strays(store)
        self.claimer = claimer
        if self.config.metrics_port and self.metrics is None:
            self.metrics = start_metrics(
                self.config.metrics_port,
                per_task=self.config.metrics_per_task,
                address=self.config.metrics_address,
                max_tasks=self.config.metrics_max_tasks,
            )
        logger.info("beat: cronstore %s ready as %s", self._url, self.node)
        _freeze_heap()
        if self.config.is_sqlite:
            warn_shared_sqlite(store, claimer, self.node, started_at, firing=self.config.fire)
        return claimer

    def _wire(self, claimer: Claimer) -> Loop:
        """Build the parts over an open store (no I/O)."""
        assert self.store is not None
        assert self._started_at is not None
        sender = Sender(
            self.app,
            self.config,
            claimer,
            _Broker(self),
            metrics=self.metrics,
            stop=self._stop,
        )
        # Claims are held until their time on this host's monotonic clock: an injected clock
        # (tests) has no such relation, so there beat claims a fire when it is due.
        ahead = 0.0 if self.store.clock is not None else self.config.claim_ahead
        return Loop(
            self.config,
            claimer,
            sender=sender,
            held=HeldClaims(self.config, claimer, sender, ahead=ahead),
            chores=Chores(self.config, claimer, sender, started_at=self._started_at),
            backoff=self._backoff,
            metrics=self.metrics,
        )

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

    def _scrub(self, exc: BaseException) -> str:
        """Return the first line of ``exc`` with every password removed."""
        return scrubbed(exc, self.app, self.config.url)


class _Broker:
    """The scheduler's broker connection and producer (Celery's lazily made
    ``connection`` and ``producer``), as the :class:`Sender` uses them."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    @property
    def connection(self) -> Any:
        """Return Celery's broker connection for beat."""
        return self._scheduler.connection

    @property
    def producer(self) -> Any:
        """Return beat's producer, connecting once if needed (one attempt, bounded by
        ``broker_connection_timeout``): beat owns the retry. Celery's own would retry
        for ``broker_connection_max_retries`` inside this call, and a fire waiting in it
        would go out after its task was disabled; here the claims wait for the next
        tick, which re-checks them first."""
        scheduler = self._scheduler
        producer = scheduler.__dict__.get("producer")
        if producer is None:
            connection = scheduler.connection
            connection.ensure_connection(max_retries=0)
            producer = scheduler.Producer(connection, auto_declare=False)
            scheduler.__dict__["producer"] = producer
        return producer

    def reset(self) -> None:
        """Drop both cached properties: the next publish connects afresh."""
        self._scheduler.__dict__.pop("producer", None)
        self._scheduler.__dict__.pop("connection", None)


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
