"""Store-wide Prometheus figures for ``/metrics`` (the ``metrics`` extra: prometheus_client).

Computed at scrape time from the database, so every dashboard process reports the same
numbers: ledger rows by state, tasks by enabled/error, each beat's heartbeat age, and each
task's health (:mod:`celery_cronstore.policy.outcomes`): last success, failures in a row,
lateness, fires by state, and a lateness histogram of the last hour's fires.

Per-task series are bounded by ``cronstore_metrics_max_tasks``: failing tasks first, then
by name; the rest are folded into one series with ``task=""`` (no task has an empty name):
counts and failures summed, the *oldest* last success and the *largest* lateness (what an
alert on them needs). The fires by task and state are gauges over what the ledger keeps
(``cronstore_history_days``): pruning lowers them, so they are not counters.
The ledger count reads the whole ledger: on very large ledgers scrape once a minute or
less often (see ``docs/web.md``). While the database does not answer, the scrape still
succeeds with ``cronstore_store_up 0`` and no store figures (the exporters' convention:
a failed scrape would say only that the dashboard is down).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from celery_cronstore.errors import StoreUnavailableError
from celery_cronstore.policy.outcomes import LATE_GRACE, TaskHealth, fold, health
from celery_cronstore.store import Store
from celery_cronstore.store.outcomes import (
    Lateness,
    health_facts,
    lateness,
    outcome_counts,
    outcome_totals,
)
from celery_cronstore.store.read import Figures, store_figures

__all__ = ["LATENESS_BOUNDS", "LATENESS_WINDOW", "REST", "TaskFigures", "exposition"]

#: The ``task`` label value of the tasks past the cap.
REST = ""
#: The fires the lateness histogram covers: those of the last hour.
LATENESS_WINDOW = timedelta(hours=1)
#: Its bucket bounds (seconds), as beat's own lateness histogram has them, and longer.
LATENESS_BOUNDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


@dataclass
class TaskFigures:
    """Per-task series (the kept tasks) and the rest, folded."""

    named: list[tuple[str, TaskHealth, dict[str, int]]] = field(default_factory=list)
    folded: int = 0
    rest_failures: int = 0
    rest_oldest_success: datetime | None = None
    rest_late: float | None = None
    rest_counts: dict[str, int] = field(default_factory=dict)
    lateness: Lateness | None = None


def task_figures(
    conn: sa.Connection, now: datetime, max_tasks: int, grace: float = LATE_GRACE
) -> TaskFigures:
    """Read every task's health (one statement), fold past ``max_tasks``, count fires
    by state for the kept ones and the whole ledger, and the last hour's lateness."""
    facts = health_facts(conn)
    healths = {i: health(f.facts, now, grace=grace) for i, f in facts.items()}
    kept, rest = fold(healths, {i: f.name for i, f in facts.items()}, max_tasks)
    counts = outcome_counts(conn, kept)
    rest_counts = outcome_totals(conn)
    for by_state in counts.values():
        for state, n in by_state.items():
            rest_counts[state] = rest_counts.get(state, 0) - n
    successes = [healths[i].last_success for i in rest if healths[i].last_success is not None]
    lates = [healths[i].late_by for i in rest if healths[i].late_by is not None]
    return TaskFigures(
        named=[(facts[i].name, healths[i], counts.get(i, {})) for i in kept],
        folded=len(rest),
        rest_failures=sum(healths[i].consecutive_failures for i in rest),
        rest_oldest_success=min(successes) if successes else None,  # type: ignore[type-var]
        rest_late=max(lates) if lates else None,  # type: ignore[type-var]
        rest_counts={s: n for s, n in rest_counts.items() if n > 0} if rest else {},
        lateness=lateness(conn, now - LATENESS_WINDOW, now, LATENESS_BOUNDS),
    )


def _task_metrics(tasks: TaskFigures) -> Iterator[Metric]:
    success = GaugeMetricFamily(
        "cronstore_task_last_success_timestamp_seconds",
        "When the task's newest succeeded fire finished (Unix time; absent: never).",
        labels=["task"],
    )
    failures = GaugeMetricFamily(
        "cronstore_task_consecutive_failures",
        "Fires in a row that ended badly since the task's newest success.",
        labels=["task"],
    )
    late = GaugeMetricFamily(
        "cronstore_task_late_seconds",
        "How late the task is: its next run unclaimed past the grace, else its newest"
        " fire's publish minus its fire time.",
        labels=["task"],
    )
    fires = GaugeMetricFamily(
        "cronstore_task_fires",
        "Fires the ledger keeps, by task and state (a gauge: pruning lowers it).",
        labels=["task", "state"],
    )
    for name, h, counts in tasks.named:
        if h.last_success is not None:
            success.add_metric([name], h.last_success.timestamp())
        failures.add_metric([name], h.consecutive_failures)
        late.add_metric([name], h.late_by or 0.0)
        for state, n in sorted(counts.items()):
            fires.add_metric([name, state], n)
    if tasks.folded:
        if tasks.rest_oldest_success is not None:
            success.add_metric([REST], tasks.rest_oldest_success.timestamp())
        failures.add_metric([REST], tasks.rest_failures)
        late.add_metric([REST], tasks.rest_late or 0.0)
        for state, n in sorted(tasks.rest_counts.items()):
            fires.add_metric([REST, state], n)
    yield from (success, failures, late, fires)
    yield GaugeMetricFamily(
        "cronstore_task_series_folded",
        'Tasks past cronstore_metrics_max_tasks, folded into the task="" series.',
        value=tasks.folded,
    )
    if tasks.lateness is not None:
        seen = tasks.lateness
        buckets = [(f"{b:g}", float(n)) for b, n in seen.buckets]
        buckets.append(("+Inf", float(seen.count)))
        yield GaugeHistogramMetricFamily(
            "cronstore_fire_lateness_seconds",
            "Fires of the last hour by lateness: publish (else start) minus fire time.",
            buckets=buckets,
            gsum_value=seen.total,
        )


class _StoreCollector(Collector):
    def __init__(self, figures: Figures | None, tasks: TaskFigures | None = None) -> None:
        self.figures = figures
        self.tasks = tasks

    def collect(self) -> Iterator[Metric]:
        figures = self.figures
        yield GaugeMetricFamily(
            "cronstore_store_up",
            "1 if the store's database answered this scrape, 0 if not.",
            value=0 if figures is None else 1,
        )
        if figures is None:
            return
        fires = GaugeMetricFamily(
            "cronstore_ledger_fires", "Ledger rows by state (fires of all time).", labels=["state"]
        )
        for state, count in sorted(figures.fires_by_state.items()):
            fires.add_metric([state], count)
        yield fires
        yield GaugeMetricFamily(
            "cronstore_ledger_rows", "Rows in the fire ledger.", value=figures.ledger_rows
        )
        tasks = GaugeMetricFamily(
            "cronstore_periodic_tasks", "Periodic tasks by enabled flag.", labels=["enabled"]
        )
        tasks.add_metric(["true"], figures.enabled)
        tasks.add_metric(["false"], figures.disabled)
        yield tasks
        yield GaugeMetricFamily(
            "cronstore_tasks_in_error", "Periodic tasks in error.", value=figures.in_error
        )
        age = GaugeMetricFamily(
            "cronstore_beat_heartbeat_age_seconds",
            "Seconds since each beat's last heartbeat.",
            labels=["node"],
        )
        for b in figures.beats:
            age.add_metric([b.node], b.age)
        yield age
        if self.tasks is not None:
            yield from _task_metrics(self.tasks)


def exposition(
    store: Store, now: datetime, *, max_tasks: int = 500, grace: float = LATE_GRACE
) -> tuple[bytes, str, StoreUnavailableError | None]:
    """Return the metrics text and its content type, computed at ``now``, and the error
    that kept the store's figures out (``None`` when the database answered).
    ``max_tasks`` caps the per-task series (``cronstore_metrics_max_tasks``); ``grace``
    is how far past its next run a task may be before it counts as late."""
    figures: Figures | None = None
    tasks: TaskFigures | None = None
    error: StoreUnavailableError | None = None
    try:
        with store.engine.connect() as conn:
            figures = store_figures(conn, now)
            tasks = task_figures(conn, now, max_tasks, grace)
    except StoreUnavailableError as exc:
        error = exc
        figures = tasks = None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StoreCollector(figures, tasks))
    return generate_latest(registry), CONTENT_TYPE_LATEST, error
