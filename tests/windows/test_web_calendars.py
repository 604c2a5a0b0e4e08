"""Exclusion calendars from the dashboard (issue 25), on every backend, through the WSGI app
(Werkzeug's test client) and the frozen clock of conftest.

The Calendars page lists each calendar (days and spans, windows, holidays, description
and the tasks that exclude it); a writer adds, replaces and removes through
``store.calendars`` as the logged-in user from the ``web`` window. A refusal is the
store's own message next to its field with status 400 and nothing written; a calendar
in use is removed only with "force"; without CSRF, or for a viewer, nothing is written.
"""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from celery import Celery
from test_web import (  # noqa: F401  (fixtures)
    celery_app,
    client,
    html,
    login,
)
from test_web_roles import dashboard, log_in
from werkzeug.test import Client

from celery_cronstore.errors import CronstoreError
from celery_cronstore.policy.exclusions import ExclusionError
from celery_cronstore.store import Store
from celery_cronstore.store.calendars import CalendarInUseError

#: (entries, holidays, name): each refused by ``store.calendars.add``.
BAD = [
    pytest.param(["2026-13-01"], "", "hols", id="bad-day"),
    pytest.param(["2026-12-07T22:00..2026-12-08T02:00"], "", "hols", id="window-no-offset"),
    pytest.param([], "XX", "hols", id="unknown-holidays"),
    pytest.param([], "", "hols", id="empty"),
    pytest.param(["2026-12-25"], "", "a b", id="bad-name"),
]


@pytest.fixture(autouse=True)
def no_calendars(store: Store) -> None:
    """conftest empties the task tables between tests; the calendars too, here."""
    with store.begin() as conn:
        conn.exec_driver_sql("DELETE FROM cronstore_calendar")


def save(web: Client, csrf: str, name: str, entries: str, **form: str) -> Any:
    data = {"csrf": csrf, "do": "add", "name": name, "entries": entries, **form}
    return web.post("/calendar", data=data)


def remove(web: Client, csrf: str, name: str, **form: str) -> Any:
    return web.post("/calendar", data={"csrf": csrf, "do": "remove", "name": name, **form})


def trail(store: Store) -> list[tuple[str, str, str, str]]:
    return [
        (e.actor, e.window, e.action, e.task_name)
        for e in reversed(store.audit_trail())
        if e.action.startswith("calendar-")
    ]


def test_add_list_replace_and_remove_as_the_user(
    store: Store,
    client: Client,  # noqa: F811  (test_web's fixture, imported above)
) -> None:
    csrf = login(client)
    page = html(client.get("/"))
    assert '<a href="/calendars">Calendars</a>' in page
    assert "No calendar yet." in html(client.get("/calendars"))

    entries = "2026-12-25\n\n  2026-12-30..2027-01-01 \n2026-12-07T22:00:00Z..2026-12-08T02:00:00Z"
    response = save(client, csrf, "xmas", entries, description="shop closed")
    assert response.status_code == 303, html(response)
    assert "done=added" in response.headers["Location"]
    found = store.calendars.get("xmas")
    assert [(a.isoformat(), b.isoformat()) for a, b in found.days] == [
        ("2026-12-25", "2026-12-25"),
        ("2026-12-30", "2027-01-01"),
    ]
    assert len(found.windows) == 1
    assert found.description == "shop closed"
    store.add("nightly", task="app.nightly", timer="every 1h", exclude="xmas")

    listed = unescape(html(client.get("/calendars?done=added")))
    assert "Added." in listed
    row = re.search(r'<tr id="calendar-xmas">(.*?)</tr>', listed, re.S)
    assert row is not None
    assert "2026-12-25<" in row.group(1)
    assert "2026-12-30..2027-01-01" in row.group(1)
    assert "2026-12-07T22:00:00+00:00..2026-12-08T02:00:00+00:00" in row.group(1)
    assert "shop closed" in row.group(1)
    assert '<a href="/task?name=nightly">nightly</a>' in row.group(1)
    raw = html(client.get("/calendars"))  # the CSP holds: no inline script or style
    assert re.search(r"<script(?![^>]*\bsrc=)", raw) is None
    assert " style=" not in raw
    assert re.search(r"\son[a-z]+=", raw) is None

    # A taken name without "replace": the store's message, next to the name.
    taken = save(client, csrf, "xmas", "2026-12-24")
    assert taken.status_code == 400
    with pytest.raises(CronstoreError) as refused:
        store.calendars.add("xmas", entries=["2026-12-24"])
    assert f'id="error-name">{refused.value}' in unescape(html(taken))
    assert store.calendars.get("xmas") == found

    # The page fills the form with a calendar to replace it.
    filled = html(client.get("/calendars?name=xmas"))
    assert "2026-12-30..2027-01-01" in filled
    assert 'name="replace" checked' in filled
    replaced = save(client, csrf, "xmas", "2026-12-24", replace="on")
    assert replaced.status_code == 303
    assert "done=saved" in replaced.headers["Location"]
    assert [a.isoformat() for a, _ in store.calendars.get("xmas").days] == ["2026-12-24"]
    assert store.calendars.get("xmas").description == ""

    # In use: refused, naming the task; forced: removed.
    in_use = remove(client, csrf, "xmas")
    assert in_use.status_code == 409
    with store.engine.connect() as conn:
        assert store.calendars.users(conn, "xmas") == ["nightly"]
    with pytest.raises(CalendarInUseError) as still:
        store.calendars.remove("xmas")
    assert "nightly" in str(still.value)
    assert f'id="remove-error">{still.value}' in unescape(html(in_use))
    assert "xmas" in store.calendars.all()
    forced = remove(client, csrf, "xmas", force="on")
    assert forced.status_code == 303
    assert "done=removed" in forced.headers["Location"]
    assert store.calendars.all() == {}
    assert remove(client, csrf, "xmas").status_code == 404

    assert trail(store) == [
        ("token", "web", "calendar-add", "calendar:xmas"),
        ("token", "web", "calendar-replace", "calendar:xmas"),
        ("token", "web", "calendar-remove", "calendar:xmas"),
    ]


def test_an_unused_calendar_is_removed_without_force(
    store: Store,
    client: Client,  # noqa: F811
) -> None:
    csrf = login(client)
    store.calendars.add("maint", entries=["2026-03-01"])
    assert remove(client, csrf, "maint").status_code == 303
    assert store.calendars.all() == {}


@pytest.mark.parametrize(("entries", "holidays", "name"), BAD)
def test_the_dashboard_refuses_what_the_store_refuses_in_its_words(
    store: Store,
    client: Client,  # noqa: F811
    entries: list[str],
    holidays: str,
    name: str,
) -> None:
    with pytest.raises(ExclusionError) as refused:
        store.calendars.add(name, entries=entries, holidays=holidays or None)
    csrf = login(client)
    response = save(client, csrf, name, "\n".join(entries), holidays=holidays)
    assert response.status_code == 400
    page = unescape(html(response))
    assert re.search(r'id="error-(name|entries|holidays)">' + re.escape(str(refused.value)), page)
    # What was typed is given back.
    assert "\n".join(entries) in page
    assert store.calendars.all() == {}
    assert trail(store) == []


def test_a_write_without_csrf_or_from_another_origin_is_refused(
    store: Store,
    client: Client,  # noqa: F811
) -> None:
    csrf = login(client)
    store.calendars.add("maint", entries=["2026-03-01"])
    assert save(client, "", "other", "2026-03-02").status_code == 403
    assert remove(client, "wrong", "maint").status_code == 403
    crossed = client.post(
        "/calendar",
        data={"csrf": csrf, "do": "remove", "name": "maint"},
        headers={"Origin": "https://evil.example"},
    )
    assert crossed.status_code == 403
    assert list(store.calendars.all()) == ["maint"]
    assert client.get("/calendar").status_code == 405
    assert client.post("/calendar", data={"csrf": csrf, "do": "evil"}).status_code == 400


def test_a_viewer_sees_the_list_but_cannot_write(store: Store, celery_app: Celery) -> None:  # noqa: F811
    store.calendars.add("maint", entries=["2026-03-01"], description="planned")
    web = dashboard(store, celery_app)
    csrf = log_in(web, "vic")
    page = html(web.get("/calendars"))
    assert "planned" in page
    assert "2026-03-01" in page
    for form in ("Save calendar", ">Remove<", 'name="do"', "Replace…"):
        assert form not in page, form
    assert save(web, csrf, "other", "2026-03-02").status_code == 403
    assert remove(web, csrf, "maint", force="on").status_code == 403
    assert list(store.calendars.all()) == ["maint"]
    # An operator's writes are recorded under their name.
    operator = dashboard(store, celery_app)
    csrf = log_in(operator, "ann")
    assert "Save calendar" in html(operator.get("/calendars"))
    assert save(operator, csrf, "other", "2026-03-02").status_code == 303
    assert trail(store)[-1] == ("ann", "web", "calendar-add", "calendar:other")


def test_the_page_asks_for_a_login(store: Store, client: Client) -> None:  # noqa: F811
    response = client.get("/calendars")
    assert response.status_code == 303
    assert "/login" in response.headers["Location"]
    assert client.post("/calendar", data={"do": "add"}).status_code == 401
