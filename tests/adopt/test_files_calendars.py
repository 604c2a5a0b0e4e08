"""Exclusion calendars travel with ``export`` / ``apply`` / ``check --file``, on every backend.

Driven in-process as ``test_files_cli.py`` drives the commands; every assertion reads the
store back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from adopt.test_files_cli import invoke
from celery import Celery
from windows.test_cli import as_json, make_app

from celery_cronstore.policy.exclusions import CalendarText
from celery_cronstore.store import Store

WINDOW = "2026-12-07T22:00:00Z..2026-12-08T02:00:00Z"


@pytest.fixture
def clock() -> None:
    """No frozen clock for the shared ``store``: the CLI under test reads the real one."""
    return None


@pytest.fixture
def app(db_url: str) -> Celery:
    return make_app(db_url)


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[tuple[Celery, Store]]:
    """Another app on an empty SQLite store (migrated), and that store."""
    other = make_app(f"sqlite:///{tmp_path / 'fresh.sqlite'}")
    invoke(other, "migrate")
    target = Store(other.conf.cronstore_url)
    try:
        yield other, target
    finally:
        target.close()


def fill(store: Store) -> None:
    """Two calendars and tasks excluding them (one both, one none)."""
    store.calendars.add("xmas", entries=["2026-12-24..2026-12-26"], description="Christmas ✓")
    store.calendars.add("maint", entries=[WINDOW, " 2026-11-02 "], description="windows")
    store.add("report", task="app.report", timer="0 9 * * *", exclude="xmas")
    store.add("sync", task="app.sync", timer="every 15m", exclude="maint,xmas")
    store.add("plain", task="app.plain", timer="every 1h")


def trail(store: Store) -> list[tuple[str, str, str]]:
    return [
        (e.window, e.action, e.task_name)
        for e in reversed(store.audit_trail())
        if e.action.startswith("calendar-")
    ]


def write(path: Path, data: dict[str, Any]) -> str:
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("format_", ["json", "yaml"])
def test_an_export_brings_its_calendars_into_a_fresh_store_and_again_changes_nothing(
    app: Celery, store: Store, fresh: tuple[Celery, Store], format_: str
) -> None:
    fill(store)
    exported = invoke(app, "export", "--format", format_).stdout
    assert invoke(app, "export", "--format", format_).stdout == exported  # stable bytes
    other, target = fresh
    out = invoke(other, "apply", "-", input=exported).output.splitlines()
    assert out == [
        "create    calendar:maint  (2 entries)",
        "create    calendar:xmas  (1 entry)",
        "create    plain  (every 1h)",
        "create    report  (0 9 * * *)",
        "create    sync  (every 15m)",
        "write 3 task(s): 3 create; 2 calendar(s): 2 create",
    ]
    assert target.calendars.texts() == store.calendars.texts()
    assert target.calendars.texts()["maint"] == CalendarText(
        "maint", (WINDOW, "2026-11-02"), None, "windows"
    )
    assert {t.name: t.exclude for t in target.list()} == {
        "plain": None,
        "report": "xmas",
        "sync": "maint,xmas",
    }
    assert trail(target) == [
        ("apply", "calendar-add", "calendar:maint"),
        ("apply", "calendar-add", "calendar:xmas"),
    ]
    # Applying again (and with --prune) reports everything unchanged and writes nothing.
    before = (target.list(), target.calendars.texts(), len(target.audit_trail()))
    for extra in ([], ["--prune"]):
        again = invoke(other, "apply", "-", *extra, input=exported).output.splitlines()
        assert again == ["no changes", "write 0 task(s): 3 unchanged; 0 calendar(s): 2 unchanged"]
    data = as_json(invoke(other, "apply", "-", "--json", input=exported))
    assert data["calendars"]["counts"]["unchanged"] == 2
    assert [c["action"] for c in data["calendars"]["changes"]] == ["unchanged", "unchanged"]
    assert (target.list(), target.calendars.texts(), len(target.audit_trail())) == before
    assert invoke(other, "export", "--format", format_).stdout.count("Christmas ✓") == 1


def test_export_writes_every_calendar_of_the_store(app: Celery, store: Store) -> None:
    fill(store)
    store.calendars.add("unused", entries=["2027-01-01"])
    data = json.loads(invoke(app, "export").stdout)
    assert [c["name"] for c in data["calendars"]] == ["maint", "unused", "xmas"]
    assert data["calendars"][0] == {
        "name": "maint",
        "entries": [WINDOW, "2026-11-02"],
        "holidays": None,
        "description": "windows",
    }


def test_a_changed_calendar_is_replaced_before_its_tasks_and_audited(
    app: Celery, store: Store, tmp_path: Path
) -> None:
    fill(store)
    data = json.loads(invoke(app, "export").stdout)
    data["calendars"][1]["entries"] = ["2026-12-24..2026-12-26", "2026-12-31"]
    data["calendars"].append({"name": "audit", "entries": ["2027-02-01"]})
    for entry in data["tasks"]:
        if entry["name"] == "plain":
            entry["exclude"] = "audit"
    path = write(tmp_path / "tasks.json", data)
    out = invoke(app, "apply", path).output.splitlines()
    assert out == [
        "update    calendar:xmas  (entries: ['2026-12-24..2026-12-26'] -> "
        "['2026-12-24..2026-12-26', '2026-12-31'])",
        "create    calendar:audit  (1 entry)",
        "update    plain  (exclude: None -> 'audit')",
        "write 1 task(s): 1 update, 2 unchanged; 2 calendar(s): 1 create, 1 update, 1 unchanged",
    ]
    assert store.calendars.texts()["xmas"].entries == ("2026-12-24..2026-12-26", "2026-12-31")
    assert store.get("plain").exclude == "audit"
    assert trail(store)[-2:] == [
        ("apply", "calendar-replace", "calendar:xmas"),
        ("apply", "calendar-add", "calendar:audit"),
    ]


def test_a_dry_run_reports_the_calendars_and_writes_nothing(
    app: Celery, store: Store, fresh: tuple[Celery, Store]
) -> None:
    fill(store)
    exported = invoke(app, "export").stdout
    other, target = fresh
    out = invoke(other, "apply", "-", "--dry-run", input=exported).output.splitlines()
    assert out[:2] == [
        "create    calendar:maint  (2 entries)",
        "create    calendar:xmas  (1 entry)",
    ]
    assert out[-1] == "would write 3 task(s): 3 create; 2 calendar(s): 2 create"
    data = as_json(invoke(other, "apply", "-", "--dry-run", "--json", input=exported))
    assert data["dry_run"] is True
    assert [(c["action"], c["name"]) for c in data["calendars"]["changes"]] == [
        ("create", "maint"),
        ("create", "xmas"),
    ]
    assert target.calendars.texts() == {}
    assert target.list() == []
    assert target.audit_trail() == []


def test_a_bad_calendar_refuses_itself_and_its_tasks_and_the_rest_is_planned(
    app: Celery, store: Store, tmp_path: Path
) -> None:
    """The bad calendar and the tasks naming it are refused, naming it and the bad token;
    the other calendar and tasks are planned as usual, and, apply writing a file whole or
    not at all, nothing is written until the calendar is fixed."""
    data: dict[str, Any] = {
        "cronstore": 1,
        "calendars": [
            {"name": "bad", "entries": ["2026-12-25", "2026-13-01"]},
            {"name": "good", "entries": ["2026-12-25"]},
        ],
        "tasks": [
            {"name": "t-bad", "task": "app.a", "timer": "every 1h", "exclude": "good,bad"},
            {"name": "t-good", "task": "app.b", "timer": "every 1h", "exclude": "good"},
            {"name": "t-plain", "task": "app.c", "timer": "every 1h"},
        ],
    }
    path = write(tmp_path / "tasks.json", data)
    dry = invoke(app, "apply", path, "--dry-run", code=1).output.splitlines()
    assert dry == [
        "refuse    calendar:bad  calendar 'bad': calendar entry '2026-13-01': '2026-13-01' is "
        "not a day (YYYY-MM-DD), a span (DAY..DAY) or a window (INSTANT..INSTANT)",
        "create    calendar:good  (1 entry)",
        "refuse    t-bad  exclude names calendar 'bad', which is refused (see calendar:bad): "
        "fix that calendar in the file",
        "create    t-good  (every 1h)",
        "create    t-plain  (every 1h)",
        "would write 2 task(s): 2 create, 1 refuse; 1 calendar(s): 1 create, 1 refuse",
    ]
    out = invoke(app, "apply", path, code=1).output
    assert "wrote nothing (2 create, 1 refuse; 1 calendar(s): 1 create, 1 refuse): 2 entry" in out
    assert (store.list(), store.calendars.texts()) == ([], {})
    # check --file refuses the same two, and nothing else.
    checked = invoke(app, "check", "--file", path, "--no-rows", code=1).output.splitlines()
    assert [line.split(": ", 2)[1] for line in checked[:-1]] == ["calendar:bad", "t-bad"]
    assert checked[-1].endswith(f"{path} (3 task(s), 2 calendar(s)): 2 problem(s)")
    data["calendars"][0]["entries"] = ["2026-12-26"]
    invoke(app, "apply", write(tmp_path / "tasks.json", data))
    assert sorted(store.calendars.texts()) == ["bad", "good"]
    assert [t.name for t in store.list()] == ["t-bad", "t-good", "t-plain"]
    invoke(app, "check", "--file", path, "--no-rows")


def test_prune_removes_only_unnamed_calendars_and_only_when_the_file_lists_calendars(
    app: Celery, store: Store, tmp_path: Path
) -> None:
    for name in ("kept", "owned-uses", "unused", "gone-uses"):
        store.calendars.add(name, entries=["2026-12-25"])
    store.add("t", task="app.t", timer="every 1h", exclude="kept")
    store.add("owned", task="app.o", timer="every 1h", owner=("tenant", 1), exclude="owned-uses")
    store.add("gone", task="app.g", timer="every 1h", exclude="gone-uses")
    data = json.loads(invoke(app, "export").stdout)
    data["tasks"] = [t for t in data["tasks"] if t["name"] == "t"]
    data["calendars"] = [c for c in data["calendars"] if c["name"] == "kept"]
    without = write(tmp_path / "without.json", {k: v for k, v in data.items() if k != "calendars"})
    invoke(app, "apply", without, "--prune")  # no calendars key: calendars are left alone
    assert sorted(store.calendars.texts()) == ["gone-uses", "kept", "owned-uses", "unused"]
    assert [t.name for t in store.list()] == ["owned", "t"]
    store.add("gone", task="app.g", timer="every 1h", exclude="gone-uses")
    path = write(tmp_path / "tasks.json", data)
    invoke(app, "apply", path)  # without --prune nothing goes
    assert len(store.calendars.texts()) == 4
    dry = invoke(app, "apply", path, "--prune", "--dry-run").output.splitlines()
    assert dry == [
        f"remove    calendar:gone-uses  not in {path}, no task names it (--prune)",
        f"remove    calendar:unused  not in {path}, no task names it (--prune)",
        f"remove    gone  not in {path} (--prune)",
        "would write 1 task(s): 1 unchanged, 1 remove; 2 calendar(s): 1 unchanged, 2 remove",
    ]
    assert len(store.calendars.texts()) == 4
    invoke(app, "apply", path, "--prune")
    assert sorted(store.calendars.texts()) == ["kept", "owned-uses"]
    assert [t.name for t in store.list()] == ["owned", "t"]
    assert [a for w, a, n in trail(store) if a == "calendar-remove" and w == "apply"] == [
        "calendar-remove",
        "calendar-remove",
    ]


def test_a_calendars_key_of_the_wrong_shape_is_one_error_line_exit_2(
    app: Celery, store: Store, tmp_path: Path
) -> None:
    store.calendars.add("xmas", entries=["2026-12-25"])
    for calendars, message in (
        ({"xmas": []}, "'calendars' must be a list of calendars, got a dict"),
        ([{"entries": []}], "calendars[0] has no name (got None)"),
        ([{"name": "xmas", "days": []}], "calendars[0] (xmas): unknown key(s) days"),
    ):
        path = write(tmp_path / "bad.json", {"cronstore": 1, "tasks": [], "calendars": calendars})
        for extra in ([], ["--prune"], ["--dry-run"]):
            result = invoke(app, "apply", path, *extra, code=2)
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1, result.stderr
            assert lines[0].startswith(f"Error: {path}: ")
            assert message in lines[0]
        checked = invoke(app, "check", "--file", path, "--no-rows", code=2).output
        assert message in checked
    assert list(store.calendars.texts()) == ["xmas"]
