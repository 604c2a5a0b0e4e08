"""Beat's own Prometheus metrics (``cronstore_metrics_port``; the ``metrics`` extra).

What one beat process did since it started: fires it recorded by outcome, tick duration
and claim batch size, firing lateness (fire time to publish), claim conflicts, publish
failures by kind, and whether it is stalled. The store-wide figures (ledger rows, tasks in
error, every beat's heartbeat age) are served by the web app's ``/metrics``.

Labels are bounded: outcomes and failure kinds are fixed sets; per-task series exist only
with ``cronstore_metrics_per_task``, one per task name and outcome for the first
``cronstore_metrics_max_tasks`` task names this beat sees; later names are counted under
``task=""`` (no task has an empty name). First come keeps its series, because a counter's
series must not move: a name never changes sides while the beat runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from celery_cronstore.records import Claim
from celery_cronstore.states import BEAT_OUTCOMES, FireState
from celery_cronstore.store import TickResult

__all__ = ["OUTCOMES", "REST", "BeatMetrics", "start_metrics"]

logger = logging.getLogger("celery.beat")

#: The outcomes a beat records for the fires it handles (a fixed label set; the set is
#: named in :mod:`celery_cronstore.states`, this name stays for importers).
OUTCOMES = BEAT_OUTCOMES
#: The ``task`` label value of the tasks past ``cronstore_metrics_max_tasks``.
REST = ""
#: Kinds of publish failure (a fixed label set).
FAILURES = ("broker", "message")
_TICK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
_BATCH_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500)
_LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class BeatMetrics:
    """The metric objects of one beat, registered in ``registry`` (default: the global one)."""

    def __init__(
        self, *, per_task: bool = False, registry: Any = None, max_tasks: int = 500
    ) -> None:
        from prometheus_client import REGISTRY, Counter, Gauge, Histogram

        registry = REGISTRY if registry is None else registry
        self.per_task = per_task
        self.max_tasks = max_tasks
        #: The task names with series of their own (at most ``max_tasks``).
        self.named: set[str] = set()
        self._lock = threading.Lock()
        labels = ["outcome", "task"] if per_task else ["outcome"]
        self.fires = Counter(
            "cronstore_beat_fires", "Fires this beat recorded, by outcome.", labels,
            registry=registry,
        )  # fmt: skip
        self.tick_seconds = Histogram(
            "cronstore_beat_tick_seconds", "Duration of beat's ticks.",
            buckets=_TICK_BUCKETS, registry=registry,
        )  # fmt: skip
        self.batch_size = Histogram(
            "cronstore_beat_claim_batch_size", "Due rows seen by one claim transaction.",
            buckets=_BATCH_BUCKETS, registry=registry,
        )  # fmt: skip
        self.lateness = Histogram(
            "cronstore_beat_lateness_seconds", "From a fire's time to its publish.",
            buckets=_LATENESS_BUCKETS, registry=registry,
        )  # fmt: skip
        self.conflicts = Counter(
            "cronstore_beat_claim_conflicts", "Claim transactions that lost a race.",
            registry=registry,
        )  # fmt: skip
        self.failures = Counter(
            "cronstore_beat_publish_failures", "Publish failures by kind.", ["kind"],
            registry=registry,
        )  # fmt: skip
        self.stalled = Gauge(
            "cronstore_beat_stalled_seconds",
            "How long this beat has had due fires it could not claim or publish (0: none).",
            registry=registry,
        )
        for outcome in OUTCOMES:
            if not per_task:
                self.fires.labels(outcome)
        for kind in FAILURES:
            self.failures.labels(kind)

    def _fire(self, outcome: str, task: str, amount: float = 1) -> None:
        if not self.per_task:
            self.fires.labels(outcome).inc(amount)
            return
        with self._lock:
            if task not in self.named and len(self.named) < self.max_tasks:
                self.named.add(task)
            label = task if task in self.named else REST
        self.fires.labels(outcome, label).inc(amount)

    def claimed(self, result: TickResult) -> None:
        """Take in one claim transaction: its batch size, conflict and ledger entries."""
        if result.conflict:
            self.conflicts.inc()
            return
        self.batch_size.observe(result.rows)
        for state, task, count in result.recorded:
            if state in OUTCOMES:
                self._fire(state, task, count)

    def published(self, claims: Iterable[Claim], at: datetime) -> None:
        """Count fires published at ``at`` and observe their lateness."""
        for claim in claims:
            self._fire(FireState.PUBLISHED, claim.name)
            self.lateness.observe(max(0.0, (at - claim.send_at).total_seconds()))

    def watch(self, seconds: Callable[[], float]) -> None:
        """Compute the stall gauge at each scrape from ``seconds`` (beat's
        :class:`~celery_cronstore.beat.stall.Stall`): it grows while the loop is blocked."""
        self.stalled.set_function(seconds)

    def failed(self, kind: str, amount: int = 1) -> None:
        """Count publish failures of ``kind`` (``broker`` or ``message``)."""
        if amount:
            self.failures.labels(kind).inc(amount)


def start_metrics(
    port: int, *, per_task: bool, address: str = "127.0.0.1", max_tasks: int = 500
) -> BeatMetrics:
    """Serve beat's metrics on ``address:port`` (``/metrics``) and return them.

    ``port`` 0 means off (the setting's default) and is refused here, where it would
    bind a random port. A port that cannot be bound stops beat with one line naming the
    setting, not a traceback.
    """
    if port < 1:
        raise ValueError(f"cronstore_metrics_port {port} means off: do not start the metrics")
    try:
        from prometheus_client import start_http_server
    except ImportError:
        raise ImportError(
            "cronstore_metrics_port needs prometheus_client: "
            "pip install 'celery-cronstore[metrics]'"
        ) from None
    metrics = BeatMetrics(per_task=per_task, max_tasks=max_tasks)
    try:
        start_http_server(port, addr=address)
    except OSError as exc:
        logger.critical("beat: cannot serve metrics on %s:%d: %s", address, port, exc)
        raise SystemExit(
            f"celery-cronstore: cannot serve metrics on {address}:{port} ({exc}): set "
            "cronstore_metrics_port to a free port, or 0 to turn beat's metrics off"
        ) from None
    logger.info("beat: metrics on http://%s:%d/metrics", address, port)
    return metrics
