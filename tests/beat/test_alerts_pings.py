"""Ping URLs (``cronstore_alert_pings``, healthchecks.io's shape) from the ledger, sent to
a real local HTTP receiver (tests/receiver.py).

``GET <url>/start`` when a task's newest fire started, ``GET <url>`` when it succeeded,
``GET <url>/fail`` when it ended badly, each with ``?rid=<fire task id>``; a task's own
name wins over patterns, then the first matching pattern; nothing for a task without a
URL; a monitor that is down is logged once and stops neither the pass nor the webhook and
Sentry deliveries; bad settings stop beat at start, naming the setting and the entry.

Fires are made as beat and a worker make them: beat's tick publishes them (memory
broker, frozen clock), the worker's record functions start and end them.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery
from queues import drain
from receiver import Receiver, receiver
from timeline import T0

from celery_cronstore.beat.alerts import AlertRunner
from celery_cronstore.beat.pings import Pings
from celery_cronstore.beat.scheduler import Scheduler
from celery_cronstore.config import Config
from celery_cronstore.store import Store, runs
from celery_cronstore.testing import FrozenClock

MINUTE = timedelta(minutes=1)
SECRET_PATH = "0a1b2c3d-secret-uuid"


def _noop(*args: Any, **kwargs: Any) -> None:
    """Body of the test task (beat only sends it)."""


@pytest.fixture
def app(sqlite_url: str) -> Celery:
    app = Celery("pings", broker="memory://", set_as_current=False)
    # The beat that makes the fires judges no alerts (interval 0): the tests run passes.
    app.conf.update(cronstore_url=sqlite_url, task_default_queue="q", cronstore_alert_interval=0)
    app.task(name="x.do", shared=False)(_noop)
    return app


@pytest.fixture
def monitor() -> Iterator[Receiver]:
    with receiver() as state:
        yield state


def fire_all(app: Celery, store: Store, clock: FrozenClock, names: list[str]) -> dict[str, str]:
    """Add ``names`` (every 5 minutes), let a real beat publish one fire each and a worker
    start them; return each task's fire task id."""
    for name in names:
        store.add(name, task="x.do", timer="*/5 * * * *")
    beat = Scheduler(app, lazy=True)
    beat.store = store
    clock.set(T0 + 5 * MINUTE)
    beat.tick()
    assert len(drain(app)) == len(names)  # the memory broker's queues outlive the test
    beat.close()
    ids = {name: store.history(name, limit=1)[0].task_id for name in names}
    for task_id in ids.values():
        assert runs.record_start(store.db, task_id, node="w1", abandon_after=600) == 0
    clock.set(T0 + 5 * MINUTE + timedelta(seconds=3))
    return ids


def got(state: Receiver) -> list[tuple[str, str]]:
    """The receiver's requests as ``(path, rid)`` pairs, in arrival order."""
    found = []
    for request in state.answered():
        path, _, query = request.path.partition("?")
        assert query.startswith("rid="), request.path
        found.append((path, query.removeprefix("rid=")))
    return found


def test_start_success_and_fail_pings_carry_the_run_id(
    app: Celery, sqlite_store: Store, clock: FrozenClock, monitor: Receiver
) -> None:
    base = f"http://127.0.0.1:{monitor.port}"
    pings = {name: f"{base}/{name}/{SECRET_PATH}" for name in ("good", "bad", "long")}
    ids = fire_all(app, sqlite_store, clock, ["good", "bad", "long", "unwatched"])
    assert runs.finish_fire(sqlite_store.db, ids["good"], "succeeded")
    assert runs.finish_fire(sqlite_store.db, ids["bad"], "failed", error="boom")
    assert runs.finish_fire(sqlite_store.db, ids["unwatched"], "failed", error="boom")
    alerts = AlertRunner(Config(alert_pings=pings, alert_timeout=2.0), sqlite_store.db, str)
    done = alerts.run_once()
    assert (done.pings, done.pings_failed) == (3, 0)
    assert sorted(got(monitor)) == sorted(
        [
            (f"/good/{SECRET_PATH}", ids["good"]),
            (f"/bad/{SECRET_PATH}/fail", ids["bad"]),
            (f"/long/{SECRET_PATH}/start", ids["long"]),
        ]
    )
    assert all(r.headers["user-agent"] == "celery-cronstore" for r in monitor.answered())
    # Nothing changed: nothing sent. The long run succeeds: its end, with the same rid.
    assert alerts.run_once().pings == 0
    assert runs.finish_fire(sqlite_store.db, ids["long"], "succeeded")
    assert alerts.run_once().pings == 1
    assert got(monitor)[-1] == (f"/long/{SECRET_PATH}", ids["long"])
    assert len(monitor.answered()) == 4
    # The task without a URL was never pinged: every path is a watched task's.
    assert not [p for p, _ in got(monitor) if "unwatched" in p]


def test_a_name_wins_then_the_first_matching_pattern(
    app: Celery, sqlite_store: Store, clock: FrozenClock, monitor: Receiver
) -> None:
    base = f"http://127.0.0.1:{monitor.port}"
    pings = {
        "billing-*": f"{base}/billing",
        "*-eu": f"{base}/eu",  # billing-eu matches both: the first pattern wins
        "*": f"{base}/rest",
        "billing-us": f"{base}/us",  # its own name wins though listed after the patterns
    }
    ids = fire_all(app, sqlite_store, clock, ["billing-us", "billing-eu", "shop-eu", "misc"])
    for task_id in ids.values():
        assert runs.finish_fire(sqlite_store.db, task_id, "succeeded")
    alerts = AlertRunner(Config(alert_pings=pings), sqlite_store.db, str)
    assert alerts.run_once().pings == 4
    assert dict((rid, path) for path, rid in got(monitor)) == {
        ids["billing-us"]: "/us",
        ids["billing-eu"]: "/billing",
        ids["shop-eu"]: "/eu",
        ids["misc"]: "/rest",
    }
    # Patterns are case-sensitive shell patterns, the same on every platform.
    only = Pings({"billing-*": f"{base}/b"}, timeout=1.0)
    assert only.url_for("Billing-us") is None
    assert only.url_for("billing-[x]") == f"{base}/b"
    assert Pings({"report[1]": f"{base}/r"}, timeout=1.0).url_for("report[1]") == f"{base}/r"


def test_credentials_go_as_basic_auth_and_a_query_is_kept(
    app: Celery, sqlite_store: Store, clock: FrozenClock, monitor: Receiver
) -> None:
    url = f"http://ops:s3cret@127.0.0.1:{monitor.port}/p/{SECRET_PATH}/?team=9"
    ids = fire_all(app, sqlite_store, clock, ["t"])
    AlertRunner(Config(alert_pings={"t": url}), sqlite_store.db, str).run_once()
    (request,) = monitor.answered()
    assert request.path == f"/p/{SECRET_PATH}/start?team=9&rid={ids['t']}"
    assert request.headers["authorization"] == "Basic b3BzOnMzY3JldA=="  # ops:s3cret


def test_a_monitor_that_is_down_stops_neither_the_pass_nor_the_other_deliveries(
    app: Celery,
    sqlite_store: Store,
    clock: FrozenClock,
    monitor: Receiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sentry_sdk = pytest.importorskip("sentry_sdk")
    down = f"http://ops:pw-xyz@127.0.0.1:{monitor.port}/{SECRET_PATH}"
    monitor.then = "down"
    with receiver() as hook, receiver() as sentry:
        sentry_sdk.init(
            dsn=f"http://public@127.0.0.1:{sentry.port}/1",
            default_integrations=False,
            auto_enabling_integrations=False,
        )
        try:
            ids = fire_all(app, sqlite_store, clock, ["a", "b"])
            for task_id in ids.values():
                assert runs.finish_fire(sqlite_store.db, task_id, "failed", error="boom")
            config = Config(
                alert_pings={"*": down}, alert_webhook=hook.url, alert_failures=1, alert_timeout=2
            )
            alerts = AlertRunner(config, sqlite_store.db, str)
            with caplog.at_level(logging.INFO, logger="celery.beat"):
                done = alerts.run_once()
                assert (done.opened, done.sent, done.checkins) == (2, 2, 2)
                assert (done.pings, done.pings_failed) == (0, 2)
                sentry_sdk.flush(timeout=5)
                # Both episodes reached the webhook, both check-ins reached Sentry.
                assert sorted(json.loads(r.body)["task"]["name"] for r in hook.answered()) == [
                    "a",
                    "b",
                ]
                assert len(sentry.answered()) >= 1
                assert b'"status":"error"' in b"".join(r.body for r in sentry.answered())
                # The monitor comes back: the next change is pinged, and it says so once.
                monitor.then = "ok"
                clock.set(T0 + 10 * MINUTE)
                new = fire_all_again(app, sqlite_store, clock, "a")
                done = alerts.run_once()
                assert (done.pings, done.pings_failed) == (1, 0)
        finally:
            sentry_sdk.get_client().close(timeout=2)
            sentry_sdk.get_global_scope().set_client(None)
    assert got(monitor)[-1] == (f"/{SECRET_PATH}/start", new)
    failures = [r.getMessage() for r in caplog.records if "ping URL" in r.getMessage()]
    assert len(failures) == 2, failures  # one failure for the URL (two tasks), one recovery
    assert "failed" in failures[0]
    assert "answers again" in failures[1]
    assert f"http://127.0.0.1:{monitor.port}" in failures[0]
    text = caplog.text
    for secret in (SECRET_PATH, "pw-xyz", "ops:"):
        assert secret not in text


def fire_all_again(app: Celery, store: Store, clock: FrozenClock, name: str) -> str:
    """Let a real beat publish ``name``'s next fire (at the clock) and a worker start it."""
    beat = Scheduler(app, lazy=True)
    beat.store = store
    beat.tick()
    drain(app)
    beat.close()
    task_id = store.history(name, limit=1)[0].task_id
    assert runs.record_start(store.db, task_id, node="w1", abandon_after=600) == 0
    return task_id


BAD_URL = "cronstore_alert_pings['a'] must be an http:// or https:// URL: "


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": "ftp://hc/x"}, BAD_URL + "got scheme 'ftp'"),
        ({"a": f"hc-ping.com/{SECRET_PATH}"}, BAD_URL + "got no scheme"),
        ({"a": "https:///x"}, BAD_URL + "got no host"),
        ({"a": 7}, BAD_URL + "got a value of type int"),
        ({"": "https://hc/x"}, "cronstore_alert_pings: each key must be a task name or a shell"),
        ("https://hc/x", "cronstore_alert_pings must be a dict"),
    ],
)
def test_bad_settings_stop_beat_at_start_naming_the_entry(
    app: Celery, value: Any, message: str
) -> None:
    app.conf.cronstore_alert_pings = value
    with pytest.raises(ValueError, match=r"^" + re.escape(message)) as caught:
        Scheduler(app, lazy=True)
    assert SECRET_PATH not in str(caught.value)  # a ping URL's path is its secret


def test_the_run_id_of_a_task_id_that_is_no_uuid_is_a_stable_uuid() -> None:
    from celery_cronstore.beat.changes import run_id

    assert run_id("raw-sql-id") == run_id("raw-sql-id")
    assert isinstance(run_id("raw-sql-id"), uuid.UUID)
    task_id = str(uuid.uuid4())
    assert str(run_id(task_id)) == task_id
