"""Alerts delivered by beat to a real local HTTP receiver (tests/receiver.py) that fails,
is slow and comes back: one open and one resolve per episode, signed, retried with
back-off and recorded; nothing sent twice or lost across a beat restart or by two
replicas at once; nothing for a healthy task; the dead man's switch.

Fires are made as beat and a worker make them: beat's tick publishes them (memory
broker, frozen clock), the worker's record functions start and end them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from celery import Celery
from queues import drain
from receiver import Receiver, receiver
from timeline import T0

from celery_cronstore.beat.alerts import AlertRunner
from celery_cronstore.beat.scheduler import Scheduler
from celery_cronstore.config import Config
from celery_cronstore.policy.alerts import Episode, by_kind, evaluate
from celery_cronstore.store import Store, runs
from celery_cronstore.store import alerts as store_alerts
from celery_cronstore.store.retention import Pruner
from celery_cronstore.testing import FrozenClock

SECRET = "hook-secret-42"
MINUTE = timedelta(minutes=1)


def _noop(*args: Any, **kwargs: Any) -> None:
    """Body of the test task (beat only sends it)."""


@pytest.fixture
def app(sqlite_url: str) -> Celery:
    app = Celery("alerts", broker="memory://", set_as_current=False)
    # The beat that makes the fires judges no alerts (interval 0): the tests run passes.
    app.conf.update(cronstore_url=sqlite_url, task_default_queue="q", cronstore_alert_interval=0)
    app.task(name="x.do", shared=False)(_noop)
    return app


@pytest.fixture
def hook() -> Iterator[Receiver]:
    with receiver() as state:
        yield state


class Ledger:
    """Fires of tasks, published by a real beat and ended as a worker records them."""

    def __init__(self, app: Celery, store: Store, clock: FrozenClock) -> None:
        self.app, self.store, self.clock = app, store, clock
        self.beat = Scheduler(app, lazy=True)
        self.beat.store = store

    def end(self, name: str, state: str, at: datetime, error: str | None = None) -> None:
        """Let beat publish ``name``'s fire at ``at``, then record its run's end."""
        self.clock.set(at)
        self.beat.tick()
        drain(self.app)
        (fire,) = [f for f in self.store.history(name, limit=5) if f.fire_time == at]
        assert runs.record_start(self.store.db, fire.task_id, node="w1", abandon_after=600) == 0
        assert runs.finish_fire(self.store.db, fire.task_id, state, error=error)

    def close(self) -> None:
        self.beat.close()


@pytest.fixture
def ledger(app: Celery, sqlite_store: Store, clock: FrozenClock) -> Iterator[Ledger]:
    made = Ledger(app, sqlite_store, clock)
    yield made
    made.close()


def runner(store: Store, url: str, *, timeout: float = 0.3, **more: Any) -> AlertRunner:
    config = Config(alert_webhook=url, alert_secret=SECRET, alert_timeout=timeout, **more)
    return AlertRunner(config, store.db, str)


def fail_three_times(ledger: Ledger, *names: str) -> None:
    for minute in (1, 2, 3):
        for name in names or ("flaky",):
            at = T0 + minute * MINUTE
            ledger.end(name, "failed", at, "RuntimeError: upstream returned 503")


def only(store: Store) -> Episode:
    (episode,) = store_alerts.episodes(store.db)
    return episode


def signed(item: Any) -> bool:
    expected = "sha256=" + hmac.new(SECRET.encode(), item.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(item.headers["x-cronstore-signature"], expected)


def delivered(hook: Receiver) -> list[tuple[str, str]]:
    """The (delivery id, event) of each request the receiver answered 2xx in time."""
    return [
        (r.headers["x-cronstore-delivery"], json.loads(r.body)["event"])
        for r in hook.answered("ok")
    ]


def test_one_open_and_one_resolve_through_failure_and_slowness(
    ledger: Ledger, sqlite_store: Store, clock: FrozenClock, hook: Receiver
) -> None:
    store = sqlite_store
    store.add("flaky", task="x.do", timer="every 1m")
    hook.script = ["fail", "slow"]
    alerts = runner(store, hook.url)
    fail_three_times(ledger)
    opened_at = T0 + 3 * MINUTE
    first = alerts.run_once()
    assert (first.opened, first.sent, first.failed) == (1, 0, 1)
    episode = only(store)
    assert (episode.kind, episode.count, episode.attempts) == ("failing", 3, 1)
    assert episode.last_error == "the receiver answered HTTP 500"
    assert episode.sent_at is None
    assert episode.next_attempt_at == opened_at + timedelta(seconds=10)  # back-off
    assert alerts.run_once().sent == 0  # not due yet
    assert len(hook.received) == 1
    clock.set(opened_at + timedelta(seconds=10))
    assert alerts.run_once().failed == 1  # the slow answer comes after the timeout
    episode = only(store)
    assert (episode.attempts, episode.last_error) == (2, "no answer within 0.3s")
    assert episode.next_attempt_at == clock() + timedelta(seconds=20)  # doubled
    clock.set(clock() + timedelta(seconds=20))
    assert alerts.run_once().sent == 1  # it came back
    episode = only(store)
    assert (episode.sent_at, episode.next_attempt_at, episode.attempts) == (clock(), None, 3)
    assert alerts.run_once().sent == 0  # the open went: never again
    # The task recovers: the episode resolves, and its resolve goes once.
    ledger.end("flaky", "succeeded", T0 + 4 * MINUTE)
    recovered = alerts.run_once()
    assert (recovered.resolved, recovered.sent) == (1, 1)
    assert alerts.run_once().sent == 0
    episode = only(store)
    assert episode.resolved_at == T0 + 4 * MINUTE
    assert episode.resolve_sent_at == T0 + 4 * MINUTE
    # Exactly one open and one resolve reached the receiver in time; every attempt of a
    # delivery carried the same delivery id; every body is signed.
    ident = episode.id
    assert delivered(hook) == [(f"{ident}:open", "open"), (f"{ident}:resolve", "resolve")]
    assert [r.answer for r in hook.received] == ["fail", "slow", "ok", "ok"]
    assert {r.headers["x-cronstore-delivery"] for r in hook.received[:3]} == {f"{ident}:open"}
    assert all(signed(r) for r in hook.received)
    body = json.loads(hook.answered("ok")[0].body)
    assert body == {
        "delivery": f"{ident}:open",
        "event": "open",
        "task": {"id": episode.periodic_task_id, "name": "flaky"},
        "episode": {
            "id": ident,
            "kind": "failing",
            "opened_at": "2026-01-05T12:03:00Z",
            "resolved_at": None,
            "count": 3,
        },
        "reason": "3 bad end(s) in a row; newest failed (fire of 2026-01-05T12:03:00Z): "
        "RuntimeError: upstream returned 503",
    }
    assert json.loads(hook.answered("ok")[1].body)["episode"]["resolved_at"] == (
        "2026-01-05T12:04:00Z"
    )


def test_a_restarted_beat_sends_what_is_owed_and_nothing_twice(
    app: Celery, ledger: Ledger, sqlite_store: Store, clock: FrozenClock, hook: Receiver
) -> None:
    store = sqlite_store
    store.add("flaky", task="x.do", timer="every 1m")
    fail_three_times(ledger)
    before = runner(store, hook.url)
    assert before.run_once().sent == 1  # the open went
    hook.script = ["down"]  # then the receiver drops the connection
    ledger.end("flaky", "succeeded", T0 + 4 * MINUTE)
    assert before.run_once().failed == 1  # the resolve is owed, recorded in the row
    assert only(store).last_error is not None
    # Beat restarts: a new Scheduler on the same store, alerts on (its chores run them).
    app.conf.update(
        cronstore_alert_interval=5,
        cronstore_alert_webhook=hook.url,
        cronstore_alert_secret=SECRET,
        cronstore_alert_timeout=2,
    )
    # Its second attempt (the open was the first) waits 20 s.
    assert only(store).next_attempt_at == T0 + 4 * MINUTE + timedelta(seconds=20)
    clock.set(T0 + 4 * MINUTE + timedelta(seconds=20))
    after = Scheduler(app, lazy=True)
    after.store = store
    try:
        after.tick()
        assert after.loop is not None
        alerts = after.loop.chores.alerts
        assert not alerts.running  # the first pass comes one interval after the start
        assert delivered(hook) == [(f"{only(store).id}:open", "open")]
        alerts._next_look = 0.0  # that interval has passed
        after.loop.chores.next_due = 0.0
        after.tick()
        assert alerts.wait(10)
        ident = only(store).id
        assert delivered(hook) == [(f"{ident}:open", "open"), (f"{ident}:resolve", "resolve")]
        # Later passes (and a third beat) find nothing owed.
        after.loop.chores.next_due = 0.0
        alerts._next_look = 0.0
        after.tick()
        assert alerts.wait(10)
        assert runner(store, hook.url).run_once().sent == 0
    finally:
        after.close()
    assert len(delivered(hook)) == 2
    assert [r.answer for r in hook.received] == ["ok", "down", "ok"]


def test_two_replicas_at_once_send_each_delivery_once(
    app: Celery, store: Store, db_url: str, clock: FrozenClock, hook: Receiver
) -> None:
    """Two beats (two stores, two runners) judge and deliver the same episode together,
    on every backend: one open row, one open sent, one resolve sent."""
    other = Store(db_url, clock=clock)
    made = Ledger(app, store, clock)
    hook.lag = 0.2  # each answer takes a while: the two passes overlap
    try:
        store.add("flaky", task="x.do", timer="every 1m")
        fail_three_times(made)
        replicas = [runner(store, hook.url, timeout=5), runner(other, hook.url, timeout=5)]

        def together() -> None:
            start = threading.Barrier(2)

            def one(alerts: AlertRunner) -> None:
                start.wait()
                alerts.run_once()

            threads = [threading.Thread(target=one, args=(r,)) for r in replicas]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)

        together()
        ident = only(store).id
        assert delivered(hook) == [(f"{ident}:open", "open")]
        made.end("flaky", "succeeded", T0 + 4 * MINUTE)
        together()
        together()
        assert delivered(hook) == [(f"{ident}:open", "open"), (f"{ident}:resolve", "resolve")]
        assert len(hook.received) == 2
        assert only(store).attempts == 2
    finally:
        made.close()
        other.close()


def test_a_healthy_task_sends_nothing(ledger: Ledger, sqlite_store: Store, hook: Receiver) -> None:
    sqlite_store.add("steady", task="x.do", timer="every 1m", alert_after="2 periods")
    alerts = runner(sqlite_store, hook.url, alert_after="1 period")
    for minute in range(1, 6):
        ledger.end("steady", "succeeded", T0 + minute * MINUTE)
        alerts.run_once()
    # One failure (and a fire now in flight) is no episode either.
    ledger.end("steady", "failed", T0 + 6 * MINUTE, "boom")
    alerts.run_once()
    assert store_alerts.episodes(sqlite_store.db) == []
    assert hook.received == []


def test_the_dead_man_s_switch_fires_for_a_silent_task(
    ledger: Ledger, sqlite_store: Store, clock: FrozenClock, hook: Receiver
) -> None:
    store = sqlite_store
    store.add("nightly", task="x.do", timer="every 1m", alert_after="3 periods")
    store.add("quiet", task="x.do", timer="every 1h")  # no switch of its own, none by default
    alerts = runner(store, hook.url)
    ledger.end("nightly", "succeeded", T0 + MINUTE)
    clock.set(T0 + 4 * MINUTE)  # three more fires due: each may still succeed
    assert alerts.run_once().opened == 0
    clock.set(T0 + 5 * MINUTE)  # the fourth is due and none of the three succeeded
    assert alerts.run_once().sent == 1
    episode = only(store)
    assert (episode.kind, episode.name, episode.count) == ("silent", "nightly", 4)
    assert episode.reason == (
        "no success since the fire of 2026-01-05T12:01:00Z "
        "(4 fire(s) due since; alert_after 3 periods)"
    )
    ledger.end("nightly", "succeeded", T0 + 5 * MINUTE)
    assert alerts.run_once().sent == 1
    assert [json.loads(r.body)["event"] for r in hook.received] == ["open", "resolve"]


def test_with_one_failure_allowed_a_missed_fire_alerts(
    ledger: Ledger, sqlite_store: Store, clock: FrozenClock, hook: Receiver
) -> None:
    """Beat away for ten minutes: the fires it missed are recorded ``missed`` and, with
    ``cronstore_alert_failures = 1``, open an episode counting them."""
    sqlite_store.add("poll", task="x.do", timer="every 1m")
    alerts = runner(sqlite_store, hook.url, alert_failures=1)
    ledger.end("poll", "succeeded", T0 + MINUTE)
    clock.set(T0 + 11 * MINUTE)
    ledger.beat.tick()  # run_once: the newest goes out, the nine before it are missed
    assert len(drain(ledger.app)) == 1
    assert alerts.run_once().sent == 1
    episode = only(sqlite_store)
    assert (episode.kind, episode.count) == ("failing", 9)
    assert "newest missed" in (episode.reason or "")


def test_without_a_webhook_episodes_are_kept_but_owe_nothing(
    ledger: Ledger, sqlite_store: Store, hook: Receiver
) -> None:
    sqlite_store.add("flaky", task="x.do", timer="every 1m")
    fail_three_times(ledger)
    alerts = AlertRunner(Config(), sqlite_store.db, str)
    assert alerts.run_once().opened == 1
    episode = only(sqlite_store)
    assert (episode.next_attempt_at, episode.sent_at) == (None, None)
    assert store_alerts.due(sqlite_store.db, T0 + timedelta(days=1)) == []
    assert AlertRunner(Config(), sqlite_store.db, str).run_once().opened == 0  # still open


def test_resolved_episodes_go_with_the_ledger_s_retention(
    ledger: Ledger, sqlite_store: Store, clock: FrozenClock, hook: Receiver
) -> None:
    store = sqlite_store
    store.add("flaky", task="x.do", timer="every 1m")
    store.add("broken", task="x.do", timer="every 1m")
    fail_three_times(ledger, "flaky", "broken")
    alerts = runner(store, hook.url)
    alerts.run_once()
    ledger.end("flaky", "succeeded", T0 + 4 * MINUTE)
    alerts.run_once()
    assert [e.is_open for e in store_alerts.episodes(store.db)] == [True, False]
    clock.set(T0 + timedelta(days=31))
    Pruner(store.db).run(timedelta(days=30))
    (left,) = store_alerts.episodes(store.db)
    assert (left.name, left.is_open) == ("broken", True)


def test_a_pass_reads_only_the_tasks_that_can_have_something_to_say(
    ledger: Ledger, sqlite_store: Store, clock: FrozenClock, hook: Receiver
) -> None:
    """Healthy tasks without a switch are not read (a million of them held beat for
    seconds each pass); what the rules decide is what a read of every task decides."""
    store = sqlite_store
    store.add("steady", task="x.do", timer="every 1m")  # healthy, unwatched: not read
    store.add("flaky", task="x.do", timer="every 1m")  # bad ends: read
    store.add("watched", task="x.do", timer="every 1m", alert_after="2 periods")  # own switch
    store.add("gone", task="x.do", timer="every 1m")  # an open episode, then disabled
    fail_three_times(ledger, "steady", "flaky", "gone")
    ledger.end("steady", "succeeded", T0 + 4 * MINUTE)
    alerts = runner(store, hook.url)
    alerts.run_once()
    opened = sorted((e.name, e.kind) for e in store_alerts.episodes(store.db))
    assert opened == [("flaky", "failing"), ("gone", "failing"), ("watched", "silent")]
    store.update("gone", enabled=False)
    clock.set(T0 + 8 * MINUTE)

    def names(facts: list[Any]) -> list[str]:
        return sorted(f.name for f in facts)

    some = store_alerts.task_facts(store.db, every_enabled=False)
    every = store_alerts.task_facts(store.db)
    assert names(some) == ["flaky", "gone", "steady", "watched"]  # steady: bad ends in the ledger
    assert names(every) == ["flaky", "gone", "steady", "watched"]
    store.add("quiet", task="x.do", timer="every 1m")  # never fired: nothing to say
    assert "quiet" not in names(store_alerts.task_facts(store.db, every_enabled=False))
    assert "quiet" in names(store_alerts.task_facts(store.db))  # a default switch reads it
    settings = alerts.settings
    episodes = by_kind(store_alerts.open_episodes(store.db))
    now = store.db.now()

    def decided(facts: list[Any]) -> dict[str, Any]:
        changes = {f.name: evaluate(f, episodes.get(f.id, {}), settings, now) for f in facts}
        return {name: found for name, found in changes.items() if found}

    assert decided(store_alerts.task_facts(store.db, every_enabled=False)) == decided(
        store_alerts.task_facts(store.db)
    )
    assert alerts.run_once().resolved == 1  # gone, disabled; watched: silent now
    assert sorted(
        (e.name, e.kind, e.resolved_at is None) for e in store_alerts.episodes(store.db)
    ) == [
        ("flaky", "failing", True),
        ("gone", "failing", False),
        ("watched", "silent", True),
    ]
