"""The Celery app every harness process runs (``celery -A harness.app beat|worker``).

Configured from the environment (the harness sets it):

* ``HARNESS_BROKER``, ``HARNESS_QUEUE``: the broker (through a cuttable proxy) and queue;
* ``HARNESS_STORE``: the cronstore URL (beat replicas get it through a proxy);
* ``HARNESS_RECORD_URL``: where the worker records events, a direct connection;
* ``HARNESS_LEASE``, ``HARNESS_POLL``: beat's lease and poll interval;
* ``HARNESS_CLOCK_OFFSET``: seconds this process's wall clock is off when libfaketime is
  not preloaded (then only ``time.time`` is shifted; see ``cluster.skewed``).

The worker writes one row to ``harness_event`` for every delivery (``task_prerun``: also
runs the CronTask guard refuses), every start of a task body, and every message the
worker discarded as expired. The table has no unique constraint: duplicates stay visible.
"""

from __future__ import annotations

import os
import random
import time
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from celery import Celery, signals

from celery_cronstore import CronTask
from celery_cronstore.store.engine import now_expression
from celery_cronstore.store.types import UTCDateTime
from harness import faults

_offset = float(os.environ.get("HARNESS_CLOCK_OFFSET", "0") or 0)
if _offset and "faketime" not in os.environ.get("LD_PRELOAD", ""):
    _real_time, _real_time_ns = time.time, time.time_ns
    time.time = lambda: _real_time() + _offset
    time.time_ns = lambda: _real_time_ns() + int(_offset * 1e9)

faults.install_from_env()

_STORE = os.environ.get("HARNESS_STORE", "sqlite:///harness.sqlite")


def _connect_args(url: str) -> dict[str, Any]:
    """Fail fast on a cut network link; SQLite (a file) waits for the write lock instead."""
    return {"timeout": 30} if url.startswith("sqlite") else {"connect_timeout": 3}


#: Beat claims a fire this many seconds before its time and publishes it at the time.
CLAIM_AHEAD = 0.1

app = Celery("harness")
app.conf.update(
    broker_url=os.environ.get("HARNESS_BROKER", "memory://"),
    broker_connection_retry_on_startup=True,
    broker_connection_max_retries=None,
    # RabbitMQ: without publisher confirms a publish during a link cut can vanish while
    # beat believes it was sent (the harness's rabbitmq scenario found this).
    broker_transport_options={"visibility_timeout": 3600, "confirm_publish": True},
    task_ignore_result=True,
    task_default_queue=os.environ.get("HARNESS_QUEUE", "harness"),
    worker_prefetch_multiplier=4,
    worker_hijack_root_logger=True,
    cronstore_url=_STORE,
    cronstore_poll_interval=float(os.environ.get("HARNESS_POLL", "0.5")),
    cronstore_lease=float(os.environ.get("HARNESS_LEASE", "4")),
    # A published fire not started in 6 s is published again (the guard starts one).
    cronstore_start_timeout=float(os.environ.get("HARNESS_START_TIMEOUT", "6")),
    cronstore_engine_options={"connect_args": _connect_args(_STORE)},
    # 1-second timers: the early-drop rule must not drop an on-time run that follows a
    # late one by less than a second.
    cronstore_tolerance=1.0,
    cronstore_claim_ahead=CLAIM_AHEAD,
)
if os.environ.get("HARNESS_METRICS_PORT"):  # the soak's sampler reads each beat's figures
    app.conf.cronstore_metrics_port = int(os.environ["HARNESS_METRICS_PORT"])

metadata = sa.MetaData()
events = sa.Table(
    "harness_event",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),  # delivery | start | expired
    sa.Column("task_id", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=True),
    sa.Column("fire_time", UTCDateTime, nullable=True),
    sa.Column("worker", sa.String(200), nullable=True),
    sa.Column("at", UTCDateTime, nullable=False),
)

_engine: sa.Engine | None = None


def _recorder() -> sa.Engine:
    global _engine
    if _engine is None:
        _engine = sa.create_engine(
            os.environ["HARNESS_RECORD_URL"],
            pool_pre_ping=True,
            connect_args=_connect_args(os.environ["HARNESS_RECORD_URL"]),
        )
    return _engine


def _db_now(engine: sa.Engine) -> Any:
    clock = now_expression(engine.dialect.name)
    if clock is None:  # SQLite: the host is the database's clock
        return datetime.now(timezone.utc)
    if engine.dialect.name == "postgresql":
        return sa.func.timezone("UTC", clock)  # naive UTC, whatever the session zone
    return clock


def record(kind: str, task_id: str, headers: dict[str, Any], worker: str | None) -> None:
    """Append one event; retried, because the database's connections get killed."""
    fire = headers.get("cronstore_fire_time")
    row = {
        "kind": kind,
        "task_id": task_id,
        "name": headers.get("cronstore_name"),
        "fire_time": datetime.fromisoformat(fire) if fire else None,
        "worker": worker,
    }
    engine = _recorder()
    for attempt in range(20):
        try:
            with engine.begin() as conn:
                conn.execute(sa.insert(events).values(at=_db_now(engine), **row))
            return
        except sa.exc.DBAPIError:
            if attempt == 19:
                raise
            time.sleep(0.25)


def _headers(request: Any) -> dict[str, Any]:
    out = dict(getattr(request, "headers", None) or {})
    for key in ("cronstore_name", "cronstore_fire_time"):
        if key not in out and getattr(request, key, None):
            out[key] = getattr(request, key)
    return out


@signals.task_prerun.connect
def _on_delivery(task_id: str, task: Any, **_: Any) -> None:
    if task.name.startswith("harness."):
        record("delivery", task_id, _headers(task.request), task.request.hostname)


@signals.task_revoked.connect
def _on_revoked(request: Any, expired: bool = False, **_: Any) -> None:
    if expired:
        record("expired", request.id, _headers(request), getattr(request, "hostname", None))


@app.task(base=CronTask, bind=True, name="harness.record")
def record_start(self: Any, *args: Any) -> None:
    """Record that this run's body started, then work briefly."""
    record("start", self.request.id, _headers(self.request), self.request.hostname)
    time.sleep(random.uniform(0.0, 0.05))
