"""A Celery app on embedded defaults: SQLite store, filesystem broker, no servers.

    celery -A examples.demo_app worker -B --scheduler celery_cronstore.Scheduler --pool solo

(On ``celery worker``, ``-S`` is ``--statedb``: name the scheduler with ``--scheduler``, or
run ``celery -A examples.demo_app beat -S celery_cronstore.Scheduler`` on its own.)
Everything, the broker's control folder included, lives under ``var/demo``
(``CRONSTORE_DEMO_DIR`` moves it).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from celery import Celery, signals

HERE = Path(os.environ.get("CRONSTORE_DEMO_DIR", "var/demo")).resolve()
BROKER = HERE / "broker"
CONTROL = HERE / "control"
for folder in (BROKER, CONTROL):
    folder.mkdir(parents=True, exist_ok=True)

app = Celery("demo")
app.conf.update(
    broker_url="filesystem://localhost//",
    broker_transport_options={
        "data_folder_in": str(BROKER),
        "data_folder_out": str(BROKER),
        # kombu's default is ./control in the working directory (the pidbox exchange).
        "control_folder": str(CONTROL),
    },
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    beat_scheduler="celery_cronstore.Scheduler",
    cronstore_url=f"sqlite:///{HERE / 'cronstore.sqlite'}",
    cronstore_poll_interval=1.0,
    worker_hijack_root_logger=False,
    # Let the tasks' prints reach the terminal as they are, not as WARNING log lines.
    worker_redirect_stdouts=False,
    beat_schedule={
        # Synced into the store at beat start, marked source=config.
        "config-heartbeat": {"task": "demo.say", "schedule": 7.0, "args": ["beat_schedule 7s"]},
    },
)


@signals.after_setup_logger.connect
def _quiet_task_lines(**_kwargs: object) -> None:
    """Keep beat's "sending" lines; drop the worker's received/succeeded line per task."""
    for name in ("celery.app.trace", "celery.worker.strategy"):
        logging.getLogger(name).setLevel(logging.WARNING)


@app.task(name="demo.say")
def say(message: str) -> str:
    """Print that a periodic task fired."""
    print(f"[demo] fired: {message}", flush=True)
    return message


@app.task(name="demo.poll_mailbox")
def poll_mailbox(channel_id: int) -> str:
    """Pretend to poll the mailbox of a mail channel (an owner-tied task)."""
    print(f"[demo] fired: poll mailbox of channel {channel_id} (owner-tied, every 4s)", flush=True)
    return f"polled {channel_id}"
