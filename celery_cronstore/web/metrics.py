"""Store-wide Prometheus figures for ``/metrics`` (the ``metrics`` extra: prometheus_client).

Computed at scrape time from the database, so every dashboard process reports the same
numbers: ledger rows by state, tasks by enabled/error, and each beat's heartbeat age.
The ledger count reads the whole ledger: on very large ledgers scrape once a minute or
less often (see ``docs/web.md``). While the database does not answer, the scrape still
succeeds with ``cronstore_store_up 0`` and no store figures (the exporters' convention:
a failed scrape would say only that the dashboard is down).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from celery_cronstore.errors import StoreUnavailableError
from celery_cronstore.store import Store
from celery_cronstore.store.read import Figures, store_figures

__all__ = ["exposition"]


class _StoreCollector(Collector):
    def __init__(self, figures: Figures | None) -> None:
        self.figures = figures

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


def exposition(store: Store, now: datetime) -> tuple[bytes, str, StoreUnavailableError | None]:
    """Return the metrics text and its content type, computed at ``now``, and the error
    that kept the store's figures out (``None`` when the database answered)."""
    figures: Figures | None = None
    error: StoreUnavailableError | None = None
    try:
        with store.engine.connect() as conn:
            figures = store_figures(conn, now)
    except StoreUnavailableError as exc:
        error = exc
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StoreCollector(figures))
    return generate_latest(registry), CONTENT_TYPE_LATEST, error
