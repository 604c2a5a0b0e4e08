"""``cronstore export``, ``apply`` and ``check`` through the command line, on every backend.

Driven in-process with click's ``CliRunner`` as ``tests/windows/test_cli.py`` drives the
group (its ``make_app``/``runner_for``), with a Celery app whose ``cronstore_url`` is the
test database.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner, Result
from windows.test_cli import as_json, make_app

from celery_cronstore.cli import cronstore
from celery_cronstore.store import Store

UTC = timezone.utc
LAST = datetime(2026, 1, 5, 11, 0, 0, 412_000, tzinfo=UTC)


@pytest.fixture
def clock() -> None:
    """No frozen clock for the shared ``store``: the CLI under test reads the real one."""
    return None


def invoke(app: Celery, *args: str, code: int = 0, input: str | None = None) -> Result:
    """Run ``cronstore ARGS`` for ``app``; check the exit status and that no traceback shows."""
    result = CliRunner().invoke(
        cronstore, list(args), obj=CLIContext(app=app, no_color=True, workdir=None), input=input
    )
    assert "Traceback" not in result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args} raised {result.exception!r}\n{result.output}")
    assert result.exit_code == code, f"{args}: exit {result.exit_code}\n{result.output}"
    return result


@pytest.fixture
def app(db_url: str) -> Celery:
    return make_app(db_url)


def snapshot(store: Store) -> list[Any]:
    """Every stored row as it is (versions and timestamps included)."""
    return store.list()


def raw(store: Store, name: str, **values: Any) -> None:
    """Write columns as raw SQL would (a row beat cannot use, a last fire)."""
    with store.begin() as conn:
        table = sa.table("cronstore_periodic_task", *(sa.column(k) for k in [*values, "name"]))
        conn.execute(sa.update(table).where(table.c.name == name).values(**values))


def fill(store: Store) -> None:
    """Tasks of every timer kind, owners, policies, a disabled one, unicode, rows in error."""
    store.add(
        "cron", task="app.report", timer="30 9 * * mon-fri", tz="Europe/Berlin", args=[1, "ä"],
        kwargs={"full": True}, options={"queue": "reports", "priority": 3},
        owner=("tenant", 42), misfire_policy="run_all", misfire_limit=7, overlap_policy="skip",
        start_deadline=60, abandon_policy="rerun", tolerance=1.5, max_retries=2, source="cli",
    )  # fmt: skip
    store.add(
        "calendar ✓", task="app.cal", timer="Mon..Fri 09:00", tz="America/New_York",
        description="Grüße ✓ 日本 — \"quoted\"\nsecond line",
    )  # fmt: skip
    store.add("interval", task="app.tick", timer="every 5m", enabled=False)
    store.add("once", task="app.once", timer="2030-01-01T09:00:00Z")
    store.add("colon", task="app.c", timer="every 1h", owner=("urn:team", "a:b"))
    store.add("beat", task="app.beat", timer="every 10m", source="config")
    store.add("in-error", task="app.gone", timer="every 2h")
    raw(store, "in-error", error="task 'app.gone' is not registered", next_run=None)
    store.add("bad-timer", task="app.t", timer="0 * * * *")
    raw(store, "bad-timer", timer="*/0 * * * *", error="bad timer")
    raw(store, "cron", last_fire=LAST, total_run_count=17)


# -- export | apply --------------------------------------------------------------------------


@pytest.mark.parametrize("format_", ["json", "yaml"])
def test_export_then_apply_changes_nothing_and_writes_nothing(
    app: Celery, store: Store, format_: str, tmp_path: Path
) -> None:
    fill(store)
    before = snapshot(store)
    exported = invoke(app, "export", "--format", format_).stdout
    assert invoke(app, "export", "--format", format_).stdout == exported  # stable bytes
    for args, text in ((["-"], exported), ([], None)):
        if text is None:  # the same through a file, with --prune
            path = tmp_path / f"tasks.{format_}"
            invoke(app, "export", "--output", str(path))
            args = [str(path), "--prune"]
        out = invoke(app, "apply", *args, input=text).output.splitlines()
        assert out == ["no changes", f"write 0 task(s): {len(before)} unchanged"]
    assert snapshot(store) == before
    data = as_json(invoke(app, "apply", "-", "--json", input=exported))
    assert data["counts"]["unchanged"] == len(before)
    assert data["dry_run"] is False
    assert snapshot(store) == before


def test_export_writes_every_field_owner_and_state(app: Celery, store: Store) -> None:
    fill(store)
    doc = json.loads(invoke(app, "export").stdout)
    tasks = {t["name"]: t for t in doc["tasks"]}
    assert list(tasks) == sorted(tasks)
    cron = tasks["cron"]
    assert cron["owner"] == "tenant:42"
    assert cron["kwargs"] == {"full": True}
    assert (cron["misfire_policy"], cron["abandon_policy"], cron["tolerance"]) == (
        "run_all",
        "rerun",
        1.5,
    )
    assert cron["state"]["last_fire"] == "2026-01-05T11:00:00.412000Z"
    assert cron["state"]["total_run_count"] == 17
    assert tasks["colon"]["owner"] == ["urn:team", "a:b"]
    assert tasks["interval"]["enabled"] is False
    assert tasks["in-error"]["state"]["error"] == "task 'app.gone' is not registered"
    assert tasks["beat"]["state"]["source"] == "config"
    assert "Grüße ✓ 日本" in invoke(app, "export", "--format", "yaml").stdout


def test_apply_creates_updates_and_disables(app: Celery, store: Store, tmp_path: Path) -> None:
    store.add("report", task="app.report", timer="0 9 * * *", tz="UTC")
    store.add("tick", task="app.tick", timer="every 5m")
    path = tmp_path / "tasks.yaml"
    path.write_text(
        "cronstore: 1\n"
        "tasks:\n"
        "- name: report\n  task: app.report\n  timer: 0 10 * * *\n  args: [1]\n"
        "- name: tick\n  enabled: false\n"
        "- name: new ✓\n  task: app.new\n  timer: every 1h\n  owner: tenant:7\n"
        "  misfire_policy: skip\n",
        encoding="utf-8",
    )
    out = invoke(app, "apply", str(path)).output.splitlines()
    assert out[0] == "update    report  (args: [] -> [1], timer: '0 9 * * *' -> '0 10 * * *')"
    assert out[1] == "update    tick  (enabled: True -> False)"
    assert out[2] == "create    new ✓  (every 1h)"
    assert out[3] == "write 3 task(s): 1 create, 2 update"
    report, tick, new = store.get("report"), store.get("tick"), store.get("new ✓")
    assert (report.timer, report.args, report.source) == ("0 10 * * *", [1], "api")
    assert (tick.enabled, tick.next_run) == (False, None)
    assert (new.source, new.owner, new.misfire_policy) == ("file", ("tenant", "7"), "skip")
    assert new.tz == "UTC"  # the app's zone: no timezone configured
    assert invoke(app, "apply", str(path)).output.splitlines()[0] == "no changes"


def test_moving_tasks_to_another_store_fires_nothing_twice(
    app: Celery, store: Store, tmp_path: Path
) -> None:
    store.add("hourly", task="app.h", timer="0 * * * *")
    ran = datetime.now(UTC).replace(minute=0, second=0, microsecond=300_000)
    raw(store, "hourly", last_fire=ran, total_run_count=3)
    exported = invoke(app, "export").stdout
    other = make_app(f"sqlite:///{tmp_path / 'other.sqlite'}")
    invoke(other, "migrate")
    assert "create    hourly" in invoke(other, "apply", "-", input=exported).output
    moved = Store(other.conf.cronstore_url)
    try:
        task = moved.get("hourly")
    finally:
        moved.close()
    assert task.last_fire == ran
    assert task.next_run == ran.replace(microsecond=0) + timedelta(hours=1)


def test_prune_removes_only_unowned_tasks_the_file_does_not_name(
    app: Celery, store: Store, tmp_path: Path
) -> None:
    store.add("kept", task="app.k", timer="every 1h")
    store.add("gone", task="app.g", timer="every 1h")
    store.add("owned", task="app.o", timer="every 1h", owner=("tenant", 1))
    store.add("beat", task="app.b", timer="every 1h", source="config")
    path = tmp_path / "tasks.json"
    doc = json.loads(invoke(app, "export").stdout)
    doc["tasks"] = [t for t in doc["tasks"] if t["name"] == "kept"]
    path.write_text(json.dumps(doc), encoding="utf-8")
    before = snapshot(store)
    dry = invoke(app, "apply", str(path), "--prune", "--dry-run").output.splitlines()
    assert dry == [
        f"remove    gone  not in {path} (--prune)",
        "would write 1 task(s): 1 unchanged, 1 remove",
    ]
    assert snapshot(store) == before
    assert invoke(app, "apply", str(path)).output.splitlines()[0] == "no changes"  # no --prune
    invoke(app, "apply", str(path), "--prune")
    assert [t.name for t in store.list()] == ["beat", "kept", "owned"]


def test_dry_run_writes_nothing(app: Celery, store: Store) -> None:
    store.add("a", task="app.a", timer="every 1h")
    before = snapshot(store)
    doc = {"cronstore": 1, "tasks": [
        {"name": "a", "timer": "every 2h"}, {"name": "b", "task": "app.b", "timer": "@daily"},
    ]}  # fmt: skip
    out = invoke(app, "apply", "-", "--dry-run", input=json.dumps(doc)).output.splitlines()
    assert out == [
        "update    a  (timer: 'every 1h' -> 'every 2h')",
        "create    b  (@daily)",
        "would write 2 task(s): 1 create, 1 update",
    ]
    assert snapshot(store) == before
    assert as_json(invoke(app, "apply", "-", "--dry-run", "--json", input=json.dumps(doc)))[
        "dry_run"
    ]


BAD_FILES = [
    ("tasks.json", b'{"cronstore": 1, "tasks": [', "is not valid JSON (line 1 column 28"),
    ("tasks.yaml", b"cronstore: 1\ntasks: [\n  - {name: a\n", "is not valid YAML (line"),
    ("tasks.json", b'{"cronstore": 2, "tasks": []}', "is format version 2"),
    ("tasks.json", b'[{"name": "a"}]', "is not a cronstore file"),
    ("tasks.json", b'{"cronstore": 1, "tasks": [{"task": "t"}]}', "tasks[0] has no name"),
    ("tasks.json", b'{"cronstore": 1, "tasks": [{"name": "\xff"}]}', "is not UTF-8 text"),
    ("missing.json", None, "cannot read"),
]


@pytest.mark.parametrize(("name", "content", "message"), BAD_FILES)
def test_a_bad_file_is_one_error_line_exit_2_and_changes_nothing(
    app: Celery, store: Store, tmp_path: Path, name: str, content: bytes | None, message: str
) -> None:
    store.add("a", task="app.a", timer="every 1h")
    before = snapshot(store)
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    for extra in ([], ["--prune"], ["--dry-run"]):
        result = invoke(app, "apply", str(path), *extra, code=2)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"Error: {path}") or lines[0].startswith("Error: cannot read")
        assert message in lines[0]
        assert result.stdout == ""
    assert snapshot(store) == before


def test_a_refused_entry_holds_the_whole_file(app: Celery, store: Store) -> None:
    store.add("a", task="app.a", timer="every 1h")
    before = snapshot(store)
    doc = {"cronstore": 1, "tasks": [
        {"name": "a", "timer": "every 2h"},
        {"name": "b", "task": "app.b", "timer": "*/0 * * * *"},
        {"name": "c", "task": "app.c", "timer": "every 1h", "colour": "red"},
    ]}  # fmt: skip
    out = invoke(app, "apply", "-", "--prune", input=json.dumps(doc), code=1).output
    assert "refuse    b  " in out
    assert "refuse    c  unknown key(s) colour" in out
    assert "wrote nothing (1 update, 2 refuse): 2 entry(ies) refused or in conflict" in out
    assert snapshot(store) == before
    data = as_json(invoke(app, "apply", "-", "--json", input=json.dumps(doc), code=1))
    assert data["dry_run"] is False
    assert "apply writes a file whole or not at all" in data["held"]


def test_a_beat_schedule_task_may_be_disabled_but_not_redefined(app: Celery, store: Store) -> None:
    store.add("beat", task="app.b", timer="every 1h", source="config")
    doc = json.loads(invoke(app, "export").stdout)
    doc["tasks"][0]["timer"] = "every 2h"
    out = invoke(app, "apply", "-", input=json.dumps(doc), code=1).output
    assert "conflict  beat  a beat_schedule task: beat stores its timer from the app's" in out
    assert store.get("beat").timer == "every 1h"
    doc["tasks"][0].update(timer="every 1h", enabled=False)
    invoke(app, "apply", "-", input=json.dumps(doc))
    assert store.get("beat").enabled is False


def test_a_task_the_app_does_not_register_needs_force(db_url: str, store: Store) -> None:
    app = make_app(db_url, registered=True)
    doc = json.dumps({"cronstore": 1, "tasks": [{"name": "x", "task": "nope", "timer": "@daily"}]})
    out = invoke(app, "apply", "-", input=doc, code=1).output
    assert "task 'nope' is not registered" in out
    assert "(--force applies it anyway; beat then puts it in error)" in out
    assert store.list() == []
    invoke(app, "apply", "-", "--force", input=doc)
    assert store.get("x").task == "nope"


# -- check ----------------------------------------------------------------------------------


def registered_app(db_url: str, **schedule: Any) -> Celery:
    app = make_app(db_url, registered=True)

    @app.task(name="app.add", shared=False)
    def add(a: int, b: int) -> int:
        """A registered task with two arguments."""
        return a + b

    app.conf.beat_schedule = schedule
    return app


def test_check_passes_a_clean_app(db_url: str, store: Store, tmp_path: Path) -> None:
    app = registered_app(
        db_url,
        sum={"task": "app.add", "schedule": 300, "args": (1, 2)},
        nightly={"task": "app.add", "schedule": "0 3 * * *", "kwargs": {"a": 1, "b": 2},
                 "cronstore": {"misfire_policy": "skip"}},
    )  # fmt: skip
    store.add("row", task="app.add", timer="every 1h", args=[1, 2])
    path = tmp_path / "tasks.json"
    invoke(app, "export", "--output", str(path))
    out = invoke(app, "check", "--file", str(path)).output.splitlines()
    assert out == [
        f"checked 2 beat_schedule entry(ies), {path} (1 task(s), 0 calendar(s)), 1 stored "
        "row(s): no problems"
    ]
    data = as_json(invoke(app, "--json", "check", "--no-rows"))
    assert data["ok"] is True
    assert data["problems"] == []


def test_check_finds_what_beat_would_refuse(db_url: str, store: Store, tmp_path: Path) -> None:
    app = registered_app(
        db_url,
        good={"task": "app.add", "schedule": 60, "args": [1, 2]},
        bad_timer={"task": "app.add", "schedule": "*/0 * * * *", "args": [1, 2]},
        unregistered={"task": "app.nope", "schedule": 60},
        misfit={"task": "app.add", "schedule": 60, "args": [1]},
        policy={"task": "app.add", "schedule": 60, "args": [1, 2], "cronstore": {"color": 1}},
    )
    store.add("row-ok", task="app.add", timer="every 1h", args=[1, 2])
    store.add("row-nope", task="app.gone", timer="every 1h", force=True)
    store.add("row-misfit", task="app.add", timer="every 1h", args=[1, 2])
    raw(store, "row-misfit", args="[1, 2, 3]")
    store.add("row-timer", task="app.add", timer="every 1h", args=[1, 2])
    raw(store, "row-timer", timer="every 0s")
    path = tmp_path / "tasks.yaml"
    path.write_text(
        "cronstore: 1\ntasks:\n"
        "- {name: f-ok, task: app.add, timer: every 1h, args: [1, 2]}\n"
        "- {name: f-timer, task: app.add, timer: 'Mon 25:00', args: [1, 2]}\n"
        "- {name: f-nope, task: app.nope, timer: every 1h}\n",
        encoding="utf-8",
    )
    result = invoke(app, "check", "--file", str(path), code=1)
    lines = result.output.splitlines()
    problems = {tuple(line.split(": ", 2)[:2]) for line in lines[:-1]}
    assert problems == {
        ("beat_schedule", "bad_timer"),
        ("beat_schedule", "unregistered"),
        ("beat_schedule", "misfit"),
        ("beat_schedule", "policy"),
        (f"file {path}", "f-timer"),
        (f"file {path}", "f-nope"),
        ("row", "row-nope"),
        ("row", "row-misfit"),
        ("row", "row-timer"),
    }
    text = result.output
    assert "beat_schedule: unregistered: task 'app.nope' is not registered" in text
    assert "beat_schedule: misfit: args [1] and kwargs {} do not fit task 'app.add'" in text
    assert "): fix the entry's" in text
    assert "beat_schedule: policy: unknown 'cronstore' key(s) color" in text
    assert f"file {path}: f-timer: " in text
    assert "row: row-misfit: args [1, 2, 3] and kwargs {} do not fit" in text
    assert "row: row-timer: timer 'every 0s' does not parse" in text
    assert lines[-1] == (
        f"checked 5 beat_schedule entry(ies), {path} (3 task(s)), 4 stored row(s): 9 problem(s)"
    )
    data = as_json(invoke(app, "--json", "check", "--no-beat-schedule", "--no-rows", code=0))
    assert data == {"ok": True, "checked": [], "rows_skipped": "--no-rows", "problems": []}


def test_check_of_a_file_that_cannot_be_read_is_exit_2(db_url: str, tmp_path: Path) -> None:
    app = registered_app(db_url)
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    out = invoke(app, "check", "--file", str(tmp_path / "bad.json"), code=2).output
    assert f"file {tmp_path / 'bad.json'}: -: {tmp_path / 'bad.json'} is not valid JSON" in out
    assert "1 problem(s)" in out


def test_check_without_a_database(tmp_path: Path) -> None:
    app = make_app(f"sqlite:///{tmp_path / 'absent.sqlite'}")
    app.conf.beat_schedule = {"a": {"task": "t", "schedule": 60}}
    out = invoke(app, "check").output.splitlines()
    assert out[0].startswith("rows not checked: the SQLite file ")
    assert out[1] == "checked 1 beat_schedule entry(ies): no problems"
    assert not (tmp_path / "absent.sqlite").exists()  # not created by looking
    assert invoke(app, "check", "--no-rows").output.splitlines() == [out[1]]
    err = invoke(app, "check", "--rows", code=1).stderr
    assert err.startswith("Error: ")
    unreachable = make_app("postgresql+psycopg://u:pw@127.0.0.1:1/none")
    skipped = invoke(unreachable, "check", "--no-beat-schedule").output
    assert "rows not checked: the store is not reachable" in skipped


def test_check_names_a_beat_schedule_entry_a_stored_task_shadows(db_url: str, store: Store) -> None:
    app = registered_app(db_url, report={"task": "app.add", "schedule": 60, "args": [1, 2]})
    store.add("report", task="app.add", timer="every 1h", args=[1, 2], source="cli")
    out = invoke(app, "check", code=1).output
    assert "beat_schedule: report: a stored task of source 'cli' has this name" in out
    assert "misfit" not in out


def test_a_file_naming_a_calendar_neither_it_nor_the_store_has_is_refused_whole(
    app: Celery, store: Store, tmp_path: Path
) -> None:
    """A task's ``exclude`` must name a calendar the file carries or the target store has:
    applying refuses the task (and so writes nothing of the file), naming the missing one."""
    path = tmp_path / "tasks.yaml"
    path.write_text(
        "cronstore: 1\ntasks:\n"
        "- name: a\n  task: app.a\n  timer: every 1h\n"
        "- name: b\n  task: app.b\n  timer: every 1h\n  exclude: holidays\n",
        encoding="utf-8",
    )
    refused = invoke(app, "apply", str(path), code=1).output
    assert "refuse    b  exclude names no calendar 'holidays': create it first" in refused
    assert "or add it to the file's calendars" in refused
    assert "wrote nothing (1 create, 1 refuse)" in refused
    assert store.list() == []
    store.calendars.add("holidays", entries=["2026-12-25"])
    invoke(app, "apply", str(path))
    assert store.get("b").exclude == "holidays"
