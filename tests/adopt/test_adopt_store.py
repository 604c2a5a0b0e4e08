"""Store.adopt: a plan written in one transaction, on every backend."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from timeline import T0

from celery_cronstore.adopt.plan import make_plan
from celery_cronstore.adopt.records import Incoming
from celery_cronstore.errors import DuplicateTaskError
from celery_cronstore.store import Claimer, Store


def incoming(name: str, timer: str = "0 * * * *", **more: Any) -> Incoming:
    last = more.pop("last_run_at", None)
    count = more.pop("total_run_count", None)
    values = {"task": "app.report", "timer": timer, "tz": "UTC", **more}
    return Incoming(name, f"row {name}", values, last_run_at=last, total_run_count=count)


def adopt(store: Store, reads: list[Incoming], **options: Any) -> Any:
    current = {t.name: t for t in store.list()}
    plan = make_plan(reads, current, source="dcb", default_tz="UTC", **options)
    return plan, store.adopt(plan, source="dcb")


def test_imported_tasks_carry_the_old_last_run_and_fire_next_after_it(store: Store) -> None:
    ran = T0 - timedelta(minutes=59, seconds=59, microseconds=600_000)  # 11:00:00.4
    _, done = adopt(
        store,
        [
            incoming("hourly", last_run_at=ran, total_run_count=17, args=[1], enabled=True),
            incoming("fresh", "0 9 * * *"),
            incoming("off", enabled=False),
        ],
    )
    assert done.created == ("hourly", "fresh", "off")
    hourly = store.get("hourly")
    assert (hourly.source, hourly.args, hourly.total_run_count) == ("dcb", [1], 17)
    assert hourly.last_fire == ran
    assert hourly.next_run == T0  # 12:00, the fire after 11:00:00.4: due now
    assert store.get("fresh").next_run == T0.replace(day=6, hour=9)
    assert store.get("off").next_run is None
    # beat claims the due fire once; nothing at or before the old run
    claimer = Claimer(store, "beat-a")
    claims = claimer.claim_due().claims
    assert [(c.name, c.fire_time) for c in claims] == [("hourly", T0)]


def test_a_rerun_changes_nothing_and_an_edit_in_the_source_updates(store: Store) -> None:
    reads = [incoming("hourly", last_run_at=T0 - timedelta(hours=3)), incoming("daily", "@daily")]
    adopt(store, reads)
    before = {t.name: t for t in store.list()}
    plan, done = adopt(store, reads)
    assert plan.counts()["unchanged"] == 2
    assert not plan.writes
    assert done.created == done.updated == ()
    assert {t.name: t for t in store.list()} == before
    plan, done = adopt(store, [incoming("hourly", "*/30 * * * *"), reads[1]])
    assert done.updated == ("hourly",)
    assert store.get("hourly").timer == "*/30 * * * *"
    assert store.get("hourly").version == before["hourly"].version + 1


def test_nothing_is_half_imported(store: Store) -> None:
    """A create that fails (the name taken meanwhile) rolls back the whole plan."""
    current = {t.name: t for t in store.list()}
    plan = make_plan(
        [incoming("first"), incoming("taken"), incoming("third")],
        current,
        source="dcb",
        default_tz="UTC",
    )
    store.add("taken", task="app.other", timer="@daily")  # after the plan was made
    with pytest.raises(DuplicateTaskError, match="run the import again"):
        store.adopt(plan, source="dcb")
    assert [t.name for t in store.list()] == ["taken"]


def test_prune_disables_then_removes_with_the_ledger(store: Store) -> None:
    adopt(store, [incoming("keep"), incoming("gone", last_run_at=T0 - timedelta(hours=2))])
    store.add("mine", task="app.mine", timer="@daily")
    _plan, done = adopt(store, [incoming("keep")], prune=True)
    assert done.removed == ("gone",)
    assert sorted(t.name for t in store.list()) == ["keep", "mine"]


def test_a_rerun_carries_over_a_run_the_old_scheduler_made_since(store: Store) -> None:
    """Imported while the old beat still ran: the rerun after it stopped moves the last
    fire forward, and the fire the old one sent is not planned here again."""
    adopt(store, [incoming("hourly", last_run_at=T0 - timedelta(hours=2))])
    assert store.get("hourly").next_run == T0 - timedelta(hours=1)  # due: caught up
    plan, done = adopt(store, [incoming("hourly", last_run_at=T0 - timedelta(seconds=3595))])
    (change,) = plan.changes
    assert change.action == "update"
    assert list(change.fields) == ["last_fire"]
    assert done.updated == ("hourly",)
    task = store.get("hourly")
    assert task.last_fire == T0 - timedelta(seconds=3595)
    assert task.next_run == T0
    again, _ = adopt(store, [incoming("hourly", last_run_at=T0 - timedelta(hours=2))])
    assert again.counts()["unchanged"] == 1, "an older run never moves the last fire back"


def test_a_task_django_celery_beat_still_fires_is_held_until_it_lets_go(
    tmp_path: Any, clock: Any
) -> None:
    """Both in one database: while django-celery-beat has the task enabled, beat plans it
    and records each fire dropped with the reason; once disabled there, the next is sent."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "shared.sqlite"
    peers = Path(__file__).parent / "peers" / "make_dcb.py"

    def dcb(tasks: list[dict[str, Any]], *extra: str) -> None:
        env = {**os.environ, "DCB_DATABASE_URL": f"sqlite:///{path}"}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        done = subprocess.run(
            [sys.executable, str(peers), *extra],
            input=json.dumps({"tasks": tasks}),
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    hourly = {"crontab": {"minute": "0", "hour": "*"}}
    dcb([{"name": "report", "task": "app.report", "schedule": hourly}])
    store = Store(f"sqlite:///{path}", clock=clock)
    store.upgrade()
    try:
        from celery_cronstore.adopt.records import ReadContext
        from celery_cronstore.adopt.sources import django_celery_beat
        from celery_cronstore.store.peers import peer_warnings

        reads = django_celery_beat.read(f"sqlite:///{path}", ReadContext())
        plan = make_plan(reads, {}, source="dcb", default_tz="UTC")
        store.adopt(plan, source="dcb")
        (warning,) = peer_warnings(store.db, "django-celery-beat", ["report"])
        assert "still enabled in django-celery-beat (report)" in warning
        claimer = Claimer(store, "beat-a")
        clock.advance(timedelta(hours=1))
        assert claimer.claim_due().claims == []
        (held,) = store.history("report")
        assert held.state == "dropped"
        assert "django-celery-beat still has this task enabled" in (held.reason or "")
        assert store.get("report").error is None  # planned on, not put in error
        dcb([], "--disable", "report")
        clock.advance(timedelta(hours=1))
        claims = claimer.claim_due().claims
        assert [c.name for c in claims] == ["report"]
    finally:
        store.close()
