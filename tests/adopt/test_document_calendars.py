"""The ``calendars`` of an export/apply file (pure): written, read, refused and planned."""

from __future__ import annotations

import json
from typing import Any

import pytest
from task_rows import periodic_task

from celery_cronstore.adopt.calendars import FileCalendar
from celery_cronstore.adopt.document import (
    DocumentError,
    dump,
    export_document,
    load_text,
    parse_document,
    read_document,
)
from celery_cronstore.adopt.plan import make_plan
from celery_cronstore.adopt.records import Incoming
from celery_cronstore.policy.exclusions import CalendarText, calendar_text

XMAS = CalendarText("xmas", ("2026-12-24..2026-12-26",), None, "Christmas ✓")
MAINT = CalendarText(
    "maint", ("2026-12-07T22:00:00Z..2026-12-08T02:00:00Z", "2026-11-02"), None, "windows"
)


def doc(*calendars: Any, tasks: Any = ()) -> dict[str, Any]:
    return {"cronstore": 1, "tasks": list(tasks), "calendars": list(calendars)}


def task(name: str, exclude: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "task": "app.t", "timer": "every 1h"}
    if exclude is not None:
        entry["exclude"] = exclude
    return entry


def plan_of(
    data: dict[str, Any],
    stored: dict[str, CalendarText] | None = None,
    current: dict[str, Any] | None = None,
    **options: Any,
) -> Any:
    read = parse_document(data, "f")
    return make_plan(
        read.tasks,
        current or {},
        source="file",
        default_tz="UTC",
        manage_all=True,
        calendars=read.calendars,
        stored_calendars=stored if stored is not None else {},
        **options,
    )


# -- writing --------------------------------------------------------------------------------


def test_calendars_are_written_as_stored_sorted_with_sorted_keys_and_stable_bytes() -> None:
    first = dump(export_document([], [XMAS, MAINT]))
    assert first == dump(export_document([], [MAINT, XMAS]))
    data = json.loads(first)
    assert data["calendars"] == [
        {
            "name": "maint",
            "entries": ["2026-12-07T22:00:00Z..2026-12-08T02:00:00Z", "2026-11-02"],
            "holidays": None,
            "description": "windows",
        },
        {
            "name": "xmas",
            "entries": ["2026-12-24..2026-12-26"],
            "holidays": None,
            "description": "Christmas ✓",
        },
    ]
    assert all(list(c) == sorted(c) for c in data["calendars"])
    assert "Christmas ✓" in first
    yaml_text = dump(export_document([], [XMAS, MAINT]), "yaml")
    assert yaml_text == dump(export_document([], [MAINT, XMAS]), "yaml")
    # Read back (YAML quotes the day-like texts), each is the calendar that was written.
    for text, format_ in ((first, "json"), (yaml_text, "yaml")):
        read = parse_document(load_text(text, format_, "f"), "f").calendars
        assert read == [FileCalendar("maint", "f: calendars[0]", MAINT),
                        FileCalendar("xmas", "f: calendars[1]", XMAS)]  # fmt: skip


def test_without_calendars_there_is_no_key_and_a_file_without_it_reads_as_before() -> None:
    assert "calendars" not in export_document([])
    assert export_document([], [])["calendars"] == []
    old = {"cronstore": 1, "tasks": [task("a", "xmas")]}
    read = parse_document(old, "f")
    assert read.calendars is None
    assert read.tasks == read_document(old, "f")
    assert isinstance(read.tasks[0], Incoming)


def test_a_calendar_is_kept_in_canonical_text() -> None:
    assert calendar_text("x", [" 2026-12-25 "], " de-by ", "") == CalendarText(
        "x", ("2026-12-25",), "DE-BY", ""
    )


def test_a_hand_written_yaml_day_is_read_as_the_day() -> None:
    data = load_text(
        "cronstore: 1\ntasks: []\ncalendars:\n- name: d\n  entries: [2026-12-25]\n", "yaml", "f"
    )
    (read,) = parse_document(data, "f").calendars or []
    assert read.text == CalendarText("d", ("2026-12-25",))


# -- what is refused ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("calendars", "message"),
    [
        ("xmas", "f: 'calendars' must be a list of calendars, got a str: give 'calendars: []'"),
        (None, "'calendars' must be a list of calendars, got nothing"),
        ({"xmas": {}}, "'calendars' must be a list"),
        (["xmas"], "f: calendars[0] must be a mapping of name, entries, holidays, description"),
        ([{"entries": ["2026-12-25"]}], "f: calendars[0] has no name (got None): give every"),
        ([{"name": " "}], "calendars[0] has no name"),
        ([{"name": 5}], "has no name (got 5)"),
        (
            [{"name": "x", "entries": [], "colour": 1, "holiday": "US"}],
            "f: calendars[0] (x): unknown key(s) colour, holiday: a calendar has only name, "
            "entries, holidays, description",
        ),
    ],
)
def test_a_calendars_key_of_the_wrong_shape_refuses_the_document(
    calendars: Any, message: str
) -> None:
    data = {"cronstore": 1, "tasks": [task("a")], "calendars": calendars}
    with pytest.raises(DocumentError) as caught:
        read_document(data, "f")
    assert message in str(caught.value)
    with pytest.raises(DocumentError, match="unknown top-level key"):
        read_document({"cronstore": 1, "tasks": [], "calendar": []}, "f")


@pytest.mark.parametrize(
    ("calendar", "reason"),
    [
        (
            {"entries": ["2026-12-25", "2026-13-01"]},
            "calendar 'bad': calendar entry '2026-13-01': '2026-13-01' is not a day",
        ),
        ({"entries": ["2026-12-26..2026-12-24"]}, "the span ends before it starts"),
        ({"entries": "2026-12-25"}, "calendar 'bad': entries must be a list of days"),
        ({"entries": [20261225]}, "calendar entry 20261225 is not text"),
        ({"entries": []}, "calendar 'bad' is empty"),
        ({}, "calendar 'bad' is empty"),
        ({"entries": ["2026-12-25"], "holidays": 5}, "holidays must be a country code"),
        ({"entries": ["2026-12-25"], "holidays": "united states"}, "holidays 'UNITED STATES'"),
        ({"entries": ["2026-12-25"], "description": ["x"]}, "description must be text"),
        ({"entries": ["2026-12-25"], "description": "a\x00b"}, "description"),
    ],
)
def test_a_bad_calendar_is_refused_alone_with_the_tasks_that_name_it(
    calendar: dict[str, Any], reason: str
) -> None:
    data = doc(
        {"name": "bad", **calendar},
        {"name": "good", "entries": ["2026-12-25"]},
        tasks=[task("uses-bad", "good,bad"), task("uses-good", "good"), task("plain")],
    )
    bad, good = parse_document(data, "f").calendars or []
    assert bad.text is None
    assert reason in bad.reason
    assert good.text == CalendarText("good", ("2026-12-25",))
    plan = plan_of(data)
    assert [(c.action, c.name) for c in plan.calendars] == [("refuse", "bad"), ("create", "good")]
    assert plan.calendars[0].line().startswith("refuse    calendar:bad  ")
    assert [(c.action, c.name) for c in plan.changes] == [
        ("refuse", "uses-bad"),
        ("create", "uses-good"),
        ("create", "plain"),
    ]
    assert plan.changes[0].reason == (
        "exclude names calendar 'bad', which is refused (see calendar:bad): fix that "
        "calendar in the file"
    )
    assert [c.name for c in plan.refused] == ["bad", "uses-bad"]


def test_a_calendar_read_twice_is_refused_the_second_time() -> None:
    data = doc({"name": "x", "entries": ["2026-12-25"]}, {"name": "x", "entries": ["2026-12-26"]})
    first, second = parse_document(data, "f").calendars or []
    assert first.text == CalendarText("x", ("2026-12-25",))
    assert (second.text, second.reason) == (None, "read twice: the first one is kept")


# -- planning -------------------------------------------------------------------------------


def test_calendars_are_created_updated_or_unchanged_and_tasks_checked_against_them() -> None:
    stored = {"xmas": XMAS, "maint": MAINT}
    data = doc(
        {"name": "xmas", "entries": ["2026-12-24..2026-12-26"], "description": "Christmas ✓"},
        {"name": "maint", "entries": ["2026-11-02"], "description": "windows"},
        {"name": "new", "entries": ["2027-01-01"], "holidays": None},
        tasks=[task("a", "xmas,new"), task("b", "maint"), task("c", "nowhere")],
    )
    plan = plan_of(data, stored)
    assert [(c.action, c.name) for c in plan.calendars] == [
        ("unchanged", "xmas"),
        ("update", "maint"),
        ("create", "new"),
    ]
    assert plan.calendars[1].line() == (
        "update    calendar:maint  (entries: ['2026-12-07T22:00:00Z..2026-12-08T02:00:00Z', "
        "'2026-11-02'] -> ['2026-11-02'])"
    )
    assert plan.calendars[2].line() == "create    calendar:new  (1 entry)"
    assert [(c.action, c.name) for c in plan.changes] == [
        ("create", "a"),
        ("create", "b"),
        ("refuse", "c"),
    ]
    assert plan.changes[2].reason == (
        "exclude names no calendar 'nowhere': create it first (cronstore calendar add "
        "nowhere ...) or add it to the file's calendars"
    )
    assert plan.calendar_counts() == {
        "create": 1,
        "update": 1,
        "unchanged": 1,
        "remove": 0,
        "refuse": 0,
    }
    data = plan.as_json()["calendars"]
    assert data["changes"][2] == {
        "action": "create",
        "name": "new",
        "origin": "f: calendars[2]",
        "fields": {
            "entries": {"old": None, "new": ["2027-01-01"]},
            "holidays": {"old": None, "new": None},
            "description": {"old": None, "new": ""},
        },
    }


def test_what_a_stored_task_already_names_is_not_refused() -> None:
    """A task kept as it is, whose stored ``exclude`` names a calendar removed by force,
    is unchanged: the file did not make it so."""
    stored_task = periodic_task(name="a", task="app.t", timer="every 1h", exclude="gone")
    data = {"cronstore": 1, "tasks": [{"name": "a", "task": "app.t", "timer": "every 1h"}]}
    plan = plan_of(data, {}, {"a": stored_task})
    assert [c.action for c in plan.changes] == ["unchanged"]


@pytest.mark.parametrize("with_key", [True, False])
def test_prune_removes_the_unlisted_calendars_no_task_names_only_with_the_key(
    with_key: bool,
) -> None:
    stored = {name: CalendarText(name, ("2026-12-25",)) for name in ("a", "b", "c", "d")}
    current = {
        # b is named by a task the file does not name but prune keeps (it has an owner);
        # d only by a task prune removes.
        "owned": periodic_task(name="owned", exclude="b", owner_type="t", owner_id="1"),
        "gone": periodic_task(name="gone", exclude="d"),
    }
    data: dict[str, Any] = {"cronstore": 1, "tasks": [task("kept", "a")]}
    if with_key:
        data["calendars"] = [{"name": "a", "entries": ["2026-12-25"]}]
    plan = plan_of(data, stored, current, prune=True, prunable=lambda t: t.owner_type is None)
    removed = [c.name for c in plan.calendars if c.action == "remove"]
    assert removed == (["c", "d"] if with_key else [])
    assert [c.name for c in plan.changes if c.action == "remove"] == ["gone"]
    unpruned = plan_of(data, stored, current)
    assert [c.action for c in unpruned.calendars] == (["unchanged"] if with_key else [])
