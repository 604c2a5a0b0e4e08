"""Beat's sender: the one object the other parts of beat talk to for sending.

:class:`Sender` publishes a list of claims in fire-time order (through
:class:`~celery_cronstore.beat.dispatch.Dispatcher`, which falls back to
:func:`~celery_cronstore.beat.publish.publish`), and records what happened to them: the
sent ones marked published (now, or as the caller's ``mark`` says), a fire whose message
cannot be built dropped with its task put in error, and the rest held back while the
broker is away (sent again, same task ids, once it is back). What depends on beat's
app (will the ledger see this fire start? may it be published a second time?) is asked
of the claimer's seam, :class:`~celery_cronstore.catalog.TaskCatalog`, in one place.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Protocol

from kombu.exceptions import OperationalError

from celery_cronstore import faults
from celery_cronstore.beat.dispatch import Dispatcher
from celery_cronstore.beat.metrics import BeatMetrics
from celery_cronstore.beat.outcome import settle
from celery_cronstore.beat.recent import RecentSends
from celery_cronstore.beat.stop import StopSignal
from celery_cronstore.config import Config
from celery_cronstore.records import Claim
from celery_cronstore.secrets import app_passwords, scrub
from celery_cronstore.store import Claimer
from celery_cronstore.store.engine import DATABASE_ERRORS
from celery_cronstore.store.urls import driver_hint

__all__ = ["PUBLISH_CHUNK", "Broker", "Sender", "first_line", "scrubbed"]

logger = logging.getLogger("celery.beat")

#: Messages sent per broker batch.
PUBLISH_CHUNK = 250


class Broker(Protocol):
    """The broker connection and producer beat publishes through (Celery's, kept by
    the scheduler), and a way to drop both after a failure."""

    @property
    def connection(self) -> Any:
        """Return the broker connection (opened on first use)."""
        ...

    @property
    def producer(self) -> Any:
        """Return the producer on that connection (connected on first use)."""
        ...

    def reset(self) -> None:
        """Forget the connection and the producer: the next publish opens new ones."""
        ...


class Sender:
    """Publish claims and record the outcome (see the module docstring)."""

    def __init__(
        self,
        app: Any,
        config: Config,
        claimer: Claimer,
        broker: Broker,
        *,
        metrics: BeatMetrics | None = None,
        stop: StopSignal | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.claimer = claimer
        self.broker = broker
        self.metrics = metrics
        #: Claims the broker did not take: sent again first at the next tick.
        self._pending: list[Claim] = []
        self._dispatcher: Dispatcher | None = None
        self._told_transport = False
        self._reported: set[tuple[str, str]] = set()
        #: Sent claims whose mark the database did not take: marked at the next publish.
        self._unmarked: list[Claim] = []
        #: SIGTERM/SIGINT: a send ends its chunk, then beat stops.
        self.stop = stop or StopSignal()
        #: What went out lately: written back after an outage if the database lost it.
        self.recent = RecentSends()

    @property
    def pending(self) -> int:
        """Return how many claims wait for the broker."""
        return len(self._pending)

    def publish(
        self, claims: list[Claim], mark: Callable[[list[Claim]], None] | None = None
    ) -> bool:
        """Publish claims in order; keep the unsent ones pending. Return whether all went.

        ``mark``: what to do with the sent ones (default :meth:`mark`: mark them
        published now; the held claims keep some to mark later).

        A fire a second publish could run twice is recorded ``sending`` just before its
        chunk goes (the re-check: a task disabled since is not sent), so a fire is sent at
        most once whatever stops beat. Only the broker's connection and channel errors
        hold claims back; what reached the broker is marked, what surely did not is sent
        again (same task ids) once it is back, and what may have is never sent again
        (``beat.outcome``). Anything else raised for one message (a row whose message
        cannot be built) drops that fire and puts its task in error with the reason.
        """
        self._mark_leftovers()
        if not claims:
            self._pending = []
            return True
        with self.stop.sending():
            return self._publish(claims, mark)

    def _publish(self, claims: list[Claim], mark: Callable[[list[Claim]], None] | None) -> bool:
        sent: list[Claim] = []
        failed: list[tuple[Claim, str]] = []
        #: What waits for the next attempt, once a chunk failed (``None``: none failed).
        pending: list[Claim] | None = None
        done = 0
        try:
            producer = self.broker.producer
            broker_errors = self._broker_errors()
            dispatcher = self._dispatcher
            if dispatcher is None or dispatcher.producer is not producer:
                # One per broker connection, as kombu's own declare cache: the queues are
                # declared and the tasks looked up once, not again for every fire.
                dispatcher = self._dispatcher = Dispatcher(
                    self.app, producer, fast=self.config.fast_path
                )
            for start in range(0, len(claims), PUBLISH_CHUNK):
                done = start
                if self.stop.requested:  # beat is stopping: the rest is handed back
                    self._pending = claims[start:]
                    self._record(sent, failed, mark)
                    return False
                chunk = self._intend(claims[start : start + PUBLISH_CHUNK])
                handed: list[Claim] = []
                failing: Claim | None = None
                try:
                    # One Redis transaction or one wait for RabbitMQ's confirms per chunk.
                    with dispatcher.batch(PUBLISH_CHUNK):
                        for claim in chunk:
                            failing = claim
                            try:
                                dispatcher.send(claim)
                                faults.hit("mid_batch")
                            except broker_errors:
                                raise
                            except Exception as exc:
                                failed.append((claim, _unsendable(exc)))
                            else:
                                handed.append(claim)
                        failing = None
                except broker_errors as exc:
                    rest = chunk[chunk.index(failing) + 1 :] if failing is not None else []
                    outcome = settle(handed, failing, rest, exc, buffered=dispatcher.buffered)
                    sent.extend(outcome.went)
                    again = [c for c in outcome.unsure if not self._once(c)]
                    pending = [*outcome.unsent, *again, *claims[start + PUBLISH_CHUNK :]]
                    self._lost_answer([c for c in outcome.unsure if self._once(c)])
                    # Moved to ``sending`` for this chunk: back. Those their claim moved
                    # are put back with the rest that waits (:meth:`put_back`).
                    self.claimer.release(
                        [c for c in outcome.unsent if self._once(c) and not c.sending]
                    )
                    raise
                sent.extend(handed)
            done = len(claims)
            dispatcher.forget(claims)  # sent or dropped: nothing rendered ahead is kept
        except Exception as exc:  # broker errors come in many types; none may kill beat
            if pending is None:  # failed before any chunk went out: it all waits
                gone = {c.task_id for c, _ in failed} | {c.task_id for c in sent}
                pending = [c for c in claims[done:] if c.task_id not in gone]
            self._pending = self.put_back(pending)
            if isinstance(exc, DATABASE_ERRORS):
                # The ledger is away: the loop backs off; what went is marked later.
                self._record(sent, failed, mark)
                raise
            if isinstance(exc, ImportError) and not self._told_transport:
                # kombu imports its transport lazily: a missing package shows up here.
                self._told_transport = True
                logger.critical("beat: %s", driver_hint(exc, str(self.app.conf.broker_url)))
            if self.metrics is not None:
                self.metrics.failed("broker")
            logger.error(
                "beat: publishing failed (%s); %d fire(s) wait",
                self.scrub(exc),
                len(self._pending),
            )
            self.broker.reset()
            self._dispatcher = None
            self._record(sent, failed, mark)
            return False
        self._pending = []
        faults.hit("after_publish")
        self._record(sent, failed, mark)
        return True

    def prepare(self, claims: list[Claim]) -> int:
        """Render ahead the messages of claims taken before their time
        (:meth:`Dispatcher.prepare`: a burst's fire then costs one ``LPUSH`` when it
        falls due); return how many. Nothing before the first send on a connection."""
        dispatcher = self._dispatcher
        if dispatcher is None or not claims:
            return 0
        try:
            return dispatcher.prepare(claims)
        except Exception as exc:  # the broker went away: they are built when they go
            logger.debug("beat: could not render messages ahead: %s", self.scrub(exc))
            return 0

    def forget(self, claims: list[Claim]) -> None:
        """Forget what :meth:`prepare` rendered for claims that will not be sent."""
        if self._dispatcher is not None and claims:
            self._dispatcher.forget(claims)

    def retry_pending(self) -> bool:
        """Mark what went while the database was away, then publish the claims that
        waited for the broker (those whose task is still there and enabled); return
        whether all went."""
        self._mark_leftovers()
        if not self._pending:
            return True
        # They waited for the broker: a task disabled meanwhile must not run.
        self._pending = self.claimer.recheck(self._pending)
        return self.publish(self._pending)

    def hand_back(self) -> int:
        """At close: mark what went, and hand the claims still waiting to the next beat."""
        self._mark_leftovers()
        waiting, self._pending = self._pending, []
        return self.claimer.hand_back(waiting)

    def restore(self) -> int:
        """After a failover, before claiming again: write back the fires sent lately
        whose claims the database lost (``store.restore``); return how many."""
        sent = self.recent.since(time.monotonic())
        if not sent:
            return 0
        return self.claimer.restore(sent, self.config.history).written

    def _once(self, claim: Claim) -> bool:
        """Whether a second publish of ``claim`` could run it twice (see the seam)."""
        return not self.claimer.seam.redeliverable(claim.task)

    def _intend(self, chunk: list[Claim]) -> list[Claim]:
        """Record the chunk's fires that must go at most once as ``sending``; return the
        chunk less those the ledger refused (taken over, or their task disabled or paused).

        Those their claim recorded ``sending`` already (``Claim.sending``) need no write:
        their tasks are read again instead (one read, no write), so a disable committed
        since the claim (one that waited for the claim's row locks, say) still stops them.
        """
        marked = [c for c in chunk if c.sending]
        once = [c for c in chunk if not c.sending and self._once(c)]
        refused: set[str] = set()
        if marked:
            kept = {c.task_id for c in self.claimer.recheck(marked)}
            refused.update(c.task_id for c in marked if c.task_id not in kept)
        if once:
            going = {c.task_id for c in self.claimer.mark_sending(once)}
            refused.update(c.task_id for c in once if c.task_id not in going)
        return [c for c in chunk if c.task_id not in refused] if refused else chunk

    def put_back(self, claims: list[Claim]) -> list[Claim]:
        """Return ``claims``, none of which went, with those their claim recorded
        ``sending`` put back to ``claimed`` (under their lease): the next attempt, or the
        beat that takes them over, writes ``sending`` again after its re-check. If the
        database is away they stay ``sending`` (this beat's, same attempt), which this
        beat's next ``sending`` write accepts."""
        marked = [c for c in claims if c.sending]
        if not marked:
            return claims
        with contextlib.suppress(*DATABASE_ERRORS):
            self.claimer.release(marked)
        return [replace(c, sending=False) if c.sending else c for c in claims]

    def _lost_answer(self, unsure: list[Claim]) -> None:
        """Record fires the broker may or may not have taken: sent at most once, they are
        marked published with the reason (a CronTask's is sent again: its guard starts
        one copy)."""
        once = [c for c in unsure if self._once(c)]
        if once:
            logger.warning(
                "beat: the broker's answer for %d fire(s) was lost; they may have gone out "
                "and are not sent again",
                len(once),
            )
            self.recent.add(once, time.monotonic())
            self.claimer.mark_maybe_sent(once)

    def _mark_leftovers(self) -> None:
        """Mark published what went while the database was away (kept in memory)."""
        if self._unmarked:
            leftovers, self._unmarked = self._unmarked, []
            try:
                self.claimer.mark_published(leftovers)
            except DATABASE_ERRORS:
                self._unmarked = leftovers
                raise

    def mark(self, claims: list[Claim], ago: Mapping[str, float] | None = None) -> None:
        """Mark ``claims`` published in the ledger (``ago``: seconds since each went, by
        task id, when they are marked later than that)."""
        self.claimer.mark_published(claims, ago=ago)

    def revoke(self, task_ids: list[str]) -> None:
        """Revoke the fires a newer one replaced (overlap policy ``replace``): workers
        discard them unstarted and terminate them where the pool can (prefork). Their
        ledger rows say ``replaced`` already; a failed broadcast is logged, not retried.
        Where the pool cannot terminate (threads, solo, gevent), a CronTask run of a
        replaced fire sees its ``checkpoint()`` return False and may stop there."""
        if not task_ids:
            return
        try:
            self.app.control.revoke(task_ids, terminate=True, signal="SIGTERM")
        except Exception as exc:  # the broker is away: the rows say replaced all the same
            logger.warning(
                "beat: could not revoke replaced fires %s: %s", task_ids, self.scrub(exc)
            )
        else:
            logger.info("beat: revoked replaced fire(s) %s", ", ".join(task_ids))

    def report(self, errors: list[tuple[str, str]]) -> None:
        """Log each (periodic task, reason) put in error, once per process."""
        for item in errors:
            if item not in self._reported:
                self._reported.add(item)
                logger.error("beat: periodic task %r is in error and will not fire: %s", *item)

    def scrub(self, exc: BaseException) -> str:
        """Return the first line of ``exc`` with every password removed."""
        return scrubbed(exc, self.app, self.config.url)

    def _record(
        self,
        sent: list[Claim],
        failed: list[tuple[Claim, str]],
        mark: Callable[[list[Claim]], None] | None,
    ) -> None:
        """Mark the sent claims, drop the unsendable ones, and count both. Sent claims
        whose mark the database did not take are kept and marked at the next publish."""
        if sent:
            self.recent.add(sent, time.monotonic())
            try:
                (self.mark if mark is None else mark)(sent)
            except DATABASE_ERRORS:
                self._unmarked.extend(sent)
                raise
        if failed:
            self.claimer.drop(failed)
            self.report([(claim.name, reason) for claim, reason in failed])
        if self.metrics is not None:
            self.metrics.published(sent, datetime.now(timezone.utc))
            self.metrics.failed("message", len(failed))

    def _broker_errors(self) -> tuple[type[BaseException], ...]:
        """Return the exceptions that mean "the broker is unavailable" (not "this message
        is bad")."""
        connection = self.broker.connection
        return (
            OperationalError,
            OSError,
            *getattr(connection, "connection_errors", ()),
            *getattr(connection, "channel_errors", ()),
        )


def scrubbed(exc: BaseException, app: Any, url: str) -> str:
    """Return the first line of ``exc`` with every password of ``app`` and ``url``
    removed (drivers and brokers may echo a URL or a connection string)."""
    return scrub(first_line(exc), app_passwords(app, url))


def first_line(exc: BaseException) -> str:
    """Return the first line of ``exc``'s text, at most 300 characters."""
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def _unsendable(exc: BaseException) -> str:
    return (
        f"the message could not be built ({type(exc).__name__}: {first_line(exc)}); "
        "fix the row with cronstore edit"
    )
