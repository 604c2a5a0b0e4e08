"""The field table: each field's parsing and checks, one new field seen by every window,
and the same bad input refused by every window with the same message."""

from __future__ import annotations

import inspect
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from celery.bin.base import CLIContext
from click.testing import CliRunner
from refusals import GOOD, REFUSALS, as_text, make_app
from werkzeug.test import Client

from celery_cronstore import fields
from celery_cronstore.beat.schedule_sync import entry_policies, sync_beat_schedule
from celery_cronstore.catalog import TaskCatalog
from celery_cronstore.cli import cronstore
from celery_cronstore.cli.tasks import definition_options
from celery_cronstore.fields import Field, FieldValueError
from celery_cronstore.store import Store
from celery_cronstore.store.rows import check_values
from celery_cronstore.store.seam import NullSeam, TaskSeam
from celery_cronstore.web import create_app
from celery_cronstore.web.forms import blank, changes

TOKEN = "tok-" + "f" * 20

# -- each field -----------------------------------------------------------------------------

#: ``(field, text, value)``: what the text of a command line or a form gives.
PARSED = [
    ("name", " job ", "job"),
    ("task", "mail.poll", "mail.poll"),
    ("enabled", "on", True),
    ("enabled", "", False),
    ("description", "", ""),
    ("timer", "every 5m", "every 5m"),
    ("kind", "", None),
    ("kind", "cron", "cron"),
    ("tz", "", None),
    ("tz", "Europe/Berlin", "Europe/Berlin"),
    ("args", "[1, 2]", [1, 2]),
    ("args", "", []),
    ("kwargs", '{"a": 1}', {"a": 1}),
    ("options", '{"queue": "q"}', {"queue": "q"}),
    ("misfire_policy", "run_all", "run_all"),
    ("misfire_policy", "", "run_once"),
    ("misfire_limit", "5", 5),
    ("misfire_limit", "", 100),
    ("overlap_policy", "skip", "skip"),
    ("start_deadline", "", None),
    ("start_deadline", "2.5", 2.5),
    ("abandon_policy", "rerun", "rerun"),
    ("tolerance", "0", 0.0),
    ("max_retries", "3", 3),
    ("alert_after", "", None),
    ("alert_after", "3 periods", "3 periods"),
    ("alert_after", "6h", "6h"),
    ("owner", "tenant:42", ("tenant", "42")),
    ("owner", "", None),
    ("jitter", "", None),
    ("jitter", "90", 90.0),
    ("start_at", "", None),
    ("start_at", "2027-01-01T09:00:00+01:00", datetime(2027, 1, 1, 8, tzinfo=timezone.utc)),
    ("end_at", " 2027-01-01T08:00:00Z ", datetime(2027, 1, 1, 8, tzinfo=timezone.utc)),
]

#: ``(field, text, what the message says)``.
REFUSED_TEXT = [
    ("name", "  ", "name must be a non-empty string: give a name, got '  '"),
    ("task", "", "task must be a non-empty string: give the Celery task name (e.g. mail.poll)"),
    ("timer", "", "timer must be a non-empty string: give a timer"),
    ("enabled", "maybe", "enabled must be yes or no"),
    ("kind", "weekly", "kind must be one of ('calendar', 'cron', 'interval', 'once', 'solar')"),
    ("args", "[1,", "args is not valid JSON"),
    ("args", '{"a": 1}', "args must be a JSON array"),
    ("kwargs", "[]", "kwargs must be a JSON object"),
    ("options", '{"bogus": 1}', "unknown Celery option(s) bogus"),
    ("misfire_policy", "sometimes", "misfire_policy must be one of"),
    ("misfire_limit", "0", "misfire_limit must be a whole number of at least 1, got 0"),
    ("misfire_limit", "1.5", "misfire_limit must be a whole number of at least 1, got 1.5"),
    ("misfire_limit", "lots", "misfire_limit must be a whole number of at least 1, got 'lots'"),
    ("start_deadline", "-1", "start_deadline must be a non-negative number of seconds, got -1"),
    ("tolerance", "soon", "tolerance must be a non-negative number of seconds, got 'soon'"),
    ("tolerance", "nan", "tolerance must be a non-negative number of seconds, got nan"),
    ("max_retries", "-1", "max_retries must be a non-negative integer, got -1"),
    ("owner", "tenant", "owner must be TYPE:ID"),
    ("alert_after", "soon", "alert_after 'soon': cannot read 'soon': give a number of periods"),
    ("alert_after", "x" * 33, "alert_after is longer than 32 characters"),
    ("description", "a\x00b", "description contains a NUL character"),
    ("name", "x" * 201, "name is longer than 200 characters"),
    ("jitter", "-1", "jitter must be a number of seconds from 0 to 604800 (a week), got -1"),
    ("jitter", "604801", "jitter must be from 0 to 604800 seconds (a week), got 604801"),
    ("start_at", "tomorrow", "start_at must be an ISO-8601 instant with its offset"),
    ("end_at", "2027-01-01 09:00", "end_at 2027-01-01T09:00:00 has no offset: add one"),
    ("end_at", "0001-01-01T00:00:00Z", "end_at must be between the years 1971 and 9998"),
]

#: ``(field, Python value, what the message says)``: what the API refuses.
REFUSED_VALUES = [
    ("task", 7, "task must be a string, got int"),
    ("enabled", "yes", "enabled must be True or False"),
    ("args", "not-a-list", "args must be a list, got str"),
    ("args", [float("nan")], "args must be JSON-serializable"),
    ("kwargs", [1], "kwargs must be a mapping, got list"),
    ("misfire_limit", True, "misfire_limit must be a whole number of at least 1, got True"),
    ("max_retries", 1.0, "max_retries must be a non-negative integer, got 1.0"),
    ("tolerance", None, None),
    ("misfire_policy", None, "misfire_policy must be one of"),
    ("owner", ("", "1"), "owner type must be a non-empty string"),
    ("start_at", datetime(2027, 1, 1), "start_at 2027-01-01T00:00:00 has no offset"),
    ("end_at", 1700000000, "end_at must be an ISO-8601 instant with its offset"),
]


@pytest.mark.parametrize(("name", "text", "value"), PARSED)
def test_text_parses_to_the_value(name: str, text: str, value: Any) -> None:
    assert fields.field(name).parse(text) == value


@pytest.mark.parametrize(("name", "text", "message"), REFUSED_TEXT)
def test_bad_text_is_refused_naming_the_field(name: str, text: str, message: str) -> None:
    with pytest.raises(FieldValueError, match=re.escape(message)) as caught:
        fields.field(name).parse(text)
    assert caught.value.field == name


@pytest.mark.parametrize(("name", "value", "message"), REFUSED_VALUES)
def test_bad_values_are_refused_naming_the_field(name: str, value: Any, message: str) -> None:
    spec = fields.field(name)
    if message is None:
        assert spec.check(value) is value
        return
    with pytest.raises(FieldValueError, match=re.escape(message)):
        spec.check(value)


@pytest.mark.parametrize("spec", fields.table(), ids=lambda f: f.name)
def test_text_round_trips_and_defaults_pass_their_own_check(spec: Field) -> None:
    if not spec.required:
        assert spec.check(spec.default) == spec.default
        assert spec.parse(spec.text(spec.default)) == spec.default
    assert spec.help, spec.name
    if spec.choices:
        assert spec.default in (*spec.choices, None)


def test_store_add_defaults_are_the_table_s() -> None:
    signature = inspect.signature(Store.add).parameters
    for spec in fields.table():
        if spec.required or spec.name == "name":
            continue
        assert spec.name in signature, f"Store.add lacks {spec.name}"
        assert signature[spec.name].default == (
            () if spec.name == "args" else None if spec.type is dict else spec.default
        ), spec.name


def test_the_catalog_and_the_null_seam_are_task_seams() -> None:
    app = make_app("sqlite://")
    seams: list[TaskSeam] = [TaskCatalog(app), NullSeam()]
    catalog = seams[0]
    assert catalog.registered("app.pair") is None
    assert "not registered in app 'refusals'" in (catalog.registered("app.nope") or "")
    assert catalog.call_problem("app.pair", [1], {}) is not None
    # A plain task: the ledger sees it start (cronstore_watch_plain_tasks), but a second
    # publish could run it twice.
    assert (catalog.guarded("app.pair"), catalog.redeliverable("app.pair")) == (True, False)
    assert catalog.guarded("app.nope") is False, "sent by name: its workers are not known"
    app.conf.cronstore_watch_plain_tasks = False
    assert TaskCatalog(app).guarded("app.pair") is False
    app.conf.cronstore_require_registered = False
    assert TaskCatalog(app).registered("app.nope") is None, "sent by name: fine"
    app.conf.cronstore_task_allowlist = ["safe."]
    assert "not in cronstore_task_allowlist" in (TaskCatalog(app).registered("app.pair") or "")
    assert seams[1].registered("x") is None
    assert seams[1].call_problem("x", [], {}) is None
    assert (seams[1].guarded("x"), seams[1].redeliverable("x")) == (False, True)


# -- one field added to the table is in every window ---------------------------------------


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'fields.sqlite'}"
    store = Store(url)
    store.upgrade()
    store.close()
    return url


def run_cli(app: Any, *args: str) -> Any:
    return CliRunner().invoke(
        cronstore, list(args), obj=CLIContext(app=app, no_color=True, workdir=None)
    )


def web_client(url: str, app: Any) -> tuple[Client, str]:
    client = Client(create_app(Store(url), token=TOKEN, celery_app=app))
    assert client.post("/login", data={"token": TOKEN, "next": "/"}).status_code == 303
    page = client.get("/task/new").get_data(as_text=True)
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match is not None
    return client, match.group(1)


def test_a_field_added_to_the_table_is_in_every_window(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    note = Field("note", str, "", "A note for the operators.", max_chars=50)
    monkeypatch.setattr(fields, "FIELDS", [*fields.FIELDS, note])
    app = make_app(url)
    # The command line: an option of add and edit, with the table's help.
    help_text = run_cli(app, "add", "--help").output
    assert "--note TEXT" in help_text
    assert "A note for the operators." in help_text
    assert "--note" in [o.opts[0] for o in definition_options(edit=True)]
    # The dashboard: an input of the form, parsed by the table.
    client, _ = web_client(url, app)
    page = client.get("/task/new").get_data(as_text=True)
    assert 'name="note"' in page
    assert "A note for the operators." in page
    assert "note" in blank()
    assert changes({**blank(), "task": "t", "timer": "hourly", "note": "hi"})[0]["note"] == "hi"
    # beat_schedule: a key of an entry's "cronstore" mapping, with the table's default.
    assert entry_policies()["note"] == ""
    # The API: a keyword Store.add and Store.update take, checked by the table (before
    # anything is written: this database has no such column).
    assert check_values({"note": "hi"}) == {"note": "hi"}
    store = Store(url)
    with pytest.raises(FieldValueError, match="note is longer than 50 characters"):
        store.add("x", task="app.pair", timer="hourly", args=[1, 2], note="n" * 51)
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        store.add("x", task="app.pair", timer="hourly", nope=1)
    store.close()
    # (The Django admin's form: test_contrib_django_admin.py, where Django is set up.)
    monkeypatch.undo()
    assert "note" not in entry_policies()
    assert "--note" not in run_cli(app, "add", "--help").output


def test_beat_schedule_takes_every_entry_field_and_refuses_others(url: str) -> None:
    app = make_app(url)
    app.conf.beat_schedule = {
        "a": {"task": "app.pair", "schedule": 60, "args": (1, 2), "cronstore": {"max_retries": 2}},
        "b": {"task": "app.pair", "schedule": 60, "args": (1, 2), "cronstore": {"queue": "q"}},
        "c": {"task": "app.pair", "schedule": 60, "args": (1, 2), "cronstore": {"tolerance": -1}},
    }
    store = Store.from_app(app)
    sync_beat_schedule(store, app)
    assert [t.name for t in store.list()] == ["a"]
    assert store.get("a").max_retries == 2
    store.close()


# -- the same bad input, refused by every window with the same message --------------------


def _cli_args(values: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, text in as_text(values).items():
        out += [fields.field(key).flag, text]
    return out


@pytest.mark.parametrize(
    ("case", "change", "field", "message"), REFUSALS, ids=[c[0] for c in REFUSALS]
)
def test_every_window_refuses_the_same_input_with_the_same_message(
    url: str, case: str, change: dict[str, Any], field: str, message: str
) -> None:
    app = make_app(url)
    values = {**GOOD, **change}
    # The API, asked to refuse what the windows refuse (its default stores a past one-off
    # or an unregistered task as it always has: beat then reports them).
    store = Store.from_app(app)
    with pytest.raises(ValueError, match=re.escape(message)):
        store.add("api", force=False, **values)
    # The command line: bad input, exit status 2, the message (no traceback).
    result = run_cli(app, "add", "cli", *_cli_args(values))
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output
    # The dashboard: the message next to the field.
    client, csrf = web_client(url, app)
    form = {**as_text(values), "name": "web", "csrf": csrf, "submit": "save", "enabled": "on"}
    response = client.post("/task/new", data=form)
    page = response.get_data(as_text=True)
    assert response.status_code == 400
    shown = re.search(rf'id="error-{field}">(.*?)</p>', page, re.DOTALL)
    assert shown is not None, page
    assert message.replace("'", "&#39;") in shown.group(1)
    assert store.list() == []
    store.close()


def test_the_good_definition_passes_every_window(url: str) -> None:
    app = make_app(url)
    store = Store.from_app(app)
    store.add("api", **GOOD)
    assert run_cli(app, "add", "cli", *_cli_args(GOOD)).exit_code == 0
    client, csrf = web_client(url, app)
    form = {**as_text(GOOD), "name": "web", "csrf": csrf, "submit": "save", "enabled": "on"}
    assert client.post("/task/new", data=form).status_code == 303
    assert [t.name for t in store.list()] == ["api", "cli", "web"]
    # --force stores what beat would refuse but the store can hold; the API says so too.
    store.add("later", task="app.nope", timer="2020-01-01T09:00:00Z", force=True)
    forced = run_cli(app, "add", "f", "--task", "app.nope", "--timer", "hourly", "--force")
    assert forced.exit_code == 0, forced.output
    refused = run_cli(app, "add", "g", "--task", "app.nope", "--timer", "hourly")
    assert "or give --force" in refused.output
    store.close()
