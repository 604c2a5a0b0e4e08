"""Exclusion calendars in the Django admin (issue 25), on SQLite and PostgreSQL, through
Django's test client (the admin's fixtures: test_contrib_django_admin.py).

The admin adds and replaces through ``store.calendars.add`` (a refusal is the store's
message on the form), deletes through ``store.calendars.remove`` (a calendar in use is
refused with the store's message naming the tasks unless forced), as the admin user
from the ``admin`` window. A user who may only view, or a post without its CSRF token,
changes nothing.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from test_contrib_django_admin import (  # noqa: F401  (fixtures)
    alias,
    celery_app,
    client,
    db_url,
    text_of,
)

from celery_cronstore.policy.exclusions import ExclusionError
from celery_cronstore.store import Store
from celery_cronstore.store.calendars import CalendarInUseError

CAL = "/admin/cronstore/calendar/"
BAD = [
    pytest.param(["2026-13-01"], "", "hols", id="bad-day"),
    pytest.param(["2026-12-07T22:00..2026-12-08T02:00"], "", "hols", id="window-no-offset"),
    pytest.param([], "XX", "hols", id="unknown-holidays"),
    pytest.param([], "", "hols", id="empty"),
    pytest.param(["2026-12-25"], "", "a b", id="bad-name"),
]


@pytest.fixture(autouse=True)
def clean(store: Store) -> None:
    """The admin tests' database keeps calendars and the audit trail between tests."""
    with store.begin() as conn:
        conn.exec_driver_sql("DELETE FROM cronstore_calendar")
        conn.exec_driver_sql("DELETE FROM cronstore_audit")


def pk_of(name: str) -> int:
    from django.conf import settings

    from celery_cronstore.contrib.django.models import Calendar

    return int(Calendar.objects.using(settings.CRONSTORE_DATABASE).get(name=name).pk)


def messages_of(response: Any) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in response.context["messages"]]


def trail(store: Store) -> list[tuple[str, str, str, str]]:
    return [
        (e.actor, e.window, e.action, e.task_name)
        for e in reversed(store.audit_trail())
        if e.action.startswith("calendar-")
    ]


def test_add_list_replace_and_remove_as_the_admin_user(
    client: Any,  # noqa: F811  (the admin tests' fixture, imported above)
    store: Store,
) -> None:
    assert "Exclusion calendars" in text_of(client.get("/admin/"))
    entries = "2026-12-25\n2026-12-30..2027-01-01\n\n2026-12-07T22:00:00Z..2026-12-08T02:00:00Z"
    form = {"name": "xmas", "entries": entries, "holidays": "", "description": "shop closed"}
    response = client.post(f"{CAL}add/", form)
    assert response.status_code == 302, text_of(response)
    found = store.calendars.get("xmas")
    assert len(found.days) == 2
    assert len(found.windows) == 1
    assert found.description == "shop closed"
    store.add("nightly", task="app.nightly", timer="every 1h", exclude="xmas")

    listed = text_of(client.get(CAL))
    assert "2 day(s)/span(s), 1 window(s)" in listed
    assert "shop closed" in listed
    assert '<td class="field-excluded_by">nightly</td>' in listed
    pk = pk_of("xmas")
    change = text_of(client.get(f"{CAL}{pk}/change/"))
    assert "2026-12-30..2027-01-01\n2026-12-07T22:00:00Z..2026-12-08T02:00:00Z" in change
    assert 'name="name"' not in change  # read-only: the key the store replaces by

    replaced = client.post(f"{CAL}{pk}/change/", {"entries": "2026-12-24", "holidays": ""})
    assert replaced.status_code == 302, text_of(replaced)
    assert [a.isoformat() for a, _ in store.calendars.get("xmas").days] == ["2026-12-24"]
    assert pk_of("xmas") == pk

    # A taken name is the store's message on the name.
    taken = client.post(f"{CAL}add/", {**form, "entries": "2026-12-24"})
    assert taken.status_code == 200
    assert "a calendar named 'xmas' already exists" in text_of(taken)
    assert taken.context["adminform"].form.errors["name"]

    # In use: refused with the store's message naming the task; forced: removed.
    confirm = text_of(client.get(f"{CAL}{pk}/delete/"))
    assert "Excluded by 1 task(s): nightly." in confirm
    assert 'name="force"' in confirm
    refused = client.post(f"{CAL}{pk}/delete/", {"post": "yes"}, follow=True)
    (level, message), *_ = messages_of(refused)
    assert level == "error"
    with pytest.raises(CalendarInUseError) as in_use:
        store.calendars.remove("xmas")
    assert message == str(in_use.value)
    assert "nightly" in message
    assert "xmas" in store.calendars.all()
    forced = client.post(f"{CAL}{pk}/delete/", {"post": "yes", "force": "on"})
    assert forced.status_code == 302
    assert store.calendars.all() == {}

    assert trail(store) == [
        ("admin", "admin", "calendar-add", "calendar:xmas"),
        ("admin", "admin", "calendar-replace", "calendar:xmas"),
        ("admin", "admin", "calendar-remove", "calendar:xmas"),
    ]


@pytest.mark.parametrize(("entries", "holidays", "name"), BAD)
def test_the_admin_refuses_what_the_store_refuses_in_its_words(
    client: Any,  # noqa: F811
    store: Store,
    entries: list[str],
    holidays: str,
    name: str,
) -> None:
    with pytest.raises(ExclusionError) as refused:
        store.calendars.add(name, entries=entries, holidays=holidays or None)
    form = {"name": name, "entries": "\n".join(entries), "holidays": holidays, "description": ""}
    response = client.post(f"{CAL}add/", form)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert [str(refused.value)] in errors.values(), errors
    assert store.calendars.all() == {}
    assert trail(store) == []


def test_the_remove_actions(client: Any, store: Store) -> None:  # noqa: F811
    store.calendars.add("used", entries=["2026-12-25"])
    store.calendars.add("free", entries=["2026-12-26"])
    store.add("nightly", task="app.nightly", timer="every 1h", exclude="used")
    pks = [str(pk_of("used")), str(pk_of("free"))]
    data = {"_selected_action": pks, "index": "0"}
    done = client.post(CAL, {**data, "action": "remove_calendars"}, follow=True)
    shown = messages_of(done)
    assert ("success", "Removed: free.") in shown
    assert any(level == "error" and "nightly" in text for level, text in shown)
    assert list(store.calendars.all()) == ["used"]
    data["_selected_action"] = [str(pk_of("used"))]
    forced = client.post(CAL, {**data, "action": "force_remove_calendars"}, follow=True)
    assert ("success", "Removed: used.") in messages_of(forced)
    assert store.calendars.all() == {}


def test_a_user_who_may_only_view_cannot_write(client: Any, store: Store) -> None:  # noqa: F811
    from django.contrib.auth.models import Permission, User
    from django.test import Client

    store.calendars.add("maint", entries=["2026-03-01"], description="planned")
    pk = pk_of("maint")
    User.objects.filter(username="viewer").delete()
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_calendar"))
    web = Client()
    assert web.login(username="viewer", password="pw")
    assert "planned" in text_of(web.get(CAL))
    assert web.post(f"{CAL}add/", {"name": "x", "entries": "2026-03-02"}).status_code == 403
    assert web.post(f"{CAL}{pk}/delete/", {"post": "yes", "force": "on"}).status_code == 403
    changed = web.post(f"{CAL}{pk}/change/", {"entries": "2026-03-02"})
    assert changed.status_code == 403
    assert list(store.calendars.all()) == ["maint"]
    assert store.calendars.get("maint").days[0][0].isoformat() == "2026-03-01"


def test_a_post_without_its_csrf_token_is_refused(client: Any, store: Store) -> None:  # noqa: F811
    from django.test import Client

    store.calendars.add("maint", entries=["2026-03-01"])
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(_admin())
    refused = strict.post(f"{CAL}add/", {"name": "x", "entries": "2026-03-02"})
    assert refused.status_code == 403
    gone = strict.post(f"{CAL}{pk_of('maint')}/delete/", {"post": "yes", "force": "on"})
    assert gone.status_code == 403
    assert list(store.calendars.all()) == ["maint"]
    assert re.search("CSRF", refused.content.decode())


def _admin() -> Any:
    from django.contrib.auth.models import User

    return User.objects.get(username="admin")
