"""Beat's metrics: ``cronstore_metrics_port = 0`` (the documented default) is off, not a
crash; a port that cannot be bound stops beat with one line; the per-task fire counter
keeps at most ``cronstore_metrics_max_tasks`` task names (the rest under ``task=""``)."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from prometheus_client import CollectorRegistry
from timeline import T0

from celery_cronstore.beat.metrics import REST, BeatMetrics, start_metrics
from celery_cronstore.beat.scheduler import Scheduler
from celery_cronstore.config import Config
from celery_cronstore.records import Claim


def _noop(*args: Any, **kwargs: Any) -> None:
    """Never run: beat only sends."""


@pytest.fixture
def app(sqlite_url: str) -> Celery:
    app = Celery("t", broker="memory://", set_as_current=False)
    app.conf.update(cronstore_url=sqlite_url, task_default_queue="q")
    app.task(name="x.do", shared=False)(_noop)
    return app


def test_port_zero_is_off_and_beat_starts(app: Celery) -> None:
    """Regression: ``cronstore_metrics_port = 0`` raised "must be a positive integer"."""
    app.conf.cronstore_metrics_port = 0
    assert Config.from_app(app).metrics_port == 0
    scheduler = Scheduler(app, lazy=True)
    try:
        scheduler.tick()
        assert scheduler.loop is not None  # the store opened, the loop runs
        assert scheduler.metrics is None  # and no metrics server was started
    finally:
        scheduler.close()


@pytest.mark.parametrize("value", [-1, 65536, "9808", True])
def test_bad_ports_are_refused_naming_the_setting(app: Celery, value: object) -> None:
    app.conf.cronstore_metrics_port = value
    with pytest.raises(ValueError, match=r"cronstore_metrics_port must be a whole number from 0"):
        Config.from_app(app)


def test_port_zero_never_reaches_the_server() -> None:
    with pytest.raises(ValueError, match="means off"):
        start_metrics(0, per_task=False)


def test_a_port_in_use_stops_beat_with_one_line(tmp_path: Path) -> None:
    """In a fresh process (the server registers in the global registry)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        script = textwrap.dedent(
            f"""
            from celery_cronstore.beat.metrics import start_metrics
            start_metrics({port}, per_task=False)
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in done.stderr
    assert "cronstore_metrics_port" in done.stderr


def claim(name: str) -> Claim:
    return Claim(1, name, "x.do", [], {}, {}, T0, f"{name}-1", 1)


def test_per_task_counter_is_capped_and_the_rest_summed() -> None:
    registry = CollectorRegistry()
    metrics = BeatMetrics(per_task=True, registry=registry, max_tasks=2)
    at = T0
    for name in ("a", "b", "c", "a", "d", "c"):
        metrics.published([claim(name)], at)

    def value(task: str) -> float | None:
        return registry.get_sample_value(
            "cronstore_beat_fires_total", {"outcome": "published", "task": task}
        )

    assert (value("a"), value("b"), value(REST)) == (2.0, 1.0, 3.0)
    assert value("c") is None
    assert value("d") is None
    assert metrics.named == {"a", "b"}
