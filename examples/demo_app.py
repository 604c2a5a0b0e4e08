"""A Celery app on embedded defaults: SQLite store, filesystem broker, no servers.

celery -A examples.demo_app worker -B -S celery_cronstore.Scheduler --pool solo
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from celery import Celery

HERE = Path(os.environ.get("CRONSTORE_DEMO_DIR", "var/demo")).resolve()
BROKER = HERE / "broker"
BROKER.mkdir(parents=True, exist_ok=True)

app = Celery("demo")
app.conf.update(
    broker_url="filesystem://",
    broker_transport_options={"data_folder_in": str(BROKER), "data_folder_out": str(BROKER)},
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    beat_scheduler="celery_cronstore.Scheduler",
    cronstore_url=f"sqlite:///{HERE / 'cronstore.sqlite'}",
    cronstore_poll_interval=1.0,
    worker_hijack_root_logger=False,
    beat_schedule={
        # Synced into the store at beat start, marked source=config.
        "config-heartbeat": {"task": "demo.say", "schedule": 7.0, "args": ["from beat_schedule"]},
    },
)

log = logging.getLogger("demo")


@app.task(name="demo.say")
def say(message: str) -> str:
    """Print that a periodic task fired."""
    print(f"[demo] fired: {message}", flush=True)
    return message


@app.task(name="demo.poll_mailbox")
def poll_mailbox(channel_id: int) -> str:
    """Pretend to poll the mailbox of a mail channel (an owner-tied task)."""
    print(f"[demo] polling mailbox of channel {channel_id}", flush=True)
    return f"polled {channel_id}"
