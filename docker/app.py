"""The example Celery app of the Docker setup (docker/compose.yaml): ``celery -A app ...``.

Configured from the environment:

* ``CRONSTORE_URL``: the store (default: the compose file's PostgreSQL service);
* ``CELERY_BROKER_URL``: the broker (default: the compose file's Redis service).

Its ``beat_schedule`` is synced into the store when a beat starts; more tasks can be
added at any time with ``celery -A app cronstore add ...``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery

import celery_cronstore

app = Celery("cronstore_example")
app.conf.update(
    broker_url=os.environ.get("CELERY_BROKER_URL", "redis://redis:6379/0"),
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    timezone="UTC",
    beat_scheduler="celery_cronstore.Scheduler",
    cronstore_url=os.environ.get(
        "CRONSTORE_URL", "postgresql+psycopg://cronstore:cronstore@postgres:5432/cronstore"
    ),
    beat_schedule={
        # An interval, a calendar event in a zone and a CronTask (start-once guard).
        "say-every-10s": {
            "task": "example.say",
            "schedule": 10.0,
            "args": ["every 10 seconds (interval)"],
        },
        "say-weekdays-0930-berlin": {
            "task": "example.say",
            "schedule": "Mon..Fri *-*-* 09:30 Europe/Berlin",
            "args": ["09:30 in Berlin on weekdays (calendar)"],
        },
        "guarded-every-15s": {
            "task": "example.guarded",
            "schedule": "*:*:0/15",
        },
    },
)

log = logging.getLogger(__name__)


@app.task(name="example.say", bind=True)
def say(self: Any, message: str) -> str:
    """Log that a periodic task fired, with its (deterministic) task id."""
    log.warning("fired: %s (task id %s)", message, self.request.id)
    return message


@app.task(name="example.guarded", base=celery_cronstore.CronTask, bind=True)
def guarded(self: celery_cronstore.CronTask) -> int:
    """Count runs in the resume state: each fire starts once, never too early."""
    count = int((self.resume_state or {}).get("count", 0)) + 1
    self.checkpoint({"count": count})
    left = self.time_left()
    log.warning("guarded run %d, %.1fs left in its time box", count, left if left else 0.0)
    return count
