"""``celery_cronstore.Scheduler``: the beat scheduler, thin glue over the store.

Run it with ``celery -A app beat -S celery_cronstore.Scheduler`` (or ``-S cronstore``).
Instead of Celery's heap of every entry, each tick asks the database one indexed question
(what is the earliest planned fire?) and claims only what is due; see ``store.claims``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from celery import beat
from kombu.exceptions import OperationalError
from sqlalchemy.exc import SQLAlchemyError

from celery_cronstore import faults
from celery_cronstore.beat_schedule import timer_from_entry
from celery_cronstore.calls import call_problem
from celery_cronstore.config import Config
from celery_cronstore.errors import (
    CronstoreError,
    DuplicateTaskError,
    SchemaVersionError,
    StoreError,
)
from celery_cronstore.policy import CLOCK_WARN, CLOCK_WARN_EVERY
from celery_cronstore.publish import Dispatcher, publish
from celery_cronstore.records import Claim
from celery_cronstore.secrets import app_passwords, scrub
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.engine import redact
from celery_cronstore.store.listen import Listener
from celery_cronstore.store.retention import Pruner
from celery_cronstore.urls import driver_hint

__all__ = ["Scheduler"]

logger = logging.getLogger("celery.beat")

#: Seconds between heartbeats (``cronstore health``) and between looks for expired leases.
HEARTBEAT_EVERY = 5.0
#: Messages sent per broker batch.
PUBLISH_CHUNK = 250
#: Shortest and longest wait (seconds) when every due row is locked by another process.
LOCKED_BACKOFF = (0.05, 0.2)


class Scheduler(beat.Scheduler):  # type: ignore[misc]  # Celery ships no types
    """A Celery beat scheduler that keeps periodic tasks in SQL (see the package docs)."""

    def __init__(self, app: Any, *args: Any, lazy: bool = False, **kwargs: Any) -> None:
        self.config = Config.from_app(app)
        self.node = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.store: Store | None = None
        self.claimer: Claimer | None = None
        self._listener: Listener | None = None  # PostgreSQL: wake on change (store.listen)
        self._pending: list[Claim] = []
        self._failures = 0
        self._next_housekeeping = 0.0
        self._pruner: Pruner | None = None
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
            sleep = self._tick(claimer)
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
        """Release the broker connection and the database pool (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            super().close()
        finally:
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
            self._sync_config(store)
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
        self.claimer = claimer
        logger.info("beat: cronstore %s ready as %s", self._url, self.node)
        if self.config.is_sqlite:
            self._warn_shared_sqlite(store, claimer, self._started_at)
        return claimer

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

    def _tick(self, claimer: Claimer) -> float:
        if self._pending:
            # They waited for the broker: a task disabled meanwhile must not run.
            self._pending = claimer.recheck(self._pending)
            if not self._publish(claimer, self._pending):
                return self._backoff("broker", None)
        if time.monotonic() >= self._next_housekeeping and not self._housekeeping(claimer):
            return self._backoff("broker", None)
        now, earliest = claimer.peek()
        if earliest is None or earliest > now:
            self._progress(None)
            wait = (
                self.config.poll_interval if earliest is None else (earliest - now).total_seconds()
            )
            return max(0.0, min(self.config.poll_interval, wait))
        result = claimer.claim_due()
        self._report(result.errors)
        faults.hit("after_claim")
        if result.claims and not self._publish(claimer, result.claims):
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

    def _progress(self, stuck_at: datetime | None) -> None:
        """Note whether this tick could do the due work (``None``) or not (since when)."""
        if stuck_at is None:
            self._stalled_since = None
            self._locked_out = 0.0
        elif self._stalled_since is None:
            self._stalled_since = stuck_at

    def _housekeeping(self, claimer: Claimer) -> bool:
        """Heartbeat, hand back lost deliveries, take over lapsed leases (every few s)."""
        assert self._started_at is not None
        # One statement on PostgreSQL: the heartbeat, and which of the writes below have work.
        chores = claimer.chores(self._started_at, self._stalled_since, self._clock_offset)
        self._check_clock(chores.now)
        abandoned = claimer.abandon_silent() if chores.silent else 0
        if abandoned:
            logger.warning(
                "beat: %d started fire(s) recorded abandoned: their worker stopped reporting",
                abandoned,
            )
        unstarted = claimer.redeliver_unstarted() if chores.unstarted else 0
        if unstarted:
            logger.warning(
                "beat: %d CronTask fire(s) not started %gs after publishing; "
                "publishing again under the same task id",
                unstarted,
                self.config.start_timeout,
            )
        reclaimed = claimer.reclaim_expired() if chores.expired or unstarted else []
        self._next_housekeeping = time.monotonic() + HEARTBEAT_EVERY
        self._prune(claimer)
        if reclaimed:
            logger.warning("beat: re-publishing %d claim(s) whose lease ran out", len(reclaimed))
            return self._publish(claimer, reclaimed)
        return True

    def _prune(self, claimer: Claimer) -> None:
        """Delete one small batch of old fire history (``cronstore_history_days``).

        One bounded transaction per housekeeping while a pass has work; a minute's pause
        after each pass. A failure is logged and never stops the firing.
        """
        if self._pruner is None:
            self._pruner = Pruner(claimer.db)
        try:
            step = self._pruner.pace(self.config.history, time.monotonic())
        except SQLAlchemyError as exc:
            logger.warning("beat: pruning the fire ledger failed (%s)", self._scrub(exc))
            return
        if step is not None and step.deleted:
            logger.debug("beat: pruned %d old ledger row(s)", step.deleted)

    def _publish(self, claimer: Claimer, claims: list[Claim]) -> bool:
        """Publish claims in order; keep the unsent ones pending. Return whether all went.

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
            dispatcher = Dispatcher(self.app, producer)
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
            logger.error(
                "beat: publishing failed (%s); %d fire(s) wait",
                self._scrub(exc),
                len(self._pending),
            )
            self.__dict__.pop("producer", None)
            self.__dict__.pop("connection", None)
            self._record_sent(claimer, sent, failed)
            return False
        self._pending = []
        faults.hit("after_publish")
        self._record_sent(claimer, sent, failed)
        return True

    def _record_sent(
        self, claimer: Claimer, sent: list[Claim], failed: list[tuple[Claim, str]]
    ) -> None:
        if sent:
            claimer.mark_published(sent, self._watched)
        if failed:
            claimer.drop(failed)
            self._report([(claim.name, reason) for claim, reason in failed])

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
        """Whether the ledger will see this fire start (a CronTask records its start)."""
        from celery_cronstore.task import CronTask

        return isinstance(self.app.tasks.get(claim.task), CronTask)

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

    # -- beat_schedule --------------------------------------------------------------------

    def _sync_config(self, store: Store) -> None:
        """Mirror ``app.conf.beat_schedule`` into the store (source ``config``)."""
        wanted = self.app.conf.beat_schedule or {}
        zone = str(self.app.conf.timezone or "UTC")
        for name, entry in wanted.items():
            try:
                self._sync_entry(store, name, dict(entry), zone)
            except (CronstoreError, ValueError) as exc:
                logger.error("beat: beat_schedule entry %r not stored: %s", name, exc)
        for stale in store.list(source="config"):
            if stale.name not in wanted:
                logger.info("beat: removing %r: no longer in beat_schedule", stale.name)
                store.remove(stale.name)

    @staticmethod
    def _sync_entry(store: Store, name: str, entry: dict[str, Any], zone: str) -> None:
        timer = timer_from_entry(name, entry["schedule"], zone)
        fields: dict[str, Any] = {
            "task": entry["task"],
            "args": list(entry.get("args") or ()),
            "kwargs": dict(entry.get("kwargs") or {}),
            "options": dict(entry.get("options") or {}),
        }
        try:
            current = store.get(name)
        except KeyError:
            with contextlib.suppress(DuplicateTaskError):  # another replica added it first
                store.add(
                    name,
                    timer=str(timer),
                    kind=timer.kind,
                    tz=timer.tz_name,
                    source="config",
                    **fields,
                )
            return
        if current.source != "config":
            logger.warning("beat: beat_schedule entry %r shadows a stored task; left alone", name)
            return
        same_timer = (current.timer, current.timer_kind, current.tz) == (
            str(timer),
            timer.kind,
            timer.tz_name,
        )
        changed = {k: v for k, v in fields.items() if getattr(current, k) != v}
        if not same_timer:
            changed.update(timer=str(timer), kind=timer.kind, tz=timer.tz_name)
        if changed:
            store.update(name, **changed)


def _unsendable(exc: BaseException) -> str:
    return (
        f"the message could not be built ({type(exc).__name__}: {_first_line(exc)}); "
        "fix the row with cronstore edit"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""
