"""The audit trail (``cronstore_audit``) on SQLite, PostgreSQL and MariaDB.

Every write of the ``Store`` API records one entry, as the actor the window gave, in the
transaction of the edit itself: a refused or rolled-back edit leaves none. Removing an
owner's tasks records one entry per task in one statement. Entries older than the
ledger's retention are pruned with it. (The windows: tests/windows/test_web_roles.py,
tests/windows/test_cli_audit.py, tests/contrib/test_contrib_django_admin_audit.py.)
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from timeline import T0

from celery_cronstore.adopt.plan import make_plan
from celery_cronstore.adopt.records import Incoming
from celery_cronstore.errors import DuplicateTaskError, EditConflictError, TimerSyntaxError
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.audit import AuditEntry
from celery_cronstore.store.retention import PRUNE_PAUSE, Pruner
from celery_cronstore.store.schema import audit
from celery_cronstore.testing import FrozenClock


def incoming(name: str, timer: str = "every 5m") -> Incoming:
    return Incoming(name, f"row {name}", {"task": "app.x", "timer": timer, "tz": "UTC"})


def trail(store: Store) -> list[tuple[str, str, str, str]]:
    """Return (actor, window, action, task) of every entry, oldest first."""
    return [(e.actor, e.window, e.action, e.task_name) for e in reversed(store.audit_trail())]


def count(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(audit)).scalar_one())


def test_every_api_write_records_one_entry(store: Store, clock: FrozenClock) -> None:
    store.add("a", task="app.a", timer="every 1h", args=["s3cret-arg"])
    store.update("a", timer="every 2h", tz="Europe/Berlin")
    store.disable("a")
    store.enable("a")
    store.update("a", args=["other-s3cret"], description="why")
    store.remove("a")
    assert trail(store) == [
        ("api", "api", "add", "a"),
        ("api", "api", "update", "a"),
        ("api", "api", "disable", "a"),
        ("api", "api", "enable", "a"),
        ("api", "api", "update", "a"),
        ("api", "api", "remove", "a"),
    ]
    newest = store.audit_trail(limit=6)
    assert [e.action for e in newest] == ["remove", "update", "enable", "disable", "update", "add"]
    assert all(e.at == T0 for e in newest)  # the store's clock (the database's, or this one)
    edit = newest[4]
    assert edit.detail is not None
    assert "timer: every 1h -> every 2h" in edit.detail
    assert "tz: UTC -> Europe/Berlin" in edit.detail
    # Arguments may carry secrets: an entry names the field, never the value.
    assert newest[1].detail == "description changed; args changed"
    assert all("s3cret" not in (e.detail or "") for e in newest)


def test_the_actor_and_window_come_from_acting(store: Store) -> None:
    store.acting("ann", "web").add("a", task="app.a", timer="every 1h")
    store.acting("bob", "admin").disable("a")
    store.acting("carol", "cli").update("a", description="x")
    assert trail(store) == [
        ("ann", "web", "add", "a"),
        ("bob", "admin", "disable", "a"),
        ("carol", "cli", "update", "a"),
    ]
    # The store acting for someone is a view: the original still writes as "api".
    store.enable("a")
    assert trail(store)[-1] == ("api", "api", "enable", "a")
    with pytest.raises(ValueError, match="unknown audit window 'browser'"):
        store.acting("ann", "browser")
    with pytest.raises(ValueError, match="an actor needs a name"):
        store.acting("  ", "web")


def test_owner_removal_records_one_entry_per_task_in_one_statement(store: Store) -> None:
    for i in range(5):
        store.add(f"t{i}", task="app.t", timer="every 1h", owner=("tenant", "7" if i < 3 else "8"))
    by = store.acting("cleanup", "api")
    assert by.disable_owned_by("tenant", "8") == 2
    assert by.disable_owned_by("tenant", "8") == 0  # none enabled: nothing to record
    assert by.remove_owned_by("tenant", "7") == 3
    actions = [(e.action, e.task_name) for e in store.audit_trail() if e.actor == "cleanup"]
    assert sorted(actions) == [
        ("disable", "t3"),
        ("disable", "t4"),
        ("remove", "t0"),
        ("remove", "t1"),
        ("remove", "t2"),
    ]


def test_a_refused_or_failed_edit_leaves_no_entry(store: Store) -> None:
    store.add("a", task="app.a", timer="every 1h")
    store.add("b", task="app.b", timer="every 1h")
    before = count(store)
    with pytest.raises(DuplicateTaskError):
        store.add("a", task="app.a", timer="every 1h")
    with pytest.raises(DuplicateTaskError):
        store.update("b", name="a")  # a rename onto a taken name
    with pytest.raises(EditConflictError):
        store.update("a", expected_version=99, description="late")
    with pytest.raises(TimerSyntaxError):
        store.update("a", timer="*/70 * * * *")
    with pytest.raises(LookupError):
        store.remove("nope")
    assert count(store) == before


def test_the_entry_commits_with_the_edit_or_not_at_all(store: Store) -> None:
    """The entry is written in the edit's own transaction: rolled back, neither stays."""
    store.add("a", task="app.a", timer="every 1h")
    before = count(store)

    def edit_then_fail() -> None:
        with store.begin() as conn:
            store.acting("ann", "web").update_in(conn, "a", description="lost")
            raise RuntimeError("something failed after the edit")

    with pytest.raises(RuntimeError, match="after the edit"):
        edit_then_fail()
    assert store.get("a").description == ""
    assert count(store) == before


def test_run_now_and_imports_are_recorded(store: Store) -> None:
    store.add("a", task="app.a", timer="every 1h")
    claim = Claimer(store.acting("ops", "cli"), "cli@host").claim_now("a")
    run = store.audit_trail(limit=1)[0]
    assert (run.actor, run.window, run.action, run.task_name) == ("ops", "cli", "run", "a")
    assert run.detail == claim.task_id

    importer = store.acting("ops", "cli")
    for reads in ([incoming("x"), incoming("y")], [incoming("x", "every 2h"), incoming("y")]):
        current = {t.name: t for t in store.list()}
        importer.adopt(make_plan(reads, current, source="dcb", default_tz="UTC"), source="dcb")
    imported = [(e.actor, e.window, e.action, e.task_name) for e in store.audit_trail(limit=3)]
    assert imported == [
        ("ops", "import", "update", "x"),  # the second import changed x only
        ("ops", "import", "add", "y"),
        ("ops", "import", "add", "x"),
    ]
    assert "timer: every 5m -> every 2h" in (store.audit_trail(limit=1)[0].detail or "")


def test_a_failed_import_records_nothing(store: Store) -> None:
    plan = make_plan([incoming("x"), incoming("y")], {}, source="dcb", default_tz="UTC")
    store.add("y", task="app.y", timer="every 1h")  # added meanwhile: the import fails
    before = count(store)
    with pytest.raises(DuplicateTaskError):
        store.adopt(plan, source="dcb")
    assert count(store) == before
    assert [t.name for t in store.list()] == ["y"]


def test_entries_page_by_task_and_limit(store: Store) -> None:
    for i in range(5):
        store.add(f"t{i}", task="app.t", timer="every 1h")
    store.disable("t2")
    assert [e.action for e in store.audit_trail(task="t2")] == ["disable", "add"]
    first = store.audit_trail(limit=2)
    older = store.audit_trail(limit=10, before=first[-1].id)
    assert [e.task_name for e in first + older] == ["t2", "t4", "t3", "t2", "t1", "t0"]
    assert all(isinstance(e, AuditEntry) for e in older)
    with pytest.raises(ValueError, match="limit must be a whole number from 1 to 10000"):
        store.audit_trail(limit=0)


def test_pruning_bounds_the_trail_by_the_history_retention(
    store: Store, clock: FrozenClock
) -> None:
    for i in range(7):
        store.add(f"old{i}", task="app.t", timer="every 1h")
    clock.advance(days=10)
    store.add("new", task="app.t", timer="every 1h")
    # The pruner's batch is small here: a pass takes several.
    assert Pruner(store.db, batch=3).run(timedelta(days=30)) == {}
    assert count(store) == 8  # all within 30 days
    Pruner(store.db, batch=3).run(timedelta(days=7))
    assert [e.task_name for e in store.audit_trail()] == ["new"]
    # Beat's paced pruning reaches it too (a batch, then once a minute).
    clock.advance(days=10)
    store.disable("new")
    pruner = Pruner(store.db, batch=3)
    pruner.pace(timedelta(days=7), 1000.0)
    assert [e.action for e in store.audit_trail()] == ["disable"]
    assert pruner.audit_at == 1000.0 + PRUNE_PAUSE
    assert Pruner(store.db).run(None) == {}  # keep everything: nothing goes
    assert count(store) == 1


def test_dry_run_prunes_nothing(store: Store, clock: FrozenClock) -> None:
    store.add("a", task="app.t", timer="every 1h")
    clock.advance(days=40)
    store.prune(timedelta(days=30), dry_run=True)
    assert count(store) == 1
    store.prune(timedelta(days=30))
    assert count(store) == 0
