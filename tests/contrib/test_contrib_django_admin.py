"""The Django admin of periodic tasks, through Django's test client, on SQLite and PostgreSQL.

Django is configured once per process (``django_setup.configure``): auth and sessions
live in the SQLite ``default`` database; the cronstore tables the admin shows are those of
the alias under test (``CRONSTORE_DATABASE``), written by a store on the same database.
"run now" publishes with a Celery app on the in-memory broker.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from html import unescape
from io import StringIO
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from celery import Celery
from conftest import POSTGRES_URL, need_service
from django_setup import configure
from hostile import HOSTILE, HTML_HOSTILE
from refusals import GOOD, REFUSALS, as_text
from refusals import make_app as make_refusing_app
from timeline import T0

from celery_cronstore.contrib.django import store_url_from_django
from celery_cronstore.store import Store
from celery_cronstore.store.schema import periodic_task
from celery_cronstore.timers import parse_timer

URL = "/admin/cronstore/periodictask/"


@pytest.fixture(params=["default", pytest.param("postgres", marks=pytest.mark.postgres)])
def alias(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Django database alias (SQLite, PostgreSQL) holding the cronstore tables."""
    if request.param == "postgres":
        need_service("PostgreSQL", POSTGRES_URL, 5432)
    aliases = configure(request, tmp_path_factory)
    if request.param not in aliases:
        pytest.fail(f"{request.param} came up after Django was configured; rerun")
    return str(request.param)


@pytest.fixture
def db_url(alias: str) -> str:
    """The store's URL on the alias, its tables emptied (replaces conftest's ``db_url``)."""
    url = store_url_from_django(alias)
    s = Store(url)
    try:
        with s.begin() as conn:
            for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
                conn.exec_driver_sql(f"DELETE FROM {table}")
    finally:
        s.close()
    return url


@pytest.fixture
def celery_app(db_url: str) -> Celery:
    app = Celery(f"admin-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = db_url
    app.conf.task_ignore_result = True
    app.conf.cronstore_require_registered = False  # its tasks live in other services
    return app


@pytest.fixture
def client(alias: str, store: Store, celery_app: Celery) -> Iterator[Any]:
    """A test client logged in as a superuser, the admin pointed at ``store``."""
    from django.contrib.auth.models import User
    from django.test import Client, override_settings

    User.objects.filter(username="admin").delete()
    User.objects.create_superuser("admin", "admin@example.org", "pw")
    web = Client()
    assert web.login(username="admin", password="pw")
    with override_settings(
        CRONSTORE_DATABASE=alias, CRONSTORE_STORE=store, CRONSTORE_CELERY_APP=celery_app
    ):
        yield web


def text_of(response: Any) -> str:
    return unescape(response.content.decode())


def pk_of(store: Store, name: str) -> int:
    return store.get(name).id


def names_listed(response: Any) -> list[str]:
    return [
        unescape(n)
        for n in re.findall(r'<th class="field-name"><a [^>]*>(.*?)</a>', response.content.decode())
    ]


def seed(store: Store) -> None:
    store.add("poll-1", task="mail.poll", timer="*:0/5", owner=("mail_channel", 1))
    store.add("poll-2", task="mail.poll", timer="every 10m", owner=("mail_channel", 2))
    store.add("report", task="reports.daily", timer="0 9 * * 1-5", tz="Europe/Paris")
    store.add("cleanup", task="clean", timer="daily", enabled=False)


# -- the list -----------------------------------------------------------------------------------


def test_anonymous_users_are_sent_to_the_login_page(client: Any) -> None:
    client.logout()
    response = client.get(URL)
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_list_shows_the_columns(client: Any, store: Store) -> None:
    seed(store)
    response = client.get(URL)
    assert response.status_code == 200
    assert names_listed(response) == ["cleanup", "poll-1", "poll-2", "report"]
    page = text_of(response)
    # the timer with its description, the zone, the owner, the next fire in its zone
    assert "0 9 * * 1-5" in page
    assert parse_timer("0 9 * * 1-5", tz="Europe/Paris").describe() in page
    assert "Europe/Paris" in page
    assert "mail_channel:1" in page
    first = parse_timer("0 9 * * 1-5", tz="Europe/Paris").next_after(T0)
    assert first is not None
    # Times in the display zone (Django's current one), named in the column's header.
    from django.utils import timezone as django_tz

    display = django_tz.get_current_timezone_name()
    moment = first.astimezone(ZoneInfo(display))
    assert f'{moment:%Y-%m-%d}</span> <span class="cronstore-when">{moment:%H:%M:%S}' in page
    assert f"next fire ({display.lower()})" in page.lower().replace("\u200b", "")
    assert "disabled" in page
    for header in ("last outcome", "error", "owner", "enabled"):
        assert f">{header.capitalize()}<" in page or f">{header}<" in page.lower()


def test_filters_and_search(client: Any, store: Store) -> None:
    seed(store)
    with store.begin() as conn:
        conn.execute(
            sa.update(periodic_task)
            .where(periodic_task.c.name == "report")
            .values(error="timer: bad zone")
        )

    def listed(**query: str) -> list[str]:
        response = client.get(URL, query)
        assert response.status_code == 200, response
        return names_listed(response)

    assert listed(enabled="no") == ["cleanup"]
    assert listed(enabled="yes") == ["poll-1", "poll-2", "report"]
    assert listed(error="yes") == ["report"]
    assert listed(kind="cron") == ["report"]
    assert listed(kind="interval") == ["poll-2"]
    assert listed(owner_type="mail_channel") == ["poll-1", "poll-2"]
    assert listed(q="poll") == ["poll-1", "poll-2"]
    assert listed(q="reports.") == ["report"]
    assert listed(q="mail_channel:2") == ["poll-2"]
    assert listed(q="nothing-like-it") == []
    assert "timer: bad zone" in text_of(client.get(URL, {"error": "yes"}))
    # The owner filter offers the owner types there are.
    assert 'href="?owner_type=mail_channel"' in client.get(URL).content.decode()
    # Sorting along the read model's indexes: by task, descending.
    assert listed(o="-2") == ["report", "poll-2", "poll-1", "cleanup"]  # ties: newest id first


def test_pages_never_count_the_table(client: Any, store: Store, alias: str) -> None:
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    for i in range(53):
        store.add(f"task-{i:03d}", task="t", timer="hourly")
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", record)
    try:
        with CaptureQueriesContext(connections[alias]) as orm:
            first = client.get(URL)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", record)
    assert len(names_listed(first)) == 50
    assert "next &rsaquo;" in first.content.decode()
    everything = statements + [q["sql"] for q in orm.captured_queries]
    assert not [s for s in everything if "count(" in s.lower()], everything
    second = client.get(URL, {"p": "2"})
    assert names_listed(second) == ["task-050", "task-051", "task-052"]
    assert "previous" in second.content.decode()
    assert "next &rsaquo;" not in second.content.decode()


@pytest.mark.parametrize("text", HOSTILE[:6] + HTML_HOSTILE)
def test_hostile_strings_are_escaped(client: Any, store: Store, text: str) -> None:
    name = f"x{text}"[:200]
    store.add(name, task=f"t{text}"[:200], timer="hourly", description=text)
    pk = pk_of(store, name)
    for url in (URL, f"{URL}{pk}/change/", f"{URL}{pk}/fires/", URL + "?q=x"):
        body = client.get(url).content.decode()
        assert "<script>alert" not in body
        assert "<img src=x" not in body
        assert "<svg onload" not in body


# -- the edit and add forms ---------------------------------------------------------------------


def form_of(store: Store, current: str, /, **changes: str) -> dict[str, str]:
    task = store.get(current)
    values = {
        "name": task.name,
        "task": task.task,
        "enabled": "on" if task.enabled else "",
        "description": task.description,
        "timer": task.timer,
        "timer_kind": "",
        "tz": task.tz,
        "args": "[]",
        "kwargs": "{}",
        "options": "{}",
        "misfire_policy": task.misfire_policy,
        "misfire_limit": str(task.misfire_limit),
        "overlap_policy": task.overlap_policy,
        "abandon_policy": task.abandon_policy,
        "start_deadline": "",
        "tolerance": "",
        "max_retries": "0",
        "owner_type": task.owner_type or "",
        "owner_id": task.owner_id or "",
        "loaded_version": str(task.version),
    }
    values.update(changes)
    return {k: v for k, v in values.items() if not (k == "enabled" and not v)}


def test_change_form_shows_the_next_fire_times_in_the_tasks_zone(client: Any, store: Store) -> None:
    seed(store)
    response = client.get(f"{URL}{pk_of(store, 'report')}/change/")
    assert response.status_code == 200
    page = text_of(response)
    assert page.count("CET</li>") == 10
    assert "Fire history" in page


def test_a_bad_timer_is_shown_on_the_field_and_nothing_changes(client: Any, store: Store) -> None:
    seed(store)
    before = store.get("poll-1")
    url = f"{URL}{before.id}/change/"
    response = client.post(url, form_of(store, "poll-1", timer="*-*-32 10:00"))
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert "day 32 is out of range 1..31" in form.errors["timer"][0]
    assert 'class="errorlist' in response.content.decode()
    assert store.get("poll-1") == before
    zone = client.post(url, form_of(store, "poll-1", tz="Mars/Olympus"))
    assert "unknown time zone" in zone.context["adminform"].form.errors["tz"][0]
    bad_json = client.post(url, form_of(store, "poll-1", args="{not json"))
    assert "not valid JSON" in bad_json.context["adminform"].form.errors["args"][0]
    assert store.get("poll-1") == before


def test_a_good_edit_replans_the_next_run(client: Any, store: Store) -> None:
    seed(store)
    before = store.get("poll-1")
    response = client.post(
        f"{URL}{before.id}/change/",
        form_of(store, "poll-1", timer="Mon 07:30", tz="Europe/Berlin", args="[1, 2]"),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    after = store.get("poll-1")
    assert (after.timer_kind, after.tz, after.args) == ("calendar", "Europe/Berlin", [1, 2])
    assert after.next_run == parse_timer("Mon 07:30", tz="Europe/Berlin").next_after(T0)
    assert after.next_run != before.next_run
    assert after.version == before.version + 1
    assert "fires next at" in text_of(client.get(response["Location"]))


def test_an_edit_racing_another_is_refused_with_a_form_error(client: Any, store: Store) -> None:
    seed(store)
    before = store.get("poll-1")
    url = f"{URL}{before.id}/change/"
    page = client.get(url).content.decode()
    assert f'name="loaded_version" value="{before.version}"' in page
    assert 'type="hidden" name="loaded_version"' in page
    stale = form_of(store, "poll-1", description="mine", timer="every 10m")
    meanwhile = store.update("poll-1", description="saved meanwhile", args=[7])
    response = client.post(url, stale)
    assert response.status_code == 200
    errors = response.context["adminform"].form.non_field_errors()
    assert len(errors) == 1
    assert "changed by someone else" in errors[0]
    assert "reload" in errors[0]
    assert store.get("poll-1") == meanwhile, "the stale form wrote nothing"
    fresh = client.post(url, form_of(store, "poll-1", description="mine"))
    assert fresh.status_code == 302, fresh.context["adminform"].form.errors
    assert store.get("poll-1").description == "mine"


def test_the_abandon_policy_is_edited_through_the_store(client: Any, store: Store) -> None:
    seed(store)
    url = f"{URL}{pk_of(store, 'poll-1')}/change/"
    assert 'name="abandon_policy"' in client.get(url).content.decode()
    response = client.post(url, form_of(store, "poll-1", abandon_policy="rerun"))
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert store.get("poll-1").abandon_policy == "rerun"
    bad = client.post(url, form_of(store, "poll-1", abandon_policy="twice"))
    assert bad.status_code == 200
    errors = bad.context["adminform"].form.errors
    # The message every window gives (the field table's).
    assert (
        "abandon_policy must be one of ('leave', 'rerun'), got 'twice'"
        in errors["abandon_policy"][0]
    )
    assert store.get("poll-1").abandon_policy == "rerun"


def test_adding_a_taken_name_is_a_field_error(client: Any, store: Store) -> None:
    seed(store)
    response = client.post(f"{URL}add/", form_of(store, "poll-1", name="report"))
    assert response.status_code == 200
    assert "already exists" in response.context["adminform"].form.errors["name"][0]
    assert store.get("report").task == "reports.daily"


def test_add_form_adds_through_the_store(client: Any, store: Store) -> None:
    assert client.get(f"{URL}add/").status_code == 200
    seed(store)
    values = form_of(store, "report", name="weekly", timer="Sun 03:00", kwargs='{"full": true}')
    response = client.post(f"{URL}add/", values)
    assert response.status_code == 302, response.context["adminform"].form.errors
    added = store.get("weekly")
    assert added.kwargs == {"full": True}
    assert added.next_run == parse_timer("Sun 03:00", tz="Europe/Paris").next_after(T0)


def test_orm_writes_are_refused() -> None:
    from celery_cronstore.contrib.django.models import PeriodicTask, ReadOnlyError

    with pytest.raises(ReadOnlyError, match=r"through celery_cronstore\.store\.Store"):
        PeriodicTask(name="x").save()


def test_a_changed_expression_left_at_the_stored_kind_is_detected_again(
    client: Any, store: Store
) -> None:
    """Issue 24: the kind select shows the stored kind; "every 5m" over a cron timer used to
    be parsed as cron ("a cron expression has 5 fields")."""
    store.add("five", task="mail.poll", timer="*/5 * * * *")
    url = f"{URL}{pk_of(store, 'five')}/change/"
    response = client.post(url, form_of(store, "five", timer="every 5m", timer_kind="cron"))
    assert response.status_code == 302, response.context["adminform"].form.errors
    saved = store.get("five")
    assert (saved.timer_kind, saved.timer) == ("interval", "every 5m")
    # A kind changed on purpose is honoured; one the expression is not of is refused.
    chosen = client.post(url, form_of(store, "five", timer="every 10m", timer_kind="cron"))
    assert chosen.status_code == 200
    error = chosen.context["adminform"].form.errors["timer"][0]
    assert "the timer kind is cron but the expression reads as interval" in error
    assert "'every 10m'" in error
    assert store.get("five") == saved


# -- actions, history, delete -------------------------------------------------------------------


def act(client: Any, action: str, *pks: int) -> Any:
    data = {"action": action, "_selected_action": [str(pk) for pk in pks], "index": "0"}
    return client.post(URL, data, follow=True)


def test_enable_disable_and_run_now(client: Any, store: Store) -> None:
    seed(store)
    one, two = pk_of(store, "poll-1"), pk_of(store, "poll-2")
    response = act(client, "disable_tasks", one, two)
    assert "Disabled: poll-1, poll-2." in text_of(response)
    assert not store.get("poll-1").enabled
    assert not store.get("poll-2").enabled
    assert store.get("poll-1").next_run is None
    act(client, "enable_tasks", one)
    assert store.get("poll-1").enabled
    assert store.get("poll-1").next_run == parse_timer("*:0/5").next_after(T0)
    assert store.history("report") == []
    response = act(client, "run_tasks_now", pk_of(store, "report"))
    assert "Sent: report." in text_of(response)
    (fire,) = store.history("report")
    assert fire.state == "published"
    history = client.get(f"{URL}{pk_of(store, 'report')}/fires/")
    assert history.status_code == 200
    assert fire.task_id in history.content.decode()
    assert "published" in text_of(history)
    change = text_of(client.get(f"{URL}{pk_of(store, 'report')}/change/"))
    assert "published" in change
    assert "All fires, newest first" in change
    listed = text_of(client.get(URL, {"q": "report"}))
    assert '<td class="field-last_outcome">published</td>' in listed


def test_run_now_refuses_a_disabled_task(client: Any, store: Store) -> None:
    """Issue 24: it said "Sent" and the worker's guard then dropped the fire."""
    seed(store)
    response = act(client, "run_tasks_now", pk_of(store, "cleanup"), pk_of(store, "report"))
    page = text_of(response)
    assert "Cleanup: periodic task 'cleanup' is disabled: enable it first" in page
    assert "Sent: report." in page
    assert store.history("cleanup") == []
    assert len(store.history("report")) == 1


def test_run_now_without_a_celery_app_says_how_to_name_it(client: Any, store: Store) -> None:
    from django.test import override_settings

    seed(store)
    with override_settings(CRONSTORE_CELERY_APP="no_such_module.app"):
        response = act(client, "run_tasks_now", pk_of(store, "report"))
    assert "Cannot import 'no_such_module.app'" in text_of(response)
    assert store.history("report") == []


def test_fire_history_pages_newest_first(
    client: Any, store: Store, clock: Any, celery_app: Celery
) -> None:
    from celery_cronstore.contrib.django.admin import HISTORY_PAGE, run_now

    seed(store)
    for _ in range(HISTORY_PAGE + 2):
        run_now("report", store=store, app=celery_app)
        clock.advance(minutes=1)
    fires = store.history("report", limit=HISTORY_PAGE + 2)
    url = f"{URL}{pk_of(store, 'report')}/fires/"
    first = client.get(url).content.decode()
    assert first.index(fires[0].task_id) < first.index(fires[1].task_id)
    assert fires[-1].task_id not in first
    second = client.get(url, {"p": "2"}).content.decode()
    assert fires[-1].task_id in second
    assert fires[0].task_id not in second


def test_delete_removes_through_the_store(client: Any, store: Store) -> None:
    seed(store)
    pk = pk_of(store, "cleanup")
    confirm = client.get(f"{URL}{pk}/delete/")
    assert confirm.status_code == 200
    response = client.post(f"{URL}{pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert [t.name for t in store.list()] == ["poll-1", "poll-2", "report"]
    selected = {"action": "delete_selected", "_selected_action": [str(pk_of(store, "poll-1"))]}
    assert "Are you sure" in text_of(client.post(URL, selected))
    client.post(URL, {**selected, "post": "yes"})
    assert [t.name for t in store.list()] == ["poll-2", "report"]


# -- the schema stays Alembic's -----------------------------------------------------------------


def test_cronstore_migrate_and_no_django_schema(client: Any, store: Store) -> None:
    from django.core.management import call_command

    out = StringIO()
    call_command("cronstore_migrate", stdout=out)
    assert "schema at revision" in out.getvalue()
    assert "p@" not in out.getvalue()
    # makemigrations finds nothing to do, and the app's migration creates no table.
    call_command("makemigrations", "cronstore", "--check", "--dry-run", stdout=StringIO())
    sql = StringIO()
    call_command("sqlmigrate", "cronstore", "0001", stdout=sql)
    assert "CREATE TABLE" not in sql.getvalue().upper()
    added = StringIO()
    call_command("sqlmigrate", "cronstore", "0002", stdout=added)
    assert "ALTER TABLE" not in added.getvalue().upper()


# -- the field table: the same refusals as every window, and a new field --------------------


def add_form(values: dict[str, str]) -> dict[str, str]:
    form = {
        "name": "admin-added",
        "task": "",
        "enabled": "on",
        "description": "",
        "timer": "",
        "timer_kind": "",
        "tz": "UTC",
        "args": "[]",
        "kwargs": "{}",
        "options": "{}",
        "misfire_policy": "run_once",
        "misfire_limit": "100",
        "overlap_policy": "allow",
        "abandon_policy": "leave",
        "start_deadline": "",
        "tolerance": "",
        "max_retries": "0",
        "owner_type": "",
        "owner_id": "",
    }
    form.update(values)
    return form


@pytest.mark.parametrize(
    ("case", "change", "field", "message"), REFUSALS, ids=[c[0] for c in REFUSALS]
)
def test_the_admin_refuses_what_every_window_refuses(
    client: Any,
    store: Store,
    db_url: str,
    case: str,
    change: dict[str, Any],
    field: str,
    message: str,
) -> None:
    from django.test import override_settings

    from celery_cronstore.fields import field as spec_of

    with override_settings(CRONSTORE_STORE=store, CRONSTORE_CELERY_APP=make_refusing_app(db_url)):
        good = client.post(f"{URL}add/", add_form(as_text(GOOD)))
        assert good.status_code == 302, good.context["adminform"].form.errors
        store.remove("admin-added")
        response = client.post(f"{URL}add/", add_form(as_text({**GOOD, **change})))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert message in errors[spec_of(field).key][0], errors
    assert store.list() == []


def test_a_field_added_to_the_table_is_in_the_admin_form(
    client: Any, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from celery_cronstore import fields
    from celery_cronstore.contrib.django.forms import build_form

    note = fields.Field("note", str, "", "A note for the operators.", max_chars=50)
    monkeypatch.setattr(fields, "FIELDS", [*fields.FIELDS, note])
    assert "note" in build_form().base_fields
    page = client.get(f"{URL}add/").content.decode()
    assert 'name="note"' in page
    assert "A note for the operators." in page
    response = client.post(f"{URL}add/", add_form({**as_text(GOOD), "note": "n" * 51}))
    errors = response.context["adminform"].form.errors
    assert "note is longer than 50 characters" in errors["note"][0]
    monkeypatch.undo()
    assert "note" not in build_form().base_fields
