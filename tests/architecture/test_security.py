"""Security properties of beat: JSON messages only, the allowlist, no password in logs.

SQLite store, in-memory broker, frozen clock; the database-down cases point at a closed
port on loopback (nothing listens on port 1), so no server is needed.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery
from queues import drain
from timeline import T0

from celery_cronstore.beat.publish import publish
from celery_cronstore.beat.scheduler import Scheduler
from celery_cronstore.store import Claim, Store
from celery_cronstore.testing import FrozenClock

PASSWORD = "s3cret-Pw-77"


def _noop(*args: Any, **kwargs: Any) -> None:
    """Body of the test tasks (beat only sends them)."""


@pytest.fixture
def app(sqlite_url: str) -> Celery:
    app = Celery("sec", broker="memory://", set_as_current=False)
    app.conf.update(
        cronstore_url=sqlite_url,
        task_default_queue="q",
        # A pickle-configured app: beat's messages must stay JSON all the same.
        task_serializer="pickle",
        accept_content=["pickle", "json"],
    )
    app.task(name="x.plain", shared=False)(_noop)
    app.task(name="x.pickled", shared=False, serializer="pickle")(_noop)
    return app


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    """The shared SQLite store (tests/conftest.py): beat here runs on the memory broker."""
    return sqlite_store


def messages(app: Celery) -> list[Any]:
    return drain(app)


def beat(app: Celery, store: Store) -> Scheduler:
    scheduler = Scheduler(app, lazy=True)
    scheduler.store = store
    return scheduler


def test_beat_sends_json_whatever_the_app_and_task_serializer(
    app: Celery, store: Store, clock: FrozenClock
) -> None:
    app.conf.cronstore_require_registered = False
    store.add("plain", task="x.plain", timer="*:*:0/10", args=[1])
    store.add("pickled", task="x.pickled", timer="*:*:0/10", kwargs={"a": [1, "b"]})
    store.add("by-name", task="elsewhere.run", timer="*:*:0/10")
    store.add("asked-json", task="x.plain", timer="*:*:0/10", options={"serializer": "json"})
    clock.set(T0 + timedelta(seconds=10))
    beat(app, store).tick()
    got = messages(app)
    assert sorted(m.headers["cronstore_name"] for m in got) == [
        "asked-json",
        "by-name",
        "pickled",
        "plain",
    ]
    assert {m.content_type for m in got} == {"application/json"}
    assert all(m.body.startswith(b"[") for m in got)  # JSON text, not a pickle stream


def test_run_now_publishes_json_too(app: Celery, store: Store) -> None:
    store.add("a", task="x.pickled", timer="hourly", args=["x"])
    from celery_cronstore.store import Claimer

    publish(app, Claimer(store, "cli").claim_now("a"))
    (message,) = messages(app)
    assert message.content_type == "application/json"
    assert message.payload[0] == ["x"]


def test_publish_never_lets_option_headers_replace_celerys_own(app: Celery) -> None:
    claim = Claim(
        periodic_task_id=1,
        name="a",
        task="x.plain",
        args=[],
        kwargs={},
        options={
            "headers": {"task": "os.system", "id": "forged", "cronstore_name": "b", "x-k": 1},
            "serializer": "pickle",
        },
        fire_time=T0,
        task_id="6d1f3d1a-0000-4000-8000-000000000001",
        attempt=1,
    )
    publish(app, claim)
    (message,) = messages(app)
    assert message.content_type == "application/json"
    assert (message.headers["task"], message.headers["id"]) == ("x.plain", claim.task_id)
    assert (message.headers["cronstore_name"], message.headers["x-k"]) == ("a", 1)


def test_the_allowlist_stops_beat_from_sending_other_tasks(
    app: Celery, store: Store, clock: FrozenClock
) -> None:
    app.task(name="os.system", shared=False)(_noop)  # registered, still not allowed
    app.conf.cronstore_task_allowlist = ["x.*"]
    store.add("ok", task="x.plain", timer="*:*:0/10")
    store.add("evil", task="os.system", timer="*:*:0/10")
    clock.set(T0 + timedelta(seconds=10))
    beat(app, store).tick()
    assert [m.headers["cronstore_name"] for m in messages(app)] == ["ok"]
    assert "not in cronstore_task_allowlist" in (store.status("evil").error or "")


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql+psycopg://beat:{PASSWORD}@127.0.0.1:1/app?connect_timeout=2",
        f"mysql+pymysql://beat:{PASSWORD}@127.0.0.1:1/app",
    ],
    ids=["postgresql", "mysql"],
)
def test_no_password_in_beat_logs_or_banner_when_the_database_is_down(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    app = Celery("down", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = url
    scheduler = Scheduler(app, lazy=False)  # setup_schedule: store unreachable at start
    assert scheduler.tick() > 0  # backs off, stays alive
    assert "***" in scheduler.info
    assert PASSWORD not in scheduler.info
    assert any("unreachable" in m or "unavailable" in m for m in caplog.messages)
    assert PASSWORD not in caplog.text
    scheduler.close()


def test_driver_messages_that_echo_credentials_are_scrubbed(app: Celery) -> None:
    app.conf.cronstore_url = f"postgresql+psycopg://beat:{PASSWORD}@db/app"
    app.conf.broker_url = f"amqp://guest:{PASSWORD}-broker@mq//"
    scheduler = Scheduler(app, lazy=True)
    texts = [
        f"could not connect: postgresql://beat:{PASSWORD}@db/app",
        f"bad conninfo 'host=db user=beat password={PASSWORD} dbname=app'",
        f"auth failed for {PASSWORD}",
        f"broker amqp://guest:{PASSWORD}-broker@mq// refused",
    ]
    for text in texts:
        assert PASSWORD not in scheduler._scrub(OSError(text))
