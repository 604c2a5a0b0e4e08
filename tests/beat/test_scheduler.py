"""The beat scheduler over a SQLite store, an in-memory broker and a frozen clock."""

from __future__ import annotations

import logging
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.schedules import crontab
from queues import drain
from timeline import T0

from celery_cronstore.beat.dispatch import Dispatcher
from celery_cronstore.beat.loop import FAST_RETRY, Loop
from celery_cronstore.beat.outcome import Refused
from celery_cronstore.beat.scheduler import Scheduler
from celery_cronstore.beat.send import Sender
from celery_cronstore.errors import StoreUnavailableError
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.marks import ANSWER_LOST, DISABLED_WAITING
from celery_cronstore.testing import FrozenClock


@pytest.fixture
def app(sqlite_url: str) -> Celery:
    app = Celery("t", broker="memory://", set_as_current=False)
    app.conf.update(cronstore_url=sqlite_url, cronstore_poll_interval=5.0, task_default_queue="q")
    for name in ("x.do", "x.a", "x.b", "x.c", "x.d"):  # beat sends registered tasks only
        app.task(name=name, shared=False)(_noop)
    return app


def _noop(*args: Any, **kwargs: Any) -> None:
    """The body of the test tasks (never run here: beat only sends)."""


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    """The shared SQLite store (tests/conftest.py): beat here runs on the memory broker."""
    return sqlite_store


def make(app: Celery, store: Store) -> Scheduler:
    scheduler = Scheduler(app, lazy=True)
    scheduler.store = store  # share the frozen clock
    return scheduler


def loop_of(scheduler: Scheduler) -> Loop:
    """The parts of a scheduler whose store is open."""
    assert scheduler.loop is not None
    return scheduler.loop


def sent(app: Celery) -> list[dict[str, Any]]:
    """Drain the in-memory queue 'q': one dict of headers + args per message."""
    return [{**message.headers, "args": message.payload[0]} for message in drain(app)]


def test_lazy_construction_touches_nothing(app: Celery, tmp_path: Path) -> None:
    scheduler = Scheduler(app, lazy=True)
    assert scheduler.store is None
    assert scheduler.loop is None
    assert not (tmp_path / "cronstore.sqlite").exists()
    scheduler.close()
    scheduler.close()  # beat calls close() twice on SIGTERM


def test_banner_hides_the_password(app: Celery) -> None:
    app.conf.cronstore_url = "postgresql+psycopg://beat:s3cret@db.example/app"
    info = Scheduler(app, lazy=True).info
    assert "s3cret" not in info
    assert "beat:***@db.example/app" in info


def test_tick_publishes_due_fires_with_their_ledger_task_id(
    app: Celery, store: Store, clock: FrozenClock
) -> None:
    store.add("a", task="x.do", timer="*:*:0/10", args=[1])
    scheduler = make(app, store)
    assert scheduler.tick() == pytest.approx(5.0)  # nothing due: poll interval
    clock.set(T0 + timedelta(seconds=10))
    assert scheduler.tick() == 0.0  # published; look again at once
    messages = sent(app)
    (fire,) = store.history("a")
    assert [(m["id"], m["task"], m["args"]) for m in messages] == [(fire.task_id, "x.do", [1])]
    assert messages[0]["cronstore_fire_time"] == (T0 + timedelta(seconds=10)).isoformat()
    assert fire.state == "published"
    clock.set(T0 + timedelta(seconds=17))
    assert scheduler.tick() == pytest.approx(3.0)  # sleep until the next fire at :20
    scheduler.close()


def test_broker_outage_keeps_claims_and_publishes_them_later(
    app: Celery, store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add("a", task="x.do", timer="*:*:0/10")
    scheduler = make(app, store)
    clock.set(T0 + timedelta(seconds=10))

    def refused(*args: Any, **kwargs: Any) -> None:
        raise Refused("broker down")  # the broker took nothing (say, Redis refused writes)

    monkeypatch.setattr(Dispatcher, "send", refused)
    assert scheduler.tick() > 0  # backs off
    assert store.history("a")[0].state == "claimed"  # back from sending: it did not go
    monkeypatch.undo()
    scheduler.tick()
    assert [m["id"] for m in sent(app)] == [store.history("a")[0].task_id]
    assert store.history("a")[0].state == "published"
    assert store.history("a")[0].reason is None


def test_fires_due_now_go_without_a_second_write_and_wait_claimed_through_an_outage(
    app: Celery, store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain task's fire claimed when due is recorded ``sending`` by its claim: it goes
    with no ``sending`` write of its own. When the broker takes nothing, every fire of the
    batch, in the failed chunk or after it, goes back to ``claimed``; the retry re-checks
    them, so a task disabled during the outage sends nothing."""
    names = ("x.a", "x.b", "x.c", "x.d", "x.do")
    for name in names:
        store.add(name, task=name, timer="*:*:0/10")
    scheduler = make(app, store)
    writes: list[int] = []
    real = Claimer.mark_sending

    def counted(self: Claimer, claims: Any, **kw: Any) -> Any:
        writes.append(len(claims))
        return real(self, claims, **kw)

    monkeypatch.setattr(Claimer, "mark_sending", counted)
    monkeypatch.setattr("celery_cronstore.beat.send.PUBLISH_CHUNK", 2)  # three chunks
    clock.set(T0 + timedelta(seconds=10))
    assert scheduler.tick() == 0.0
    assert len(sent(app)) == 5
    assert writes == []  # the claim wrote ``sending``: no second write before the send
    assert {store.history(n)[0].state for n in names} == {"published"}

    def refused(*args: Any, **kwargs: Any) -> None:
        raise Refused("broker down")  # the broker took nothing

    with monkeypatch.context() as outage:
        outage.setattr(Dispatcher, "send", refused)
        clock.set(T0 + timedelta(seconds=20))
        assert scheduler.tick() > 0  # backs off
        assert {store.history(n)[0].state for n in names} == {"claimed"}
        store.disable("x.c")
    scheduler.tick()
    assert sorted(m["task"] for m in sent(app)) == ["x.a", "x.b", "x.d", "x.do"]
    assert store.history("x.c")[0].state == "dropped"
    assert writes == [2, 2]  # the retry's re-check, a chunk each: x.c's fire is not sent
    scheduler.close()


def test_a_disable_committed_after_the_claim_stops_a_fire_its_claim_recorded_sending(
    app: Celery, store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disable that waited for the claim's row locks commits just after the claim, with
    the fire already ``sending``: the read before the send still stops it."""
    store.add("x.a", task="x.a", timer="*:*:0/10")
    store.add("x.b", task="x.b", timer="*:*:0/10")
    scheduler = make(app, store)
    real = Claimer.claim_due

    def then_disabled(self: Claimer, *args: Any, **kw: Any) -> Any:
        result = real(self, *args, **kw)
        if result.claims:
            assert store.history("x.b")[0].state == "sending"
            store.disable("x.b")
        return result

    monkeypatch.setattr(Claimer, "claim_due", then_disabled)
    clock.set(T0 + timedelta(seconds=10))
    scheduler.tick()
    assert [m["task"] for m in sent(app)] == ["x.a"]
    assert (store.history("x.b")[0].state, store.history("x.b")[0].reason) == (
        "dropped",
        DISABLED_WAITING,
    )
    scheduler.close()


def test_a_sigterm_during_a_claim_hands_its_fires_back_never_leaves_them_sending(
    app: Celery, store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim records its due plain fires ``sending``: a SIGTERM that lands during the
    claim waits for it, the send then hands the fires back (``claimed``, their lease run
    out, for the next beat to send at once) and beat stops. Before, it stopped beat at
    once, which would leave them ``sending``: never sent by anyone."""
    for name in ("x.a", "x.b"):
        store.add(name, task=name, timer="*:*:0/10")
    scheduler = make(app, store)
    scheduler.tick()
    stop = loop_of(scheduler).sender.stop
    real = Claimer.claim_due

    def signalled(self: Claimer, *args: Any, **kw: Any) -> Any:
        result = real(self, *args, **kw)
        stop._handle(signal.SIGTERM, None)  # what the signal calls, as the claim commits
        return result

    monkeypatch.setattr(Claimer, "claim_due", signalled)
    clock.set(T0 + timedelta(seconds=10))
    with pytest.raises(SystemExit):
        scheduler.tick()
    scheduler.close()
    assert sent(app) == []
    assert {store.history(n)[0].state for n in ("x.a", "x.b")} == {"claimed"}
    taken = Claimer(store, "next", lease=5).reclaim_expired()
    assert sorted(c.name for c in taken) == ["x.a", "x.b"]


def test_an_error_between_the_claim_and_the_send_leaves_the_fires_claimed(
    app: Celery, store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing of the batch went: its fires go back from ``sending`` to ``claimed``, so the
    beat that takes the lease over sends them (they are not recorded as maybe sent)."""
    store.add("x.a", task="x.a", timer="*:*:0/10")
    scheduler = make(app, store)
    scheduler.tick()

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug between the claim and the send")

    monkeypatch.setattr(Sender, "report", broken)
    clock.set(T0 + timedelta(seconds=10))
    with pytest.raises(RuntimeError):
        loop_of(scheduler).tick()
    assert store.history("x.a")[0].state == "claimed"
    scheduler.close()


def test_a_sigterm_during_a_claim_that_fails_stops_beat_then(
    app: Celery, store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add("x.a", task="x.a", timer="*:*:0/10")
    scheduler = make(app, store)
    scheduler.tick()
    stop = loop_of(scheduler).sender.stop

    def signalled_then_lost(self: Claimer, *args: Any, **kw: Any) -> Any:
        stop._handle(signal.SIGTERM, None)
        raise StoreUnavailableError("sqlite:///cronstore.sqlite", "the database went away")

    monkeypatch.setattr(Claimer, "claim_due", signalled_then_lost)
    clock.set(T0 + timedelta(seconds=10))
    with pytest.raises(SystemExit):
        scheduler.tick()
    scheduler.close()


def test_a_fire_whose_send_broke_off_is_never_sent_again(
    app: Celery, store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that breaks while a plain task's message is handed over leaves it
    unknown whether the broker has it: recorded published with the reason, not resent."""
    store.add("a", task="x.do", timer="*:*:0/10")
    scheduler = make(app, store)
    clock.set(T0 + timedelta(seconds=10))

    def broke_off(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("connection reset by peer")

    monkeypatch.setattr(Dispatcher, "send", broke_off)
    assert scheduler.tick() > 0  # backs off
    (fire,) = store.history("a")
    assert fire.state == "published"
    assert fire.reason == ANSWER_LOST
    monkeypatch.undo()
    clock.set(T0 + timedelta(seconds=11))
    scheduler.tick()
    assert sent(app) == []  # at most once: nothing sent for it again
    scheduler.close()


def test_database_outage_backs_off_and_publishes_nothing(app: Celery, tmp_path: Path) -> None:
    app.conf.cronstore_url = f"sqlite:///{tmp_path / 'missing-dir' / 'x.sqlite'}"
    scheduler = Scheduler(app, lazy=True)
    first, second = scheduler.tick(), scheduler.tick()
    # Retried quickly at first (a failover is over in a second or two), never an exception.
    assert first == second == FAST_RETRY
    assert sent(app) == []


def test_beat_schedule_is_synced_and_stale_entries_removed(app: Celery, store: Store) -> None:
    app.conf.timezone = "Europe/Berlin"
    app.conf.beat_schedule = {
        "every-30s": {"task": "x.a", "schedule": 30.0, "args": (1,)},
        "nightly": {"task": "x.b", "schedule": crontab(minute="15", hour="3")},
        "calendar": {"task": "x.c", "schedule": "Mon *-*-* 09:00"},
    }
    store.add("api-made", task="x.d", timer="hourly")
    make(app, store).tick()
    rows = {t.name: t for t in store.list()}
    assert (rows["every-30s"].timer, rows["every-30s"].args) == ("every 30s", [1])
    assert (rows["nightly"].timer_kind, rows["nightly"].tz) == ("cron", "Europe/Berlin")
    assert rows["calendar"].timer_kind == "calendar"
    assert {t.source for t in rows.values()} == {"config", "api"}
    app.conf.beat_schedule = {"every-30s": {"task": "x.a", "schedule": 60.0}}
    make(app, store).tick()
    assert sorted(t.name for t in store.list()) == ["api-made", "every-30s"]
    assert store.get("every-30s").timer == "every 1m"


def test_beat_schedule_entries_set_their_policies(
    app: Celery, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    app.conf.beat_schedule = {
        "again": {
            "task": "x.a",
            "schedule": 60.0,
            "cronstore": {"abandon_policy": "rerun", "overlap_policy": "skip"},
        },
        "plain": {"task": "x.b", "schedule": 60.0},
        "bad-value": {"task": "x.c", "schedule": 60.0, "cronstore": {"abandon_policy": "x"}},
        "bad-key": {"task": "x.d", "schedule": 60.0, "cronstore": {"abandon": "rerun"}},
    }
    make(app, store).tick()
    again, plain = store.get("again"), store.get("plain")
    assert (again.abandon_policy, again.overlap_policy) == ("rerun", "skip")
    assert (plain.abandon_policy, plain.overlap_policy) == ("leave", "allow")
    assert sorted(t.name for t in store.list()) == ["again", "plain"]
    assert "abandon_policy must be one of ('leave', 'rerun'), got 'x'" in caplog.text
    assert "unknown 'cronstore' key(s) abandon (known: " in caplog.text
    # The entry describes the task: a policy removed from it goes back to its default.
    app.conf.beat_schedule = {"again": {"task": "x.a", "schedule": 60.0}}
    make(app, store).tick()
    assert store.get("again").abandon_policy == "leave"


def test_unknown_schema_version_stops_beat_with_the_fix(app: Celery, store: Store) -> None:
    with store.begin() as conn:
        conn.exec_driver_sql("UPDATE cronstore_alembic_version SET version_num = 'zzzz'")
    app.conf.cronstore_auto_migrate_sqlite = False
    with pytest.raises(SystemExit, match="does not know"):
        make(app, store).tick()


def test_missing_schema_names_the_command(app: Celery, tmp_path: Path) -> None:
    app.conf.cronstore_url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    app.conf.cronstore_auto_migrate_sqlite = False
    with pytest.raises(SystemExit, match="cronstore migrate"):
        Scheduler(app, lazy=True).tick()


def test_housekeeping_publishes_a_silent_worker_s_fire_again_when_it_may(
    app: Celery, store: Store, clock: FrozenClock
) -> None:
    """Abandon policy rerun through beat's housekeeping: the CronTask's fire goes out again
    in the same round under its task id; the plain task (no guard, no acks_late) is left."""
    from celery_cronstore import CronTask
    from celery_cronstore.store import runs

    app.task(name="x.guarded", base=CronTask, shared=False)(_noop)
    store.add("guarded", task="x.guarded", timer="every 1h", abandon_policy="rerun")
    store.add("plain", task="x.do", timer="every 1h", abandon_policy="rerun")
    scheduler = make(app, store)
    clock.set(T0 + timedelta(hours=1))
    scheduler.tick()
    first = {m["cronstore_name"]: m["id"] for m in sent(app)}
    assert sorted(first) == ["guarded", "plain"]
    assert runs.start_fire(store.db, first["guarded"], node="w1", abandon_after=30).started
    assert runs.record_start(store.db, first["plain"], node="w1", abandon_after=30) == 0
    clock.set(T0 + timedelta(hours=1, seconds=31))  # both workers went silent
    loop_of(scheduler).chores.next_due = 0.0
    scheduler.tick()
    assert [(m["id"], m["cronstore_name"]) for m in sent(app)] == [(first["guarded"], "guarded")]
    guarded, plain = store.fire_by_task_id(first["guarded"]), store.fire_by_task_id(first["plain"])
    assert guarded is not None
    assert plain is not None
    assert (guarded.state, guarded.reruns, guarded.attempts) == ("published", 1, 2)
    assert (plain.state, plain.reruns) == ("abandoned", 0)
    assert plain.reason is not None
    assert plain.reason.endswith("publishing it again could run it twice")
    scheduler.close()


def test_a_deadlock_lost_is_tried_again_at_once_not_an_outage(
    app: Celery,
    store: Store,
    clock: FrozenClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """MariaDB kills one of two beats' crossing transactions (1213); the mark of a sent
    fire is one of them. Beat keeps what it did, logs no outage, and marks it next tick."""
    store.add("a", task="x.do", timer="*:*:0/10")
    scheduler = make(app, store)
    clock.set(T0 + timedelta(seconds=10))
    real = Claimer.mark_published
    killed: list[int] = []

    def deadlocked(self: Claimer, *args: Any, **kwargs: Any) -> Any:
        if not killed:
            killed.append(1)
            raise StoreUnavailableError(
                "db", "(1213, 'Deadlock found when trying to get lock; try restarting transaction')"
            )
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Claimer, "mark_published", deadlocked)
    with caplog.at_level(logging.INFO, logger="celery.beat"):
        assert scheduler.tick() == 0.0  # again at once: no back-off
        assert killed
        (fire,) = store.history("a")
        assert fire.state == "sending"  # sent, its mark lost with the deadlock
        scheduler.tick()
    assert [m["id"] for m in sent(app)] == [fire.task_id]  # sent once
    assert store.history("a")[0].state == "published"
    assert [r.levelname for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert any("lost a deadlock with another beat's" in r.getMessage() for r in caplog.records)
    scheduler.close()
