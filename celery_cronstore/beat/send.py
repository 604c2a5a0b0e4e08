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

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any, Protocol

from kombu.exceptions import OperationalError

from celery_cronstore import faults
from celery_cronstore.beat.dispatch import Dispatcher
from celery_cronstore.beat.metrics import BeatMetrics
from celery_cronstore.config import Config
from celery_cronstore.records import Claim
from celery_cronstore.secrets import app_passwords, scrub
from celery_cronstore.store import Claimer
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
            producer = self.broker.producer
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
                            dispatcher.send(claim)
                            faults.hit("mid_batch")
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

    def retry_pending(self) -> bool:
        """Publish the claims that waited for the broker (those whose task is still there
        and enabled); return whether all went."""
        if not self._pending:
            return True
        # They waited for the broker: a task disabled meanwhile must not run.
        self._pending = self.claimer.recheck(self._pending)
        return self.publish(self._pending)

    def mark(self, claims: list[Claim], ago: Mapping[str, float] | None = None) -> None:
        """Mark ``claims`` published in the ledger (``ago``: seconds since each went, by
        task id, when they are marked later than that)."""
        self.claimer.mark_published(claims, ago=ago)

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
        """Mark the sent claims, drop the unsendable ones, and count both."""
        if sent:
            (self.mark if mark is None else mark)(sent)
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
