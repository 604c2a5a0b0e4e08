"""Store-wide Prometheus figures for ``/metrics`` (the ``metrics`` extra: prometheus_client).

Computed at scrape time from the database, so every dashboard process reports the same
numbers: ledger rows by state, tasks by enabled/error, and each beat's heartbeat age.
The ledger count reads the whole ledger: on very large ledgers scrape once a minute or
less often (see ``docs/web.md``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from celery_cronstore.store import Store
from celery_cronstore.store.read import store_figures

__all__ = ["exposition"]


class _StoreCollector(Collector):
    def __init__(self, store: Store, now: datetime) -> None:
        self.store = store
        self.now = now

    def collect(self) -> Iterator[Metric]:
        with self.store.engine.connect() as conn:
            figures = store_figures(conn, self.now)
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


def exposition(store: Store, now: datetime) -> tuple[bytes, str]:
    """Return the metrics text and its content type, computed at ``now``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StoreCollector(store, now))
    return generate_latest(registry), CONTENT_TYPE_LATEST
