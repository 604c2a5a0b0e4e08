"""The Celery app the end-to-end tests run in real beat and worker processes.

Configured from the environment: E2E_BROKER, E2E_STORE, E2E_RECORD (a file every
delivery is appended to, one JSON line each, with no de-duplication at all).
"""

from __future__ import annotations

import json
import os
import time

from celery import Celery

from celery_cronstore import CronTask, fire_time

if os.environ.get("CRONSTORE_FAULTS"):  # a test's fault points (harness/faults.py)
    from harness.faults import install_from_env

    install_from_env()

app = Celery("e2e")
app.conf.update(
    broker_url=os.environ.get("E2E_BROKER", "memory://"),
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    task_default_queue=os.environ.get("E2E_QUEUE", "celery"),
    worker_prefetch_multiplier=4,
    cronstore_url=os.environ.get("E2E_STORE", "sqlite:///e2e.sqlite"),
    cronstore_poll_interval=float(os.environ.get("E2E_POLL", "0.5")),
    cronstore_lease=float(os.environ.get("E2E_LEASE", "10")),
    cronstore_auto_migrate_sqlite=True,
    # Beat's Prometheus metrics, when a test asks for them (None: off).
    cronstore_metrics_port=int(os.environ.get("E2E_METRICS_PORT", "0")) or None,
)

if os.environ.get("E2E_REDBEAT_URL"):  # a switch from RedBeat (tests/e2e/test_switch.py)
    app.conf.redbeat_redis_url = os.environ["E2E_REDBEAT_URL"]
    app.conf.redbeat_key_prefix = os.environ.get("E2E_REDBEAT_PREFIX", "redbeat:")
    app.conf.redbeat_lock_timeout = 5
    app.conf.beat_max_loop_interval = 0.5

if os.environ.get("E2E_DJANGO_SQLITE"):  # django-celery-beat's beat (tests/e2e/test_switch.py)
    import django
    from django.conf import settings

    settings.configure(
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": os.environ["E2E_DJANGO_SQLITE"],
            }
        },
        INSTALLED_APPS=["django_celery_beat"],
        USE_TZ=True,
        TIME_ZONE="UTC",
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
    )
    django.setup()
    app.conf.beat_sync_every = 1  # last_run_at reaches the table at every run
    app.conf.beat_max_loop_interval = 0.5


@app.task(name="e2e.record", bind=True)
def record(self, *args: object) -> None:  # type: ignore[no-untyped-def]
    """Append this delivery (task id, args, when, which worker, the fire time beat sent:
    ``celery_cronstore.fire_time``) to the record file."""
    scheduled = fire_time(self)
    line = json.dumps(
        {
            "task_id": self.request.id,
            "args": list(args),
            "at": time.time(),
            "worker": self.request.hostname,
            "fire_time": None if scheduled is None else scheduled.isoformat(),
        }
    )
    with open(os.environ["E2E_RECORD"], "a", encoding="utf-8") as out:
        out.write(line + "\n")


@app.task(name="e2e.guarded", bind=True, base=CronTask)
def guarded(self, *args: object) -> None:  # type: ignore[no-untyped-def]
    """A CronTask that records each run it starts, as :func:`record` does."""
    line = json.dumps(
        {
            "task_id": self.request.id,
            "args": list(args),
            "at": time.time(),
            "worker": self.request.hostname,
            "guarded": True,
        }
    )
    with open(os.environ["E2E_RECORD"], "a", encoding="utf-8") as out:
        out.write(line + "\n")


@app.task(name="e2e.slow", bind=True, base=CronTask)
def slow(self, label: str, seconds: float) -> None:  # type: ignore[no-untyped-def]
    """A CronTask that records its start, runs ``seconds``, then records its end (a run
    ended by a revoke, or by its worker, records no end)."""

    def note(phase: str) -> None:
        line = json.dumps(
            {"task_id": self.request.id, "args": [label], "at": time.time(), "phase": phase}
        )
        with open(os.environ["E2E_RECORD"], "a", encoding="utf-8") as out:
            out.write(line + "\n")

    note("start")
    time.sleep(seconds)
    note("end")
