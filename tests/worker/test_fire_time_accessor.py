"""``celery_cronstore.fire_time`` (issue 25): the nominal fire time, handed to a plain
task from the header beat sends, in Celery's own request (``Task.apply``). The worker
process with a real beat is ``tests/e2e/test_fire_switch.py``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from celery import Celery

import celery_cronstore
from celery_cronstore.worker.headers import interval_of, row_name


@pytest.fixture
def app() -> Celery:
    return Celery("fire-time", broker="memory://", set_as_current=False)


def test_a_plain_task_reads_its_fire_time_from_beats_headers(app: Celery) -> None:
    @app.task(bind=True, shared=False)
    def report(self: Any) -> tuple[Any, ...]:
        return (
            celery_cronstore.fire_time(self),
            celery_cronstore.fire_time(self.request),
            interval_of(self),
            row_name(self),
        )

    headers = {
        "cronstore_fire_time": "2026-12-06T10:00:00+00:00",
        "cronstore_interval": 3600.0,
        "cronstore_name": "hourly-report",
    }
    got = report.apply(headers=headers).get()
    at = datetime(2026, 12, 6, 10, tzinfo=timezone.utc)
    assert got == (at, at, 3600.0, "hourly-report")


@pytest.mark.parametrize(
    "headers",
    [None, {}, {"cronstore_fire_time": ""}, {"cronstore_fire_time": "yesterday"}],
    ids=["called-directly", "no-header", "empty", "not-a-time"],
)
def test_a_task_not_sent_by_beat_has_no_fire_time(
    app: Celery, headers: dict[str, Any] | None
) -> None:
    @app.task(bind=True, shared=False)
    def job(self: Any) -> Any:
        return celery_cronstore.fire_time(self)

    assert job.apply(headers=headers).get() is None
