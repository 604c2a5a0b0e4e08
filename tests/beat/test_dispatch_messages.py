"""Beat's Dispatcher sends the very message Celery's apply_async would (kombu's memory
transport; tests/beat/test_dispatch_brokers.py does the same on real brokers)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from celery import signals
from dispatch_cases import CASE_IDS, case_named, cases, check_case, make_app, producer_of, purge
from kombu.exceptions import EncodeError, OperationalError

from celery_cronstore.beat.dispatch import Dispatcher


def queue_name() -> str:
    return f"dispatch-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_dispatcher_message_equals_celerys(case_id: str) -> None:
    queue = queue_name()
    case = case_named(queue, case_id)
    app = make_app("memory://", queue)
    try:
        fast = check_case(app, case)
    finally:
        purge(app, [queue, f"{queue}.other"])
    headers = fast["headers"]
    if case_id == "crontask":
        assert headers["timelimit"] == [60.0, 30.0]
        assert headers["expires"] is None
    if case_id == "crontask-own-soft-limit":
        assert headers["timelimit"] == [60.0, 5]
    if case_id == "options":
        assert headers["x-team"] == "ops"
        assert headers["timelimit"] == [30, None]
        assert headers["ignore_result"] is True
        assert fast["priority"] == 5
        assert headers["expires"] is not None
    if case_id == "unregistered":
        assert headers["task"] == "elsewhere.remote_task"
        assert headers["trace"] == "t-1"


def test_dispatcher_sends_celerys_publish_signals() -> None:
    queue = queue_name()
    app = make_app("memory://", queue)
    seen: list[tuple[str, str, Any]] = []

    def before(sender: str, headers: dict[str, Any], **kwargs: Any) -> None:
        seen.append(("before", sender, headers["id"]))

    def after(sender: str, headers: dict[str, Any], **kwargs: Any) -> None:
        seen.append(("after", sender, headers["id"]))

    signals.before_task_publish.connect(before, weak=False)
    signals.after_task_publish.connect(after, weak=False)
    try:
        claim = cases(queue)[0].claim
        with producer_of(app) as producer:
            Dispatcher(app, producer).send(claim)
    finally:
        signals.before_task_publish.disconnect(before)
        signals.after_task_publish.disconnect(after)
        purge(app, [queue])
    assert seen == [
        ("before", "cases.plain", claim.task_id),
        ("after", "cases.plain", claim.task_id),
    ]


def test_a_message_that_cannot_be_built_raises_for_that_claim_only() -> None:
    from celery.exceptions import QueueNotFound

    queue = queue_name()
    app = make_app("memory://", queue)
    app.conf.task_create_missing_queues = False
    good = cases(queue)[0].claim
    bad = replace(good, task_id="bad", args=[object()])  # not JSON
    nowhere = replace(good, task_id="nowhere", options={"queue": "no-such-queue"})
    with producer_of(app) as producer:
        dispatcher = Dispatcher(app, producer)
        with pytest.raises(EncodeError):
            dispatcher.send(bad)
        with pytest.raises(QueueNotFound):
            dispatcher.send(nowhere)
        dispatcher.send(good)
    # Neither is a broker error: beat drops those fires and publishes the rest.
    assert not issubclass(EncodeError, (OSError, OperationalError))
    assert not issubclass(QueueNotFound, (OSError, OperationalError))
    with app.connection_for_read() as conn:
        assert conn.default_channel._size(queue) == 1
    purge(app, [queue])


def test_beat_drops_only_the_fire_whose_message_cannot_be_routed(tmp_path: Path) -> None:
    from datetime import timedelta

    from timeline import T0

    from celery_cronstore.beat.scheduler import Scheduler
    from celery_cronstore.store import Store
    from celery_cronstore.testing import FrozenClock

    url = f"sqlite:///{tmp_path / 'cronstore.sqlite'}"
    app = make_app("memory://", "q")
    app.conf.update(cronstore_url=url, task_create_missing_queues=False)
    clock = FrozenClock(T0)
    store = Store(url, clock=clock)
    store.upgrade()
    store.add("good", task="cases.plain", timer="*:*:0/10", args=[1])
    store.add("lost", task="cases.plain", timer="*:*:0/10", args=[2], options={"queue": "nowhere"})
    scheduler = Scheduler(app, lazy=True)
    scheduler.store = store
    try:
        clock.set(T0 + timedelta(seconds=10))
        scheduler.tick()
        states = {name: store.history(name)[0].state for name in ("good", "lost")}
        assert states == {"good": "published", "lost": "dropped"}
        assert "nowhere" in (store.get("lost").error or "")
        with app.connection_for_read() as conn:
            assert conn.default_channel._size("q") == 1
    finally:
        scheduler.close()
        store.close()
        purge(app, ["q"])
