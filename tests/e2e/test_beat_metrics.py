"""Beat's Prometheus metrics, scraped from a real beat and checked against the ledger."""

from __future__ import annotations

import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from processes import beat, celery_env, running, wait_for

from celery_cronstore.store import Store
from harness.ports import free_port

# serial: beat must be up and publishing within the 2 s before the first one-off.
pytestmark = [pytest.mark.slow, pytest.mark.serial]
prometheus = pytest.importorskip("prometheus_client.parser")


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in prometheus.text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_beat_counts_what_the_ledger_records(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = Store(url)
    store.upgrade()
    soon = datetime.now(timezone.utc) + timedelta(seconds=2)
    for i in range(5):  # five one-off fires, a second apart
        store.add(f"once-{i}", task="e2e.record", timer=(soon + timedelta(seconds=i)).isoformat())
    # A one-off instant long past under misfire policy skip: recorded missed, not sent.
    past = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()
    store.add("stale", task="e2e.record", timer=past, misfire_policy="skip")
    port = free_port()
    env = celery_env("memory://", url, tmp_path / "record.jsonl", E2E_METRICS_PORT=str(port))
    with running([beat()], env, tmp_path):

        def all_sent() -> bool:
            states = [f.state for name in store.list() for f in store.history(name.name)]
            return states.count("published") == 5 and "missed" in states

        wait_for(all_sent, 20, "five fires published and one recorded missed", tmp_path)
        metrics = _scrape(port)
    ledger = [f for t in store.list() for f in store.history(t.name)]
    published = sum(1 for f in ledger if f.state == "published")
    missed = sum(f.fire_count for f in ledger if f.state == "missed")
    fires = "cronstore_beat_fires_total"
    assert metrics[(fires, (("outcome", "published"),))] == published == 5
    assert metrics[(fires, (("outcome", "claimed"),))] == published
    assert metrics[(fires, (("outcome", "missed"),))] == missed == 1
    assert metrics[(fires, (("outcome", "dropped"),))] == 0
    assert metrics[("cronstore_beat_publish_failures_total", (("kind", "broker"),))] == 0
    lateness = metrics[("cronstore_beat_lateness_seconds_count", ())]
    assert lateness == published
    assert metrics[("cronstore_beat_tick_seconds_count", ())] > 0
    assert metrics[("cronstore_beat_claim_batch_size_count", ())] >= 1
    assert metrics[("cronstore_beat_stalled_seconds", ())] == 0
    store.close()
