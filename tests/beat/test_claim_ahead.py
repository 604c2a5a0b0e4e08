"""Claims taken ahead (``cronstore_claim_ahead``): claimed before the fire time, published
at it, never before it, in fire-time order."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from queues import drain
from timeline import T0

from celery_cronstore.beat.dispatch import Dispatcher
from celery_cronstore.beat.held import HeldClaims
from celery_cronstore.beat.loop import Loop
from celery_cronstore.beat.scheduler import Scheduler
from celery_cronstore.records import Claim
from celery_cronstore.store import Claimer, Store
from celery_cronstore.testing import FrozenClock

UTC = timezone.utc
# serial: most tests here fire a real beat 0.4-3 s ahead and check when it published to
# 10-100 ms; a loaded machine (the parallel run) breaks the margins, not the code.
pytestmark = pytest.mark.serial


def _noop() -> None:
    """Never run: beat only sends."""


@pytest.fixture
def app(tmp_path: Path) -> Celery:
    app = Celery("t", broker="memory://", set_as_current=False)
    app.conf.update(
        cronstore_url=f"sqlite:///{tmp_path / 'ahead.sqlite'}",
        cronstore_sync_beat_schedule=False,
        task_default_queue="q",
    )
    app.task(name="x.do", shared=False)(_noop)
    return app


def sent(app: Celery) -> list[dict[str, Any]]:
    return [dict(message.headers) for message in drain(app)]


def started(app: Celery) -> tuple[Scheduler, Store]:
    """A scheduler that has ticked once (its store is open), and that store."""
    scheduler = Scheduler(app, lazy=True)
    scheduler.tick()
    assert scheduler.store is not None
    return scheduler, scheduler.store


def loop_of(scheduler: Scheduler) -> Loop:
    """The parts of a scheduler whose store is open."""
    assert scheduler.loop is not None
    return scheduler.loop


def held_of(scheduler: Scheduler) -> HeldClaims:
    return loop_of(scheduler).held


def instant(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_claim_due_ahead_plans_each_row_as_of_its_fire_time(clock: FrozenClock) -> None:
    store = Store("sqlite://", clock=clock)
    store.upgrade()
    store.add("late", task="x.do", timer="*:*:0/10")  # next run T0+10s
    store.add("soon", task="x.do", timer="every 1m from " + instant(T0 + timedelta(seconds=5)))
    clock.set(T0 + timedelta(seconds=4))
    claimer = Claimer(store, "n")
    assert claimer.claim_due(timedelta(seconds=0.5)).claims == []  # nothing within 0.5 s
    result = claimer.claim_due(timedelta(seconds=7))
    assert [(c.name, c.fire_time) for c in result.claims] == [
        ("soon", T0 + timedelta(seconds=5)),
        ("late", T0 + timedelta(seconds=10)),
    ]
    assert store.get("late").next_run == T0 + timedelta(seconds=20)
    assert store.get("soon").next_run == T0 + timedelta(seconds=65)
    (fire,) = store.history("late")
    assert (fire.state, fire.fire_time) == ("claimed", T0 + timedelta(seconds=10))
    store.close()


def test_claims_come_in_fire_time_order_across_tasks(clock: FrozenClock) -> None:
    store = Store("sqlite://", clock=clock)
    store.upgrade()
    store.add("backlog", task="x.do", timer="*:*:0/10", misfire_policy="run_all")
    store.add("between", task="x.do", timer="*:*:15")
    clock.set(T0 + timedelta(seconds=35))  # backlog: :10, :20, :30; between: :15
    claims = Claimer(store, "n").claim_due().claims
    assert [c.fire_time for c in claims] == sorted(c.fire_time for c in claims)
    assert [c.name for c in claims] == ["backlog", "between", "backlog", "backlog"]
    store.close()


def test_beat_claims_ahead_and_publishes_at_the_fire_time(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    app.conf.cronstore_claim_ahead = 1.0
    scheduler, store = started(app)
    fire_at = datetime.now(UTC) + timedelta(seconds=0.4)
    store.add("one", task="x.do", timer=instant(fire_at))
    published: list[float] = []
    send = Dispatcher.send

    def stamped(self: Dispatcher, claim: Claim) -> None:
        published.append(time.time())
        send(self, claim)

    monkeypatch.setattr(Dispatcher, "send", stamped)
    sleep = scheduler.tick()  # claims it ahead: nothing sent yet
    assert store.history("one")[0].state == "claimed"
    assert published == []
    while not published:
        assert 0 <= sleep <= 1.0
        time.sleep(sleep)
        sleep = scheduler.tick()
    assert published[0] >= fire_at.timestamp()  # never before its time
    assert published[0] - fire_at.timestamp() < 1.0  # generous: a loaded CI machine
    (message,) = sent(app)
    assert message["cronstore_fire_time"] == fire_at.isoformat()
    assert store.history("one")[0].state == "published"
    scheduler.close()


def test_close_publishes_the_claims_taken_ahead(app: Celery) -> None:
    app.conf.cronstore_claim_ahead = 1.0
    scheduler, store = started(app)
    fire_at = datetime.now(UTC) + timedelta(seconds=0.4)
    store.add("one", task="x.do", timer=instant(fire_at))
    scheduler.tick()
    assert held_of(scheduler).count == 1
    scheduler.close()
    assert time.time() >= fire_at.timestamp()
    assert [m["cronstore_fire_time"] for m in sent(app)] == [fire_at.isoformat()]
    reader = Store(str(app.conf.cronstore_url))
    assert reader.history("one")[0].state == "published"
    reader.close()


def test_an_injected_clock_claims_when_due(app: Celery, clock: FrozenClock) -> None:
    app.conf.cronstore_claim_ahead = 60.0
    store = Store(str(app.conf.cronstore_url), clock=clock)
    store.upgrade()
    store.add("a", task="x.do", timer="*:*:0/10")
    scheduler = Scheduler(app, lazy=True)
    scheduler.store = store
    assert scheduler.tick() == pytest.approx(5.0)  # nothing claimed 10 s ahead
    assert store.history("a") == []
    scheduler.close()
    store.close()


@pytest.mark.parametrize("when", ["tick", "close"])
def test_a_disable_committed_before_the_fire_time_stops_a_claim_taken_ahead(
    app: Celery, when: str
) -> None:
    """Claiming ahead must not let a fire run after its task's disable committed: the
    task is read again just before the publish, and the fire recorded dropped."""
    app.conf.cronstore_claim_ahead = 1.0
    scheduler, store = started(app)
    fire_at = datetime.now(UTC) + timedelta(seconds=0.5)
    store.add("off", task="x.do", timer=instant(fire_at))
    store.add("on", task="x.do", timer=instant(fire_at))
    sleep = scheduler.tick()  # both claimed ahead, held
    assert [f.state for f in store.history("off")] == ["claimed"]
    store.disable("off")  # committed before the fire time
    if when == "close":
        scheduler.close()
    else:
        while held_of(scheduler).count:
            time.sleep(sleep)
            sleep = scheduler.tick()
    assert [m["cronstore_name"] for m in sent(app)] == ["on"]
    (dropped,) = store.history("off")
    assert dropped.state == "dropped"
    assert "disabled" in (dropped.reason or "")
    scheduler.close()


def test_a_burst_is_claimed_whole_before_its_time_and_published_at_it(app: Celery) -> None:
    """More fires due together than one claim takes: beat starts early enough to claim
    them all at its measured pace (policy.lead), holds them, and publishes each at its
    time, never before. Claiming them only ``claim_ahead`` before would have left most
    of the burst to be claimed after its time."""
    app.conf.update(cronstore_claim_ahead=0.1, cronstore_batch_size=20)
    scheduler, store = started(app)
    fire_at = datetime.now(UTC) + timedelta(seconds=2.5)
    for i in range(200):
        store.add(f"b{i:03d}", task="x.do", timer=instant(fire_at))
    held_of(scheduler).row_cost = 0.01  # as if each row's claim took 10 ms: a 3.1 s lead
    sleep = scheduler.tick()
    while time.time() < fire_at.timestamp() - 0.5 and sleep == 0.0:
        sleep = scheduler.tick()
    assert time.time() < fire_at.timestamp(), "the machine is too slow for this test"
    states = {f.state for i in range(200) for f in store.history(f"b{i:03d}")}
    assert states == {"claimed"}  # the whole burst, held
    assert held_of(scheduler).count == 200
    assert sent(app) == []
    while held_of(scheduler).count:
        time.sleep(min(sleep, 0.05))
        sleep = scheduler.tick()
    assert time.time() >= fire_at.timestamp()
    assert len(sent(app)) == 200
    assert {f.state for i in range(200) for f in store.history(f"b{i:03d}")} == {"published"}
    scheduler.close()


def test_beat_wakes_where_a_lead_could_start_to_count_the_burst(app: Celery) -> None:
    app.conf.update(cronstore_claim_ahead=0.1, cronstore_lease=4.0)  # lead at most 1 s
    scheduler, store = started(app)
    fire_at = datetime.now(UTC) + timedelta(seconds=3)
    store.add("far", task="x.do", timer=instant(fire_at))
    before = time.time()
    sleep = scheduler.tick()
    after = time.time()
    # it wakes where the lead's bound (1 s) begins, not claim_ahead (0.1 s) before the fire
    assert fire_at.timestamp() - after - 1.0 <= sleep <= fire_at.timestamp() - before - 1.0
    assert held_of(scheduler).counted is None  # nothing counted from that far
    time.sleep(sleep)
    scheduler.tick()
    assert held_of(scheduler).counted == (fire_at, 1)
    scheduler.close()


@pytest.mark.parametrize("acks_late", [True, False])
def test_a_burst_s_fires_are_published_back_to_back_and_marked_together(
    app: Celery, acks_late: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While held fires follow closely, beat neither looks at the database between them
    nor marks each tick's fires on its own: one mark for the burst, and each fire's
    ``published_at`` still the moment it went (to 10 ms). A plain task's fires too: each
    was recorded ``sending`` before it went, so a crash before the mark sends none again."""
    app.task(name="x.late", shared=False, acks_late=True)(_noop)
    app.conf.update(cronstore_claim_ahead=1.0)
    scheduler, store = started(app)
    fire_at = datetime.now(UTC) + timedelta(seconds=0.6)
    spacing = timedelta(milliseconds=2)
    task = "x.late" if acks_late else "x.do"
    for i in range(40):
        store.add(f"f{i:02d}", task=task, timer=instant(fire_at + i * spacing))
    sleep = scheduler.tick()
    assert held_of(scheduler).count == 40  # the whole burst, held
    claimer = scheduler.claimer
    assert claimer is not None
    calls = {"peek": 0, "mark": 0}
    went: dict[str, float] = {}
    peek, mark = claimer.peek, claimer.mark_published
    send, batch = Dispatcher.send, Dispatcher.batch

    def counted_peek() -> Any:
        calls["peek"] += 1
        return peek()

    def counted_mark(*args: Any, **kwargs: Any) -> int:
        calls["mark"] += 1
        return mark(*args, **kwargs)

    ticks = 0
    publishing: set[int] = set()  # the ticks that published

    names: list[str] = []

    def named(self: Dispatcher, claim: Claim) -> None:
        send(self, claim)
        names.append(claim.name)

    @contextmanager
    def stamped(self: Dispatcher, size: int) -> Iterator[None]:
        # A batch is out once it is flushed to the broker: when its block ends.
        names.clear()
        with batch(self, size):
            yield
        went.update((name, time.time()) for name in names)
        publishing.add(ticks)

    claimer.peek = counted_peek  # type: ignore[method-assign]
    claimer.mark_published = counted_mark  # type: ignore[method-assign]
    monkeypatch.setattr(Dispatcher, "send", named)
    monkeypatch.setattr(Dispatcher, "batch", stamped)
    while held_of(scheduler).count:
        time.sleep(sleep)
        sleep = scheduler.tick()
        ticks += 1
    assert len(went) == 40
    assert calls["mark"] == 1 < len(publishing), (calls, publishing)
    assert calls["peek"] <= 2 < ticks, (calls, ticks)
    fires = {name: store.history(name)[0] for name in went}
    assert {f.state for f in fires.values()} == {"published"}
    stamps = {name: fire.published_at for name, fire in fires.items()}
    for name, moment in went.items():
        published = stamps[name]
        assert published is not None
        assert abs(published.timestamp() - moment) < 0.1, name
        if acks_late:  # marked together: each keeps when it went, relative to the first
            first = stamps["f00"]
            assert first is not None
            kept = (published - first).total_seconds()
            assert abs(kept - (moment - went["f00"])) <= 0.011, (name, kept)
    assert len(sent(app)) == 40
    scheduler.close()


def test_a_burst_holds_the_chores_back_at_most_a_period(app: Celery) -> None:
    """Back-to-back publishing skips the chores while a held fire is near, but not once
    they are a whole heartbeat period late (the heartbeat must not go stale)."""
    from celery_cronstore.beat.chores import HEARTBEAT_EVERY

    scheduler, _ = started(app)
    loop = loop_of(scheduler)
    looked_at = datetime.now(UTC)
    # Claimed ahead for a task that is not there: due now, and dropped when it goes out.
    claim = Claim(0, "gone", "x.do", [], {}, {}, looked_at + timedelta(seconds=0.5), "t", 1)
    loop.held.hold([claim], looked_at, time.monotonic() - 1.0)  # due half a second ago
    loop.chores.next_due = time.monotonic() + 1.0
    assert loop.fires_first()
    loop.chores.next_due = time.monotonic() - HEARTBEAT_EVERY - 0.1
    assert not loop.fires_first()
    assert loop.chores.due(loop.held.wait())
    scheduler.close()
    assert sent(app) == []
