"""Sentry Crons check-ins from the ledger: ``sentry_sdk`` initialized with a DSN pointing
at a real local HTTP receiver (tests/receiver.py), which gets the SDK's own envelopes.

Monitor slug = task name; ``in_progress`` when a fire started, ``ok`` when it succeeded,
``error`` when it ended badly; one check-in id per fire (its task id), so the start and
the end of a fire are one check-in.
"""

from __future__ import annotations

import json
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
from celery_cronstore.beat.scheduler import Scheduler
from celery_cronstore.beat.sentry import monitor_config, sentry_active
from celery_cronstore.config import Config
from celery_cronstore.store import Store, runs
from celery_cronstore.testing import FrozenClock

sentry_sdk = pytest.importorskip("sentry_sdk")
MINUTE = timedelta(minutes=1)


def _noop(*args: Any, **kwargs: Any) -> None:
    """Body of the test task (beat only sends it)."""


@pytest.fixture
def sentry() -> Iterator[Receiver]:
    """A receiver standing in for Sentry, and the SDK initialized to send to it."""
    with receiver() as state:
        sentry_sdk.init(
            dsn=f"http://public@127.0.0.1:{state.port}/1",
            default_integrations=False,
            auto_enabling_integrations=False,
        )
        try:
            yield state
        finally:
            sentry_sdk.get_client().close(timeout=2)
            sentry_sdk.get_global_scope().set_client(None)
    assert not sentry_active()


def checkins(state: Receiver) -> list[dict[str, Any]]:
    """The check-ins in the envelopes the receiver got (``sentry_sdk.flush()`` first)."""
    sentry_sdk.flush(timeout=5)
    found = []
    for request in state.answered():
        assert request.path == "/api/1/envelope/"
        lines = request.body.split(b"\n")
        for header, payload in zip(lines[1::2], lines[2::2], strict=False):
            if json.loads(header).get("type") == "check_in":
                found.append(json.loads(payload))
    return found


def test_the_ledger_becomes_check_ins(
    sentry: Receiver, sqlite_url: str, sqlite_store: Store, clock: FrozenClock
) -> None:
    app = Celery("sentry", broker="memory://", set_as_current=False)
    app.conf.update(cronstore_url=sqlite_url, task_default_queue="q", cronstore_alert_interval=0)
    app.task(name="x.do", shared=False)(_noop)
    store = sqlite_store
    for name in ("good", "bad", "long"):
        store.add(name, task="x.do", timer="*/5 * * * *")
    store.add("idle", task="x.do", timer="every 1h")  # not fired yet: no check-in
    beat = Scheduler(app, lazy=True)
    beat.store = store
    clock.set(T0 + 5 * MINUTE)
    beat.tick()
    assert len(drain(app)) == 3  # the memory broker's queues outlive the test
    ids = {name: store.history(name, limit=1)[0].task_id for name in ("good", "bad", "long")}
    for task_id in ids.values():
        assert runs.record_start(store.db, task_id, node="w1", abandon_after=600) == 0
    clock.set(T0 + 5 * MINUTE + timedelta(seconds=3))
    assert runs.finish_fire(store.db, ids["good"], "succeeded")
    assert runs.finish_fire(store.db, ids["bad"], "failed", error="boom")
    assert sentry_active()
    alerts = AlertRunner(Config(), store.db, str)
    assert alerts.run_once().checkins == 3
    got = {c["monitor_slug"]: c for c in checkins(sentry)}
    assert {slug: c["status"] for slug, c in got.items()} == {
        "good": "ok",
        "bad": "error",
        "long": "in_progress",
    }
    assert {slug: c["check_in_id"] for slug, c in got.items()} == {
        name: uuid.UUID(task_id).hex for name, task_id in ids.items()
    }
    assert got["good"]["duration"] == pytest.approx(3.0)
    assert got["good"]["monitor_config"] == {
        "schedule": {"type": "crontab", "value": "*/5 * * * *"},
        "timezone": "UTC",
    }
    # Nothing changed: nothing sent. The long run ends: its one check-in closes.
    assert alerts.run_once().checkins == 0
    assert runs.finish_fire(store.db, ids["long"], "timed_out")
    assert alerts.run_once().checkins == 1
    final = checkins(sentry)[-1]
    assert (final["monitor_slug"], final["status"]) == ("long", "error")
    assert final["check_in_id"] == uuid.UUID(ids["long"]).hex
    assert len(checkins(sentry)) == 4
    beat.close()


@pytest.mark.parametrize(
    ("kind", "expression", "config"),
    [
        ("cron", "0 9 * * 1-5", {"schedule": {"type": "crontab", "value": "0 9 * * 1-5"}}),
        ("interval", "every 1h30m", {"schedule": {"type": "interval", "value": 90,
                                                  "unit": "minute"}}),
        ("interval", "every 2w", {"schedule": {"type": "interval", "value": 2, "unit": "week"}}),
        ("interval", "every 90s", None),
        ("calendar", "Mon..Fri 09:00", None),
    ],
)  # fmt: skip
def test_monitor_schedules_sentry_can_say(kind: str, expression: str, config: Any) -> None:
    got = monitor_config(kind, expression, "Europe/Berlin")
    if config is not None and kind == "cron":
        config = {**config, "timezone": "Europe/Berlin"}
    assert got == config
