"""A stored periodic task as the rules see it, for table tests: one builder, defaults a
test changes by keyword (``dataclasses.replace`` semantics)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from timeline import T0

from celery_cronstore.records import PeriodicTask


def periodic_task(**changes: Any) -> PeriodicTask:
    """Return an enabled ``every 1m`` UTC task ``A`` (``app.a``) planned for T0, changed."""
    task = PeriodicTask(
        id=1,
        name="A",
        task="app.a",
        args=[],
        kwargs={},
        options={},
        timer_kind="interval",
        timer="every 1m",
        tz="UTC",
        enabled=True,
        owner_type=None,
        owner_id=None,
        description="",
        source="api",
        next_run=T0,
        last_fire=None,
        last_run=None,
        total_run_count=0,
        misfire_policy="run_once",
        misfire_limit=100,
        start_deadline=None,
        overlap_policy="allow",
        tolerance=None,
        max_retries=0,
        resume_state=None,
        error=None,
        version=1,
        created_at=T0 - timedelta(days=1),
        updated_at=T0 - timedelta(days=1),
    )
    return dataclasses.replace(task, **changes)
