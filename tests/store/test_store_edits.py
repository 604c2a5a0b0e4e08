"""Edits through the store, for real on SQLite, PostgreSQL and MariaDB: what an edit
writes to the planned fires (the policy decides, the store writes it) and optimistic
concurrency (two editors load the same version; the first save wins)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from timeline import T0

from celery_cronstore.errors import EditConflictError, StoreError
from celery_cronstore.store import Store
from celery_cronstore.testing import FrozenClock

MINUTE = timedelta(minutes=1)


def test_disabling_records_the_unclaimed_due_fires_missed(store: Store, clock: FrozenClock) -> None:
    store.add("tick", task="app.tick", timer="every 1m")
    assert store.get("tick").next_run == T0 + MINUTE
    clock.advance(minutes=3, seconds=30)  # T0+1m, +2m and +3m are due, none claimed
    disabled = store.disable("tick")
    assert (disabled.enabled, disabled.next_run, disabled.last_fire) == (
        False,
        None,
        T0 + 3 * MINUTE,
    )
    (missed,) = store.history("tick")
    assert (missed.state, missed.fire_time, missed.fire_until, missed.fire_count) == (
        "missed",
        T0 + MINUTE,
        T0 + 3 * MINUTE,
        3,
    )
    assert str(missed.reason).endswith("the task was disabled before beat claimed them")
    enabled = store.enable("tick")
    assert enabled.next_run == T0 + 4 * MINUTE
    assert len(store.history("tick")) == 1, "enabling a disabled task records nothing"


def test_an_edit_of_the_definition_keeps_the_plan(store: Store, clock: FrozenClock) -> None:
    store.add("tick", task="app.tick", timer="every 1m")
    clock.advance(minutes=3)
    edited = store.update("tick", description="now with a description", args=[1])
    assert edited.next_run == T0 + MINUTE, "still due: beat claims it by its policy"
    assert store.history("tick") == []


def test_an_edit_at_the_loaded_version_is_saved_and_bumps_it(store: Store) -> None:
    loaded = store.add("job", task="app.job", timer="every 1h")
    saved = store.update("job", expected_version=loaded.version, description="mine")
    assert (saved.description, saved.version) == ("mine", loaded.version + 1)
    with pytest.raises(EditConflictError):
        store.update("job", expected_version=loaded.version, description="stale")


def test_two_editors_of_one_version_the_first_save_wins(db_url: str, clock: FrozenClock) -> None:
    first, second = Store(db_url, clock=clock), Store(db_url, clock=clock)
    try:
        first.add("job", task="app.job", timer="every 1h", args=[0])
        seen_first, seen_second = first.get("job"), second.get("job")
        assert seen_first.version == seen_second.version
        won = first.update("job", expected_version=seen_first.version, args=[1], timer="every 2h")
        with pytest.raises(EditConflictError) as refused:
            second.update("job", expected_version=seen_second.version, args=[2], enabled=False)
        assert isinstance(refused.value, StoreError)
        message = str(refused.value)
        assert "'job'" in message
        assert "reload" in message
        assert f"version {seen_second.version} " in message
        assert f"version {won.version} now" in message
        held = second.get("job")
        assert held == won, "the refused edit wrote nothing"
        assert (held.args, held.timer, held.enabled) == ([1], "every 2h", True)
    finally:
        first.close()
        second.close()


def test_a_real_race_of_two_saves_lets_exactly_one_through(db_url: str, clock: FrozenClock) -> None:
    stores = [Store(db_url, clock=clock) for _ in range(2)]
    try:
        stores[0].add("job", task="app.job", timer="every 1h")
        version = stores[1].get("job").version
        start = threading.Barrier(2)
        outcomes: dict[int, object] = {}

        def save(i: int) -> None:
            start.wait()
            try:
                outcomes[i] = stores[i].update(
                    "job", expected_version=version, description=f"editor {i}"
                )
            except Exception as exc:
                outcomes[i] = exc

        threads = [threading.Thread(target=save, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        refused = [i for i, got in outcomes.items() if isinstance(got, EditConflictError)]
        saved = [i for i in outcomes if i not in refused]
        assert len(refused) == 1, outcomes
        assert len(saved) == 1, outcomes
        held = stores[0].get("job")
        assert held.description == f"editor {saved[0]}"
        assert held.version == version + 1
    finally:
        for s in stores:
            s.close()


def test_a_refused_edit_records_no_missed_fires(db_url: str, clock: FrozenClock) -> None:
    store = Store(db_url, clock=clock)
    try:
        loaded = store.add("tick", task="app.tick", timer="every 1m")
        store.update("tick", description="someone else's edit")
        clock.advance(minutes=2, seconds=30)
        with pytest.raises(EditConflictError):
            store.update("tick", expected_version=loaded.version, enabled=False)
        assert store.history("tick") == [], "the refused edit's transaction rolled back"
        assert store.get("tick").enabled
    finally:
        store.close()
