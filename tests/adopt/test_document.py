"""The export/apply file format (pure): what export writes, what read_document makes of it."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from task_rows import periodic_task
from timeline import T0

from celery_cronstore import fields
from celery_cronstore.adopt import document
from celery_cronstore.adopt.document import (
    DocumentError,
    dump,
    export_document,
    load_file,
    load_text,
    read_document,
)
from celery_cronstore.adopt.plan import make_plan
from celery_cronstore.adopt.records import Incoming, Refused
from celery_cronstore.timers import parse_timer

UTC = timezone.utc
LAST = datetime(2026, 1, 5, 11, 0, 0, 412_000, tzinfo=UTC)


def timed(name: str, expression: str, tz: str = "UTC", **changes: Any) -> Any:
    """A stored task whose timer is in the canonical form the store keeps."""
    timer = parse_timer(expression, tz=tz)
    return periodic_task(
        name=name, timer=str(timer), timer_kind=timer.kind, tz=timer.tz_name, **changes
    )


def every_kind() -> list[Any]:
    return [
        timed(
            "cron",
            "30 9 * * mon-fri",
            "Europe/Berlin",
            args=[1, "ä"],
            kwargs={"full": True},
            options={"queue": "reports"},
            owner_type="tenant",
            owner_id="42",
            misfire_policy="run_all",
            misfire_limit=7,
            overlap_policy="skip",
            start_deadline=60.0,
            abandon_policy="rerun",
            tolerance=1.5,
            max_retries=2,
            jitter=30.0,
            start_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
            end_at=datetime(2031, 6, 30, 21, 30, tzinfo=timezone.utc),
            last_fire=LAST,
            total_run_count=17,
            source="cli",
        ),
        timed("calendar", "Mon..Fri 09:00", "America/New_York", description="Grüße ✓ 日本"),
        timed("interval", "every 5m", enabled=False, next_run=None),
        timed("once", "2030-01-01T09:00:00Z", error="task 'app.a' is not registered"),
        timed("colon", "every 1h", owner_type="urn:team", owner_id="a:b"),
    ]


# -- the document ---------------------------------------------------------------------------


def test_every_field_of_the_table_is_exported_by_name_with_a_read_only_state() -> None:
    doc = export_document(list(reversed(every_kind())))
    assert doc["cronstore"] == 1
    names = [entry["name"] for entry in doc["tasks"]]
    assert names == sorted(names)  # sorted: the same store, the same file
    cron = next(e for e in doc["tasks"] if e["name"] == "cron")
    assert set(cron) == {f.name for f in fields.table()} | {"state"}
    assert cron["timer"] == "30 9 * * mon-fri"
    assert (cron["kind"], cron["tz"]) == ("cron", "Europe/Berlin")
    assert cron["owner"] == "tenant:42"
    assert cron["args"] == [1, "ä"]
    assert cron["start_deadline"] == 60.0
    assert cron["state"] == {
        "source": "cli",
        "next_run": "2026-01-05T12:00:00Z",
        "last_fire": "2026-01-05T11:00:00.412000Z",
        "total_run_count": 17,
        "error": None,
        "version": 1,
    }
    plain = next(e for e in doc["tasks"] if e["name"] == "interval")
    assert plain["owner"] is None
    assert plain["enabled"] is False
    assert plain["state"]["next_run"] is None


def test_an_owner_type_with_a_colon_is_a_pair_and_reads_back_the_same() -> None:
    doc = export_document(every_kind())
    colon = next(e for e in doc["tasks"] if e["name"] == "colon")
    assert colon["owner"] == ["urn:team", "a:b"]
    cron = next(r for r in read_document(doc, "f.json") if r.name == "cron")
    assert isinstance(cron, Incoming)
    assert cron.values["owner"] == ("tenant", "42")  # ids keep their colons: split at the first


def test_reading_an_export_gives_every_field_and_the_last_fire() -> None:
    doc = json.loads(dump(export_document(every_kind())))
    reads = read_document(doc, "tasks.json")
    assert [r.name for r in reads] == ["calendar", "colon", "cron", "interval", "once"]
    cron = reads[2]
    assert isinstance(cron, Incoming)
    assert cron.origin == "tasks.json: tasks[2]"
    assert set(cron.values) == {f.name for f in fields.table()} - {"name"}
    assert cron.last_run_at == LAST
    assert cron.total_run_count is None  # the rest of state is ignored


def test_export_then_read_against_the_same_tasks_changes_nothing() -> None:
    tasks = every_kind()
    current = {t.name: t for t in tasks}
    for format_ in ("json", "yaml"):
        text = dump(export_document(tasks), format_)
        reads = read_document(load_text(text, format_, "f"), "f")

        def refuse(task: str, args: list[Any], kwargs: dict[str, Any]) -> str:
            return f"{task} is not registered"  # rows already stored are not checked again

        plan = make_plan(
            reads, current, source="file", default_tz="UTC", check_task=refuse, manage_all=True
        )
        assert [c.action for c in plan.changes] == ["unchanged"] * len(tasks), plan.as_json()


def test_a_stored_timer_beat_cannot_read_is_not_refused_when_left_as_it_is() -> None:
    bad = periodic_task(name="bad", timer="*/0 * * * *", timer_kind="cron", error="bad timer")
    reads = read_document(export_document([bad]), "f")
    plan = make_plan(reads, {"bad": bad}, source="file", default_tz="UTC", manage_all=True)
    assert [c.action for c in plan.changes] == ["unchanged"]
    fixed = dict(export_document([bad])["tasks"][0], timer="*/5 * * * *")
    doc = {"cronstore": 1, "tasks": [fixed]}
    plan = make_plan(read_document(doc, "f"), {"bad": bad}, source="file", default_tz="UTC")
    assert plan.changes[0].action == "conflict"  # source api: only apply manages it
    plan = make_plan(
        read_document(doc, "f"), {"bad": bad}, source="file", default_tz="UTC", manage_all=True
    )
    assert plan.changes[0].fields["timer"] == ("*/0 * * * *", "*/5 * * * *")


def test_output_is_stable_sorted_and_keeps_unicode() -> None:
    tasks = every_kind()
    first = dump(export_document(tasks))
    assert first == dump(export_document(list(reversed(tasks))))
    assert "Grüße ✓ 日本" in first
    assert first.endswith("}\n")
    entry = json.loads(first)["tasks"][0]
    assert list(entry) == sorted(entry)
    yaml_text = dump(export_document(tasks), "yaml")
    assert "Grüße ✓ 日本" in yaml_text
    assert yaml_text == dump(export_document(list(reversed(tasks))), "yaml")


# -- what is refused ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            [],
            "is not a cronstore file: expected a mapping with 'cronstore: 1' and 'tasks', "
            "got a list",
        ),
        (None, "got nothing"),
        ({"tasks": []}, "has no 'cronstore' version key: add 'cronstore: 1'"),
        ({"cronstore": 2, "tasks": []}, "is format version 2, this release reads version 1"),
        ({"cronstore": True, "tasks": []}, "format version True"),
        ({"cronstore": 1, "task": []}, "unknown top-level key(s) task"),
        ({"cronstore": 1}, "'tasks' must be a list of task entries, got nothing"),
        ({"cronstore": 1, "tasks": {"a": {}}}, "'tasks' must be a list"),
        ({"cronstore": 1, "tasks": ["a"]}, "tasks[0] must be a mapping of fields, got a str"),
        ({"cronstore": 1, "tasks": [{"task": "t"}]}, "tasks[0] has no name (got None)"),
        ({"cronstore": 1, "tasks": [{"name": 5}]}, "has no name (got 5)"),
        ({"cronstore": 1, "tasks": [{"name": " "}]}, "give every task entry a 'name'"),
    ],
)
def test_a_document_of_the_wrong_shape_is_refused_whole(data: Any, message: str) -> None:
    with pytest.raises(DocumentError) as caught:
        read_document(data, "tasks.json")
    assert message in str(caught.value)
    assert str(caught.value).startswith("tasks.json")


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"colour": "red", "timr": "x"}, "unknown key(s) colour, timr: known are name, task"),
        ({"owner": "tenant"}, "owner must be TYPE:ID text (e.g. tenant:42) or null"),
        ({"state": []}, "state must be a mapping (it is read-only), got a list"),
        ({"state": {"last_fire": "yesterday"}}, "state.last_fire must be an ISO-8601 instant"),
        ({"state": {"last_fire": "2026-01-05T11:00:00"}}, "an ISO-8601 instant with a zone"),
    ],
)
def test_a_bad_entry_is_refused_alone_naming_why(entry: dict[str, Any], reason: str) -> None:
    doc = {"cronstore": 1, "tasks": [{"name": "a", **entry}, {"name": "b", "task": "t"}]}
    bad, fine = read_document(doc, "f")
    assert isinstance(bad, Refused)
    assert reason in bad.reason
    assert bad.origin == "f: tasks[0]"
    assert isinstance(fine, Incoming)
    assert fine.values == {"task": "t"}


def test_state_is_ignored_but_for_last_fire_and_may_be_left_out() -> None:
    doc = {
        "cronstore": 1,
        "tasks": [
            {"name": "a", "task": "t", "state": {"version": 99, "whatever": 1}},
            {"name": "b", "task": "t", "state": {"last_fire": "2026-01-05T13:00:00+01:00"}},
        ],
    }
    a, b = read_document(doc, "f")
    assert isinstance(a, Incoming)
    assert a.last_run_at is None
    assert "state" not in a.values
    assert isinstance(b, Incoming)
    assert b.last_run_at == T0


# -- files ----------------------------------------------------------------------------------


def test_files_are_read_by_extension_or_content(tmp_path: Path) -> None:
    doc = export_document(every_kind())
    for name, format_ in (("a.json", "json"), ("a.yaml", "yaml"), ("a.yml", "yaml")):
        (tmp_path / name).write_text(dump(doc, format_), encoding="utf-8")
        assert load_file(str(tmp_path / name)) == doc
    (tmp_path / "plain").write_text(dump(doc, "json"), encoding="utf-8")
    (tmp_path / "plain2").write_text(dump(doc, "yaml"), encoding="utf-8")
    assert load_file(str(tmp_path / "plain")) == load_file(str(tmp_path / "plain2")) == doc


def test_a_hand_written_yaml_instant_is_the_one_off_timer() -> None:
    text = "cronstore: 1\ntasks:\n- name: once\n  task: t\n  timer: 2030-01-01T09:00:00Z\n"
    (read,) = read_document(load_text(text, "yaml", "f.yaml"), "f.yaml")
    assert isinstance(read, Incoming)
    assert read.values["timer"] == "2030-01-01T09:00:00Z"
    plan = make_plan([read], {}, source="file", default_tz="UTC")
    assert plan.changes[0].fields["kind"] == (None, "once")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "bad.json",
            b'{"cronstore": 1,\n "tasks": [}',
            "bad.json is not valid JSON (line 2 column",
        ),
        ("bad.yaml", b"cronstore: 1\ntasks: [\n", "bad.yaml is not valid YAML (line"),
        ("bad.json", b'{"a": "\xff"}', "bad.json is not UTF-8 text (byte 0xff at offset 7)"),
        ("deep.json", b"[" * 100_000, "deep.json is nested too deeply"),
    ],
)
def test_a_file_that_does_not_parse_names_where(
    tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(DocumentError) as caught:
        load_file(str(tmp_path / name))
    assert message in str(caught.value).replace(str(tmp_path) + "/", "")
    assert any(fix in str(caught.value) for fix in ("fix it", "save it as UTF-8", "give an"))


def test_a_missing_file_names_the_path() -> None:
    with pytest.raises(DocumentError, match=r"cannot read '/nowhere/x\.json': No such file"):
        load_file("/nowhere/x.json")


def test_without_pyyaml_yaml_says_which_extra_installs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = document.importlib.import_module

    def no_yaml(name: str) -> Any:
        if name == "yaml":
            raise ImportError("No module named 'yaml'")
        return real(name)

    monkeypatch.setattr(document.importlib, "import_module", no_yaml)
    doc = export_document(every_kind())
    with pytest.raises(DocumentError, match=r"install celery-cronstore\[yaml\]"):
        dump(doc, "yaml")
    with pytest.raises(DocumentError, match=r"install celery-cronstore\[yaml\]"):
        load_text("cronstore: 1", "yaml", "f.yaml")
    assert json.loads(dump(doc, "json")) == doc  # JSON needs nothing


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(DocumentError, match="unknown format 'toml': give one of json, yaml"):
        dump({}, "toml")
