"""Rows broken by raw SQL: one task goes in error (logged once), every other task fires.

Each case breaks one row the way an admin tool or a hand-written ``UPDATE`` could, on
SQLite, PostgreSQL and MariaDB, and runs the real scheduler over it (in-memory broker,
frozen clock): the error reason is visible through ``store.get``/``status``, beat logs it
once, the healthy task keeps firing in the same tick, and fixing the row makes it fire.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from queues import drain
from timeline import at

from celery_cronstore.beat.scheduler import Scheduler
from celery_cronstore.store import Claimer, Store
from celery_cronstore.testing import FrozenClock


@pytest.fixture
def sqlite_store(tmp_path: Path, clock: FrozenClock) -> Iterator[Store]:
    """A SQLite store only: SQLite keeps any text in any column (the others refuse it)."""
    s = Store(f"sqlite:///{tmp_path / 'cronstore.sqlite'}", clock=clock)
    s.upgrade()
    yield s
    s.close()


def _noop(*args: Any, **kwargs: Any) -> None:
    """Body of the test tasks (beat only sends them)."""


def make_app(db_url: str, *, tasks: tuple[str, ...] = ("t.ok",)) -> Celery:
    app = Celery("bad-rows", broker="memory://", set_as_current=False)
    app.conf.update(cronstore_url=db_url, task_default_queue="q", cronstore_poll_interval=5.0)
    for name in tasks:
        app.task(name=name, shared=False)(_noop)
    return app


def beat(app: Celery, store: Store) -> Scheduler:
    scheduler = Scheduler(app, lazy=True)
    scheduler.store = store  # shares the frozen clock
    return scheduler


def sent(app: Celery) -> list[str]:
    """Drain queue 'q'; return the cronstore name of every message, in order."""
    names = []
    for message in drain(app):
        names.append(message.headers["cronstore_name"])
        assert message.content_type == "application/json"
    return names


def raw(store: Store, sql: str) -> None:
    """Run one statement as written (no bind parameters: ``:0`` is timer text here)."""
    with store.begin() as conn:
        conn.exec_driver_sql(sql)


def error_lines(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and f"periodic task {name!r} is in error" in r.getMessage()
    ]


# (case id, SET clause breaking the row, fragment of the reason, SET clause fixing it)
BREAKAGES = [
    ("timer", "timer = '*-*-* 99:00'", "99", "timer = '*:*:0/10'"),
    ("timer-kind", "timer_kind = 'sundial'", "unknown timer kind", "timer_kind = 'calendar'"),
    ("zone", "tz = 'Mars/Olympus'", "Mars/Olympus", "tz = 'UTC'"),
    ("args-garbage", "args = '[1,'", "args is not valid JSON", "args = '[1]'"),
    ("args-not-list", "args = '{\"a\": 1}'", "args must be a JSON array", "args = '[]'"),
    ("kwargs-garbage", "kwargs = 'nope'", "kwargs is not valid JSON", "kwargs = '{}'"),
    ("kwargs-not-object", "kwargs = '[1]'", "kwargs must be a JSON object", "kwargs = '{}'"),
    ("options-not-object", "options = '\"q\"'", "options must be a JSON object", "options = '{}'"),
    (
        "args-too-deep",
        "args = '" + "[" * 5000 + "]" * 5000 + "'",
        "nested too deeply",
        "args = '[]'",
    ),
    (
        "serializer-pickle",
        'options = \'{"serializer": "pickle"}\'',
        "serializer 'pickle' is refused",
        'options = \'{"serializer": "json"}\'',
    ),
    (
        "serializer-yaml",
        'options = \'{"serializer": "yaml"}\'',
        "serializer 'yaml' is refused",
        "options = '{}'",
    ),
    (
        "header-overrides-task-name",
        'options = \'{"headers": {"task": "os.system"}}\'',
        "headers may not set",
        'options = \'{"headers": {"x-team": "mail"}}\'',
    ),
    (
        "unknown-option-link",
        'options = \'{"link": {"task": "os.system"}}\'',
        "unknown Celery option(s) link",
        "options = '{}'",
    ),
    ("bad-priority", 'options = \'{"priority": "high"}\'', "priority", "options = '{}'"),
    ("unregistered", "task = 't.nowhere'", "cronstore_require_registered", "task = 't.ok'"),
]


@pytest.mark.parametrize(
    ("breakage", "reason", "fix"),
    [pytest.param(b, r, f, id=case) for case, b, r, f in BREAKAGES],
)
def test_a_broken_row_is_in_error_logged_once_and_fires_again_when_fixed(
    db_url: str,
    store: Store,
    clock: FrozenClock,
    caplog: pytest.LogCaptureFixture,
    breakage: str,
    reason: str,
    fix: str,
) -> None:
    caplog.set_level(logging.INFO, logger="celery.beat")
    app = make_app(db_url)
    store.add("good", task="t.ok", timer="*:*:0/10")
    store.add("bad", task="t.ok", timer="*:*:0/10")
    raw(store, f"UPDATE cronstore_periodic_task SET {breakage} WHERE name = 'bad'")
    scheduler = beat(app, store)

    clock.set(at(10))
    scheduler.tick()
    assert sent(app) == ["good"], "the healthy task fires in the same tick"
    error = store.get("bad").error
    assert error is not None
    assert reason in error
    assert store.status("bad").error == error
    assert store.get("bad").next_run is None
    assert len(error_lines(caplog, "bad")) == 1

    clock.set(at(20))
    scheduler.tick()
    assert sent(app) == ["good"]
    assert len(error_lines(caplog, "bad")) == 1, "logged once, not every tick"

    # Fixed by raw SQL (the re-plan trigger notices), the row is planned, then fires.
    raw(store, f"UPDATE cronstore_periodic_task SET {fix} WHERE name = 'bad'")
    clock.set(at(25))
    scheduler.tick()
    assert store.get("bad").error is None
    assert store.get("bad").next_run == at(30)
    clock.set(at(30))
    scheduler.tick()
    assert sorted(sent(app)) == ["bad", "good"]
    scheduler.close()


def test_store_update_is_a_fix_too(db_url: str, store: Store, clock: FrozenClock) -> None:
    app = make_app(db_url)
    store.add("bad", task="t.ok", timer="*:*:0/10", args=[1])
    raw(store, "UPDATE cronstore_periodic_task SET args = 'oops' WHERE name = 'bad'")
    scheduler = beat(app, store)
    clock.set(at(10))
    scheduler.tick()
    assert "args is not valid JSON" in (store.get("bad").error or "")
    fixed = store.update("bad", args=[2])
    assert (fixed.error, fixed.args, fixed.next_run) == (None, [2], at(20))
    clock.set(at(20))
    scheduler.tick()
    assert sent(app) == ["bad"]


def test_store_update_fixes_a_timer_that_does_not_parse(store: Store, clock: FrozenClock) -> None:
    store.add("bad", task="t.ok", timer="hourly")
    raw(store, "UPDATE cronstore_periodic_task SET timer = 'whenever' WHERE name = 'bad'")
    clock.set(at(1))
    Claimer(store, "b1").claim_due()  # planned: puts it in error
    assert "whenever" in (store.get("bad").error or "")
    fixed = store.update("bad", timer="*:*:0/10")
    assert (fixed.error, fixed.timer, fixed.next_run) == (None, "*-*-* *:*:00/10", at(10))


def test_clearing_the_error_column_by_hand_retries_the_row(
    db_url: str, store: Store, clock: FrozenClock
) -> None:
    app = make_app(db_url)
    store.add("late", task="t.later", timer="*:*:0/10")
    scheduler = beat(app, store)
    clock.set(at(10))
    scheduler.tick()
    assert "not registered" in (store.get("late").error or "")
    app.task(name="t.later", shared=False)(_noop)  # deployed meanwhile
    raw(store, "UPDATE cronstore_periodic_task SET error = NULL WHERE name = 'late'")
    clock.set(at(15))
    scheduler.tick()
    clock.set(at(20))
    scheduler.tick()
    assert sent(app) == ["late"]


def test_a_restarted_beat_checks_tasks_in_error_again(
    db_url: str, store: Store, clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    store.add("late", task="t.later", timer="*:*:0/10")
    store.add("evil", task="os.system", timer="*:*:0/10")
    first = make_app(db_url)
    first.conf.cronstore_task_allowlist = ["t."]
    clock.set(at(10))
    beat(first, store).tick()
    assert "not registered in beat's app" in (store.get("late").error or "")
    assert "not in cronstore_task_allowlist" in (store.get("evil").error or "")

    # The next deploy registers t.later; os.system stays refused.
    second = make_app(db_url, tasks=("t.ok", "t.later", "os.system"))
    second.conf.cronstore_task_allowlist = ["t."]
    scheduler = beat(second, store)
    caplog.set_level(logging.INFO, logger="celery.beat")
    clock.set(at(12))
    scheduler.tick()  # start: both re-planned, checked again
    assert store.get("late").error is None
    assert "not in cronstore_task_allowlist" in (store.get("evil").error or "")
    assert any("checking 2 periodic task(s) in error again" in m for m in caplog.messages)
    clock.set(at(20))
    scheduler.tick()
    assert sent(second) == ["late"]


def test_a_starting_beat_plans_again_a_next_run_set_by_hand(
    db_url: str, store: Store, clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    """An enabled row left with ``next_run`` NULL, or years past its timer's next fire, by
    a hand edit fires again after a beat start; rows as beat left them are not touched."""
    for name in ("nulled", "far", "ok"):
        store.add(name, task="t.ok", timer="*:*:0/10")
    store.add("yearly", task="t.ok", timer="*-01-01 00:00:00")  # rightly a year ahead
    store.add("done", task="t.ok", timer=at(5).isoformat())  # a one-off, fired below
    app = make_app(db_url)
    clock.set(at(5))
    beat(app, store).tick()
    assert sent(app) == ["done"]
    raw(store, "UPDATE cronstore_periodic_task SET next_run = NULL WHERE name = 'nulled'")
    raw(store, "UPDATE cronstore_periodic_task SET next_run = '9999-12-31 00:00:00' "
               "WHERE name = 'far'")  # fmt: skip
    untouched = {n: store.get(n).version for n in ("yearly", "done")}

    caplog.set_level(logging.WARNING, logger="celery.beat")
    scheduler = beat(app, store)  # a restart
    clock.set(at(10))
    scheduler.tick()  # both planned from now on, as an enable would
    assert sent(app) == ["ok"]
    assert {n: store.get(n).version for n in untouched} == untouched
    assert store.get("nulled").next_run == store.get("far").next_run == at(20)
    clock.set(at(20))
    scheduler.tick()
    assert sorted(sent(app)) == ["far", "nulled", "ok"]
    warned = [m for m in caplog.messages if "planning it again" in m]
    assert len(warned) == 2
    assert any("'nulled': no next run although its timer fires" in m for m in warned)
    assert any("'far': next run 9999-12-31" in m for m in warned)


def test_unregistered_tasks_are_sent_by_name_when_not_required(
    db_url: str, store: Store, clock: FrozenClock
) -> None:
    app = make_app(db_url)
    app.conf.cronstore_require_registered = False
    store.add("remote", task="other_service.poll", timer="*:*:0/10")
    clock.set(at(10))
    beat(app, store).tick()
    assert sent(app) == ["remote"]
    assert store.get("remote").error is None


def test_a_row_edited_after_its_claim_is_not_republished(store: Store, clock: FrozenClock) -> None:
    store.add("a", task="t.ok", timer="*:*:0/10")
    clock.set(at(10))
    claimer = Claimer(store, "b1", lease=30, allowlist=("t.",))
    assert len(claimer.claim_due().claims) == 1  # "crashes" before publishing
    raw(store, "UPDATE cronstore_periodic_task SET task = 'os.system' WHERE name = 'a'")
    clock.set(at(41))
    assert Claimer(store, "b2", lease=30, allowlist=("t.",)).reclaim_expired() == []
    (row,) = store.history("a")
    assert row.state == "dropped"
    assert "not re-published" in (row.reason or "")
    assert "allowlist" in (row.reason or "")


def test_run_now_refuses_unsafe_options(store: Store) -> None:
    store.add("a", task="t.ok", timer="hourly")
    raw(store, 'UPDATE cronstore_periodic_task SET options = \'{"serializer": "pickle"}\'')
    with pytest.raises(ValueError, match="serializer 'pickle' is refused"):
        Claimer(store, "cli").claim_now("a")
    assert store.history("a") == []


def test_text_in_a_number_column_is_contained(sqlite_store: Store, clock: FrozenClock) -> None:
    store = sqlite_store
    app = make_app(str(store.engine.url))
    store.add("good", task="t.ok", timer="*:*:0/10")
    store.add("bad", task="t.ok", timer="*:*:0/10")
    raw(store, "UPDATE cronstore_periodic_task SET misfire_limit = 'lots' WHERE name = 'bad'")
    clock.set(at(10))
    beat(app, store).tick()
    assert sent(app) == ["good"]
    assert "cannot plan this row (TypeError" in (store.get("bad").error or "")


def test_text_that_is_no_time_is_replanned(sqlite_store: Store, clock: FrozenClock) -> None:
    store = sqlite_store
    app = make_app(str(store.engine.url))
    store.add("good", task="t.ok", timer="*:*:0/10")
    store.add("bad", task="t.ok", timer="*:*:0/10")
    raw(store, "UPDATE cronstore_periodic_task SET next_run = '0000-garbage' WHERE name = 'bad'")
    assert {t.name for t in store.list()} == {"good", "bad"}, "the table stays readable"
    scheduler = beat(app, store)
    clock.set(at(10))
    scheduler.tick()  # 'bad' reads as the epoch: planned again, not fired
    assert sent(app) == ["good"]
    assert store.get("bad").next_run == at(20)
    clock.set(at(20))
    scheduler.tick()
    assert sorted(sent(app)) == ["bad", "good"]
