"""Wake on change (PostgreSQL): an edit that makes a task due sooner fires on time even
when beat's poll interval is long; the LISTEN connection survives the database going
away; beat's own claims wake nobody."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest
import sqlalchemy as sa
from celery import Celery
from conftest import through_transaction_pooler

from celery_cronstore.beat.scheduler import Scheduler
from celery_cronstore.store import Claimer, Store
from harness.tcp_proxy import Proxy

# serial: "fired within 1.5 s of an edit due in 1 s" is a latency bound.
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.serial,
    pytest.mark.skipif(
        through_transaction_pooler(),
        reason="LISTEN cannot work through a transaction pooler "
        "(CRONSTORE_TEST_PGBOUNCER=transaction): beat polls there",
    ),
]

PARKED = "2099-01-01T00:00:00Z"


class Beat:
    """A real Scheduler ticking in a thread the way Celery's Service loop does."""

    def __init__(self, url: str, **conf: object) -> None:
        app = Celery("wake", broker="memory://", set_as_current=False)
        app.conf.update(
            cronstore_url=url,
            cronstore_poll_interval=30.0,
            cronstore_require_registered=False,
            task_default_queue="wake",
            **conf,
        )
        self.scheduler = Scheduler(app, lazy=True)
        self.ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            left = self.scheduler.tick()
            self.ticks += 1
            self._stop.wait(left)

    def stop(self) -> None:
        self._stop.set()
        self.scheduler.close()  # its listen socket closes: the wait ends
        self._thread.join(35)


def at(store: Store, seconds: float) -> str:
    return (store.now() + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def published_after(store: Store, name: str, timeout: float) -> float | None:
    """Seconds until ``name`` has a published fire (``None``: not within ``timeout``)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if any(f.state == "published" for f in store.history(name)):
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def test_an_edit_due_in_one_second_fires_on_time_with_a_30s_poll(direct: Store) -> None:
    direct.add("soon", task="x.run", timer=PARKED)
    beat = Beat(direct.engine.url.render_as_string(hide_password=False))
    try:
        time.sleep(0.5)  # started, listening, asleep for the 30 s poll
        direct.update("soon", timer=at(direct, 1.0))
        took = published_after(direct, "soon", 5.0)
        assert took is not None, "the edit was not seen before the 30 s poll"
        assert took < 1.5, f"fired {took:.2f}s after an edit due in 1s"
    finally:
        beat.stop()


def test_listening_resumes_after_the_database_goes_away(direct: Store, postgres_url: str) -> None:
    url = sa.make_url(postgres_url)
    proxy = Proxy((url.host or "127.0.0.1", url.port or 5432))
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
    direct.add("later", task="x.run", timer=PARKED)
    beat = Beat(proxied, cronstore_engine_options={"connect_args": {"connect_timeout": 2}})
    try:
        time.sleep(0.5)
        proxy.down()  # cuts the LISTEN connection and the held one
        time.sleep(1.5)
        proxy.up()
        time.sleep(3.0)  # the next tick after its back-off reconnects and listens again
        direct.update("later", timer=at(direct, 1.0))
        took = published_after(direct, "later", 5.0)
        assert took is not None, "not woken after the outage"
        assert took < 1.5, f"fired {took:.2f}s after an edit due in 1s"
    finally:
        beat.stop()
        proxy.close()


def test_only_changes_that_make_beat_look_sooner_notify(direct: Store) -> None:
    url = direct.engine.url.set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(url, autocommit=True) as listener:
        listener.execute("LISTEN cronstore_changed")

        def notified() -> int:
            return len(list(listener.notifies(timeout=0.3)))

        direct.add("due", task="x.run", timer=at(direct, -5))  # INSERT: notifies
        direct.add("parked", task="x.run", timer=PARKED)
        assert notified() == 2, "inserts notify"
        (claim,) = Claimer(direct, "b1").claim_due().claims  # next_run moves later
        assert claim.name == "due"
        with direct.begin() as conn:  # a worker's start writes last_run
            conn.exec_driver_sql("UPDATE cronstore_periodic_task SET last_run = now()")
        direct.update("parked", enabled=False)
        assert notified() == 0, "claims, worker writes and disables must not wake beats"
        direct.update("parked", enabled=True)
        direct.update("parked", timer=at(direct, 60))
        with direct.begin() as conn:  # raw SQL edit of the timer: the re-plan trigger
            conn.exec_driver_sql(
                "UPDATE cronstore_periodic_task SET timer = '*:*:0/5' WHERE name = 'due'"
            )
        assert notified() == 3, "enabling, sooner timers and raw-SQL edits wake beats"
