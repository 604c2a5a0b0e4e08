"""Pause and resume from the dashboard (issue 25), on every backend, through the WSGI app
(Werkzeug's test client) and the frozen clock of conftest (T0, Monday 12:00 UTC).

The task page pauses with a note, an end (read as ``cronstore pause --until`` reads it)
and the resume choice, and resumes; both are recorded as the logged-in user from the
``web`` window. A refusal is the store's own message on the page with status 400 and
nothing written; without CSRF, or for a viewer, nothing is written either. The list says
which tasks are paused, and an edit keeps the pause.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from html import unescape
from typing import Any

import pytest
from celery import Celery
from hostile import HTML_HOSTILE
from test_web import (  # noqa: F401  (fixtures)
    BEARER,
    celery_app,
    client,
    html,
    login,
)
from test_web_roles import dashboard, log_in
from werkzeug.test import Client

from celery_cronstore.policy.backfill import read_instant
from celery_cronstore.policy.pause import NOTE_CHARS, paused_text
from celery_cronstore.store import Store

#: 2026-01-07 09:00 in Europe/Berlin (CET, UTC+1), as the form reads an end without offset.
UNTIL = datetime(2026, 1, 7, 8, 0, tzinfo=timezone.utc)


def post(web: Client, csrf: str, action: str, **form: str) -> Any:
    return web.post(
        "/task/action", data={"csrf": csrf, "name": "nightly", "action": action, **form}
    )


def trail(store: Store) -> list[tuple[str, str, str, str | None]]:
    return [
        (e.actor, e.window, e.action, e.detail)
        for e in reversed(store.audit_trail(task="nightly"))
        if e.action in ("pause", "resume")
    ]


@pytest.fixture
def nightly(store: Store) -> Store:
    store.add("nightly", task="app.nightly", timer="every 1h", tz="Europe/Berlin")
    return store


def test_pause_with_a_note_and_an_end_then_resume(
    nightly: Store,
    client: Client,  # noqa: F811  (test_web's fixture, imported above)
) -> None:
    store = nightly
    csrf = login(client)
    page = html(client.get("/task?name=nightly"))
    assert ">Pause</button>" in page
    assert ">Resume</button>" not in page  # not paused: nothing to resume
    assert "read in the task's zone, Europe/Berlin" in page

    response = post(
        client, csrf, "pause", note="db migration", until="2026-01-07T09:00", resume="newest"
    )
    assert response.status_code == 303
    assert "done=paused" in response.headers["Location"]
    task = store.get("nightly")
    assert task.enabled
    assert (task.paused_by, task.paused_note, task.paused_until, task.paused_resume) == (
        "token",
        "db migration",
        UNTIL,
        "newest",
    )
    assert trail(store) == [
        ("token", "web", "pause", f"until {UNTIL.isoformat()}, then newest: db migration")
    ]

    page = unescape(html(client.get("/task?name=nightly&done=paused")))
    assert "Paused." in page
    expected = paused_text(task)
    assert expected is not None
    assert expected.endswith("(then newest): db migration")
    assert expected in page
    assert ">Change the pause</button>" in page
    assert ">Resume</button>" in page
    assert "as chosen (newest)" in page
    # Changing the pause replaces its note and end: the form starts from the current ones.
    assert 'name="note" value="db migration"' in page
    assert f'name="until" value="{UNTIL.isoformat()}"' in page
    raw = html(client.get("/task?name=nightly"))  # the CSP holds: no inline script or style
    assert re.search(r"<script(?![^>]*\bsrc=)", raw) is None
    assert " style=" not in raw
    assert re.search(r"\son[a-z]+=", raw) is None
    listed = html(client.get("/"))
    assert '<span class="state st-paused">paused</span> until' in listed
    assert "<span>2026-01-07</span> <span>08:00:00 UTC</span>" in listed

    response = post(client, csrf, "resume", mode="skip")
    assert response.status_code == 303
    assert "done=resumed" in response.headers["Location"]
    resumed = store.get("nightly")
    assert resumed.paused_at is None
    assert resumed.next_run is not None
    assert "st-paused" not in html(client.get("/"))
    assert ">Resume</button>" not in html(client.get("/task?name=nightly"))

    # Paused until resumed, then resumed as chosen when pausing (mode left empty).
    assert post(client, csrf, "pause", until="", resume="newest").status_code == 303
    assert store.get("nightly").paused_until is None
    listed = html(client.get("/"))
    assert '<span class="state st-paused">paused</span><br><span class="hint">until resumed' in (
        listed
    )
    assert post(client, csrf, "resume", mode="").status_code == 303
    assert store.get("nightly").paused_at is None
    assert [entry[2:] for entry in trail(store)] == [
        ("pause", f"until {UNTIL.isoformat()}, then newest: db migration"),
        ("resume", "skip"),
        ("pause", "until resumed, then newest"),
        ("resume", "newest"),
    ]


def _refusal(store: Store, case: str) -> tuple[str, dict[str, str], str]:
    """Return the action, its form and the message the store (or ``--until``'s reader)
    gives for the same values."""
    forms = {
        "past": ("pause", {"until": "2026-01-01T00:00:00Z"}),
        "note": ("pause", {"note": "n" * (NOTE_CHARS + 1)}),
        "choice": ("pause", {"resume": "later"}),
        "unreadable": ("pause", {"until": "someday"}),
        "not paused": ("resume", {}),
        "bad mode": ("resume", {"mode": "oldest"}),
    }
    act, form = forms[case]
    if case == "bad mode":
        store.pause("nightly")
    try:
        if case == "unreadable":
            read_instant(form["until"], "Europe/Berlin", "until")
        elif act == "pause":
            store.pause("nightly", **form)
        else:
            store.resume("nightly", **form)
    except ValueError as exc:
        return act, form, str(exc)
    raise AssertionError(f"the store accepted {case}")


@pytest.mark.parametrize("case", ["past", "note", "choice", "unreadable", "not paused", "bad mode"])
def test_a_refusal_shows_the_stores_message_and_writes_nothing(
    nightly: Store,
    client: Client,  # noqa: F811
    case: str,
) -> None:
    store = nightly
    act, form, message = _refusal(store, case)
    before = store.get("nightly")
    audited = len(store.audit_trail(task="nightly"))
    csrf = login(client)
    response = post(client, csrf, act, **form)
    assert response.status_code == 400
    page = html(response)
    found = re.search(r'<p class="error long" role="alert" id="pause-error">(.*?)</p>', page)
    assert found is not None
    assert unescape(found.group(1)) == message
    assert "Traceback" not in page
    assert store.get("nightly") == before
    assert len(store.audit_trail(task="nightly")) == audited
    if act == "pause":  # the form gives back what was typed
        for key, value in form.items():
            if key != "resume":
                assert f'name="{key}" value="{value}"' in page


def test_the_messages_name_the_problem(nightly: Store, client: Client) -> None:  # noqa: F811
    csrf = login(client)
    past = html(post(client, csrf, "pause", until="2026-01-01T00:00:00Z"))
    assert "is not in the future (now 2026-01-05T12:00:00+00:00)" in past
    long = html(post(client, csrf, "pause", note="n" * (NOTE_CHARS + 1)))
    assert f"note is longer than {NOTE_CHARS} characters ({NOTE_CHARS + 1})" in long
    assert "is not paused: nothing to resume" in unescape(html(post(client, csrf, "resume")))
    # An end without an offset in a wall time the zone skips is refused as --until is.
    gap = unescape(html(post(client, csrf, "pause", until="2026-03-29T02:30")))
    assert "until '2026-03-29T02:30' is not an instant" in gap
    assert store_untouched(nightly)


def store_untouched(store: Store) -> bool:
    return store.get("nightly").paused_at is None and not trail(store)


def test_a_write_without_csrf_or_from_elsewhere_is_refused(
    nightly: Store,
    client: Client,  # noqa: F811
) -> None:
    csrf = login(client)
    data = {"name": "nightly", "action": "pause", "note": "x"}
    refused = client.post("/task/action", data=data)
    assert refused.status_code == 403
    assert "CSRF" in html(refused)
    assert client.post("/task/action", data={**data, "csrf": csrf + "x"}).status_code == 403
    cross = client.post(
        "/task/action", data={**data, "csrf": csrf}, headers={"Origin": "https://evil.example"}
    )
    assert cross.status_code == 403
    assert store_untouched(nightly)
    anonymous = Client(client.application)
    assert anonymous.post("/task/action", data=data).status_code == 401
    assert store_untouched(nightly)
    # A bearer token is never sent by a browser on its own: no CSRF token needed.
    api = Client(client.application)
    assert api.post("/task/action", data=data, headers=BEARER).status_code == 303
    assert nightly.get("nightly").paused_note == "x"


def test_a_viewer_can_neither_pause_nor_resume(nightly: Store, celery_app: Celery) -> None:  # noqa: F811
    viewer = dashboard(nightly, celery_app)
    csrf = log_in(viewer, "vic")
    page = html(viewer.get("/task?name=nightly"))
    assert ">Pause</button>" not in page
    data = {"csrf": csrf, "name": "nightly", "action": "pause", "note": "no"}
    assert viewer.post("/task/action", data=data).status_code == 403
    assert store_untouched(nightly)
    operator = dashboard(nightly, celery_app)
    csrf = log_in(operator, "ann")
    assert operator.post("/task/action", data={**data, "csrf": csrf}).status_code == 303
    assert trail(nightly) == [("ann", "web", "pause", "until resumed, then skip: no")]
    assert ">Resume</button>" not in html(viewer.get("/task?name=nightly"))
    resume = {"csrf": log_in(viewer, "vic"), "name": "nightly", "action": "resume"}
    assert viewer.post("/task/action", data=resume).status_code == 403
    assert nightly.get("nightly").paused_at is not None


def test_an_edit_keeps_the_pause(nightly: Store, client: Client) -> None:  # noqa: F811
    csrf = login(client)
    post(client, csrf, "pause", note="vendor outage", until="2026-01-07T09:00")
    form = html(client.get("/task/edit?name=nightly"))
    assert "Saving keeps it paused" in form
    version = re.search(r'name="version" value="(\d+)"', form)
    assert version is not None
    saved = client.post(
        "/task/edit",
        data={
            "csrf": csrf,
            "name": "nightly",
            "version": version.group(1),
            "task": "app.nightly",
            "timer": "every 2h",
            "tz": "Europe/Berlin",
            "args": "[]",
            "kwargs": "{}",
            "options": "{}",
            "misfire_policy": "run_once",
            "overlap_policy": "allow",
            "submit": "save",
        },
    )
    assert saved.status_code == 303
    task = nightly.get("nightly")
    assert task.timer == "every 2h"
    assert (task.paused_note, task.paused_until, task.next_run) == ("vendor outage", UNTIL, UNTIL)


def test_a_missing_task_is_404(nightly: Store, client: Client) -> None:  # noqa: F811
    csrf = login(client)
    data = {"csrf": csrf, "name": "gone", "action": "pause", "until": "2026-02-01"}
    assert client.post("/task/action", data=data).status_code == 404
    assert client.post("/task/action", data={**data, "action": "resume"}).status_code == 404


@pytest.mark.parametrize("text", HTML_HOSTILE)
def test_a_hostile_note_is_escaped(nightly: Store, client: Client, text: str) -> None:  # noqa: F811
    csrf = login(client)
    assert post(client, csrf, "pause", note=text).status_code == 303
    assert nightly.get("nightly").paused_note == text.strip()
    for path in ("/task?name=nightly", "/task/edit?name=nightly", "/"):
        response = client.get(path)
        page = html(response)
        for needle in ("<script>alert", "<img src=x", "<svg onload", "</title><script>"):
            assert needle not in page, (path, needle)
        assert re.search(r"<script(?![^>]*\bsrc=)", page) is None, path
        assert "unsafe-inline" not in response.headers["Content-Security-Policy"]
    if "{{ 7*7 }}" in text:
        assert "{{ 7*7 }}" in html(client.get("/task?name=nightly"))
