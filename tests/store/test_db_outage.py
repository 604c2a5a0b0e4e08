"""A database outage: beat stays alive, publishes nothing, and catches up by policy."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery

from celery_cronstore.beat.scheduler import Scheduler
from celery_cronstore.store import Store
from harness.tcp_proxy import Proxy

# serial: counts fires and back-off sleeps of a real-time ticking beat.
pytestmark = [pytest.mark.postgres, pytest.mark.serial]


@pytest.fixture
def proxied_url(postgres_url: str) -> Iterator[tuple[str, Proxy]]:
    url = sa.engine.make_url(postgres_url)
    proxy = Proxy((url.host or "127.0.0.1", url.port or 5432))
    yield url.set(host="127.0.0.1", port=proxy.port).render_as_string(False), proxy
    proxy.close()


def drain(app: Celery) -> list[dict[str, Any]]:
    out = []
    with app.connection_for_read() as conn:
        q = conn.SimpleQueue("outage")
        while True:
            try:
                message = q.get(timeout=0.05)
            except queue.Empty:
                break
            out.append(message.headers)
            message.ack()
        q.close()
    return out


def test_outage_fails_closed_and_recovers_with_the_misfire_policy(
    proxied_url: tuple[str, Proxy], postgres_url: str
) -> None:
    url, proxy = proxied_url
    direct = Store(postgres_url)
    direct.upgrade()
    with direct.begin() as conn:
        conn.exec_driver_sql("DELETE FROM cronstore_fire")
        conn.exec_driver_sql("DELETE FROM cronstore_periodic_task")
    direct.add("every-1s", task="x.tick", timer="*:*:*")
    app = Celery("outage", broker="memory://", set_as_current=False)
    app.conf.update(
        cronstore_url=url,
        task_default_queue="outage",
        cronstore_engine_options={"connect_args": {"connect_timeout": 2}},
        cronstore_require_registered=False,  # x.tick is sent by name
    )
    scheduler = Scheduler(app, lazy=True)

    def run_for(seconds: float) -> list[float]:
        sleeps, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            sleeps.append(scheduler.tick())
            time.sleep(min(sleeps[-1], 0.2))
        return sleeps

    run_for(2.5)
    assert len(drain(app)) >= 2, "fires before the outage"

    proxy.down()
    sleeps = run_for(4)
    assert drain(app) == [], "published while the database was down"
    assert any(s >= 1 for s in sleeps), "no back-off during the outage"

    proxy.up()
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not got:
        time.sleep(min(scheduler.tick(), 0.2))
        got += drain(app)
    assert got, "nothing published after recovery"
    history = direct.history("every-1s", 200)
    missed = [f for f in history if f.state == "missed"]
    assert sum(f.fire_count for f in missed) >= 3, "the outage's fires were not recorded"
    assert all("misfire policy run_once" in (f.reason or "") for f in missed)
    scheduler.close()
    direct.close()
