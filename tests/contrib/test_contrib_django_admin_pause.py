"""Pause and resume in the Django admin (issue 25), on SQLite and PostgreSQL, through
Django's test client (the admin's fixtures: test_contrib_django_admin.py).

The list and the change page show the pause in every window's words; "Pause selected"
and "Resume selected" ask on a page of their own, then write through the store as the
admin user. A refusal is the store's message (``messages.error``) and leaves that task
as it was; a user who may only view, or a post without its CSRF token, changes nothing.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from test_contrib_django_admin import (  # noqa: F401  (fixtures)
    URL,
    alias,
    celery_app,
    client,
    db_url,
    form_of,
    pk_of,
    seed,
    text_of,
)
from timeline import T0

from celery_cronstore.policy.backfill import read_instant
from celery_cronstore.policy.pause import NOTE_CHARS, paused_text
from celery_cronstore.store import Store

#: 2026-01-07 09:00 in Europe/Paris (CET) and in UTC: "until" without an offset is read in
#: each task's zone.
PARIS = datetime(2026, 1, 7, 8, 0, tzinfo=timezone.utc)
UTC = datetime(2026, 1, 7, 9, 0, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def no_audit(store: Store) -> None:
    """The admin tests' database keeps its audit trail between tests: start without one."""
    with store.begin() as conn:
        conn.exec_driver_sql("DELETE FROM cronstore_audit")


def ask(web: Any, action: str, *pks: int) -> Any:
    """Choose ``action`` on the list for ``pks``: the page it asks on."""
    data = {"action": action, "_selected_action": [str(pk) for pk in pks], "index": "0"}
    return web.post(URL, data)


def apply(web: Any, action: str, pks: list[int], **form: str) -> Any:
    """Submit the action's page for ``pks`` with ``form``; follow to the list."""
    data = {"action": action, "_selected_action": [str(pk) for pk in pks], "apply": "yes"}
    return web.post(URL, {**data, **form}, follow=True)


def messages_of(response: Any) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in response.context["messages"]]


def trail(store: Store) -> list[tuple[str, str, str, str]]:
    return [
        (e.actor, e.window, e.action, e.task_name)
        for e in reversed(store.audit_trail())
        if e.action in ("pause", "resume")
    ]


def test_the_list_and_the_change_page_show_the_pause(
    client: Any,  # noqa: F811  (the admin tests' fixture, imported above)
    store: Store,
) -> None:
    from django.utils import timezone as django_tz

    seed(store)
    until = T0 + timedelta(days=2)
    store.pause("report", note="db migration", until=until, resume="newest")
    store.pause("poll-2")
    by = store.get("report").paused_by
    # The list: in the next-fire column (as `cronstore list` and the dashboard say it), its
    # end in the display zone, then by whom, the choice and the note.
    moment = until.astimezone(ZoneInfo(django_tz.get_current_timezone_name()))
    cells = re.findall(
        r'<td class="field-next_fire">(.*?)</td>', client.get(URL).content.decode(), re.S
    )
    assert cells[0] == "disabled"  # cleanup
    assert "paused" not in cells[1]  # poll-1
    assert (
        cells[2]
        == f'paused until resumed<br><small class="cronstore-long">by {by}, then skip</small>'
    )
    assert cells[3] == (
        f'paused until <span class="cronstore-when">{moment:%Y-%m-%d}</span> '
        f'<span class="cronstore-when">{moment:%H:%M:%S} {moment.tzname()}</span>'
        f'<br><small class="cronstore-long">by {by}, then newest: db migration</small>'
    )
    # The change page: the sentence every window says, read-only.
    expected = paused_text(store.get("report"))
    assert expected is not None
    change = text_of(client.get(f"{URL}{pk_of(store, 'report')}/change/"))
    assert re.search(r'field-pause_detail.*?<div class="readonly">(.*?)</div>', change, re.S)
    assert expected in change
    assert 'name="pause_detail"' not in change
    other = client.get(f"{URL}{pk_of(store, 'poll-1')}/change/").content.decode()
    shown = re.search(r'field-pause_detail.*?<div class="readonly">(.*?)</div>', other, re.S)
    assert shown is not None
    assert shown.group(1) == "-"


def test_pause_asks_then_pauses_each_task_as_the_admin_user(
    client: Any,  # noqa: F811  (the admin tests\' fixture, imported above)
    store: Store,
) -> None:
    seed(store)
    listed = text_of(client.get(URL))
    assert "Pause selected periodic tasks" in listed
    assert "Resume selected periodic tasks" in listed
    report, poll = pk_of(store, "report"), pk_of(store, "poll-1")
    page = ask(client, "pause_tasks", report, poll)
    assert page.status_code == 200
    body = text_of(page)
    for field in ('name="note"', 'name="until"', 'name="resume"', 'name="apply"'):
        assert field in body
    assert re.findall(r'name="_selected_action" value="(\d+)"', body) == [str(poll), str(report)]
    assert "<strong>report</strong>: not paused" in body
    assert store.get("report").paused_at is None  # asking writes nothing

    done = apply(
        client,
        "pause_tasks",
        [report, poll],
        note="db migration",
        until="2026-01-07T09:00",
        resume="newest",
    )
    assert ("success", "Paused: poll-1, report.") in messages_of(done)
    for name, until in (("report", PARIS), ("poll-1", UTC)):
        task = store.get(name)
        assert (task.paused_by, task.paused_note, task.paused_until, task.paused_resume) == (
            "admin",
            "db migration",
            until,
            "newest",
        )
    assert trail(store) == [
        ("admin", "admin", "pause", "poll-1"),
        ("admin", "admin", "pause", "report"),
    ]
    # The page names the pause of a task already paused (pausing again replaces it).
    assert "(then newest): db migration" in text_of(ask(client, "pause_tasks", report))


def test_resume_asks_then_resumes(
    client: Any,  # noqa: F811  (the admin tests\' fixture, imported above)
    store: Store,
) -> None:
    seed(store)
    store.pause("report", resume="newest")
    store.pause("poll-1", resume="newest")
    report, poll, other = pk_of(store, "report"), pk_of(store, "poll-1"), pk_of(store, "poll-2")
    page = text_of(ask(client, "resume_tasks", report))
    assert 'name="mode"' in page
    assert "as chosen when paused" in page
    done = apply(client, "resume_tasks", [report, other], mode="skip")
    assert ("success", "Resumed: report.") in messages_of(done)
    assert (
        "error",
        "poll-2: periodic task 'poll-2' is not paused: nothing to resume",
    ) in messages_of(done)
    assert store.get("report").paused_at is None
    assert store.get("report").next_run is not None
    apply(client, "resume_tasks", [poll], mode="")  # as chosen when pausing
    assert store.get("poll-1").paused_at is None
    details = [(e.task_name, e.detail) for e in store.audit_trail() if e.action == "resume"]
    assert sorted(details) == [("poll-1", "newest"), ("report", "skip")]
    assert [entry[:3] for entry in trail(store)[-2:]] == [("admin", "admin", "resume")] * 2


def _store_says(store: Store, form: dict[str, str]) -> str:
    """Return what the store (or ``--until``'s reader) says to the same values."""
    try:
        if form.get("until") == "someday":
            read_instant("someday", "Europe/Paris", "until")
        store.pause("report", **form)
    except ValueError as exc:
        return str(exc)
    raise AssertionError("the store accepted it")


@pytest.mark.parametrize(
    "form",
    [
        {"until": "2026-01-01T00:00:00Z"},
        {"note": "n" * (NOTE_CHARS + 1)},
        {"resume": "later"},
        {"until": "someday"},
    ],
    ids=["past", "note", "choice", "unreadable"],
)
def test_a_refused_pause_is_the_stores_message_and_writes_nothing(
    client: Any,  # noqa: F811
    store: Store,
    form: dict[str, str],
) -> None:
    seed(store)
    message = _store_says(store, form)
    before = store.get("report")
    done = apply(client, "pause_tasks", [pk_of(store, "report")], **form)
    assert done.status_code == 200
    assert messages_of(done) == [("error", f"report: {message}")]
    assert store.get("report") == before
    assert trail(store) == []


def test_the_messages_name_the_problem(
    client: Any,  # noqa: F811  (the admin tests\' fixture, imported above)
    store: Store,
) -> None:
    seed(store)
    pk = pk_of(store, "report")
    past = messages_of(apply(client, "pause_tasks", [pk], until="2026-01-01T00:00:00Z"))
    assert "is not in the future (now 2026-01-05T12:00:00+00:00)" in past[0][1]
    long = messages_of(apply(client, "pause_tasks", [pk], note="n" * (NOTE_CHARS + 1)))
    assert f"note is longer than {NOTE_CHARS} characters ({NOTE_CHARS + 1})" in long[0][1]
    gap = messages_of(apply(client, "pause_tasks", [pk], until="2026-03-29T02:30"))
    assert "until '2026-03-29T02:30' is not an instant" in gap[0][1]
    assert store.get("report").paused_at is None


def test_a_user_who_may_only_view_cannot_pause(
    client: Any,  # noqa: F811  (the admin tests\' fixture, imported above)
    store: Store,
) -> None:
    from django.contrib.auth.models import Permission, User
    from django.test import Client

    seed(store)
    User.objects.filter(username="viewer").delete()
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_periodictask"))
    web = Client()
    assert web.login(username="viewer", password="pw")
    listed = text_of(web.get(URL))
    assert "report" in listed
    assert "Pause selected" not in listed
    pk = pk_of(store, "report")
    web.post(URL, {"action": "pause_tasks", "_selected_action": [str(pk)], "index": "0"})
    apply(web, "pause_tasks", [pk], note="no")
    store.pause("poll-1")
    apply(web, "resume_tasks", [pk_of(store, "poll-1")])
    assert store.get("report").paused_at is None
    assert store.get("poll-1").paused_at is not None
    assert [e for e in trail(store) if e[1] == "admin"] == []  # nothing from the admin


def test_a_post_without_its_csrf_token_is_refused(
    client: Any,  # noqa: F811  (the admin tests\' fixture, imported above)
    store: Store,
) -> None:
    from django.test import Client

    seed(store)
    strict = Client(enforce_csrf_checks=True)
    assert strict.login(username="admin", password="pw")
    response = strict.post(
        URL,
        {"action": "pause_tasks", "_selected_action": [str(pk_of(store, "report"))], "apply": "y"},
    )
    assert response.status_code == 403
    assert store.get("report").paused_at is None


def test_an_edit_keeps_the_pause(
    client: Any,  # noqa: F811  (the admin tests\' fixture, imported above)
    store: Store,
) -> None:
    seed(store)
    apply(client, "pause_tasks", [pk_of(store, "report")], note="vendor", until="2026-01-07T09:00")
    response = client.post(
        f"{URL}{pk_of(store, 'report')}/change/", form_of(store, "report", timer="0 10 * * 1-5")
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    task = store.get("report")
    assert task.timer == "0 10 * * 1-5"
    assert (task.paused_note, task.paused_until, task.next_run) == ("vendor", PARIS, PARIS)


@pytest.mark.parametrize("text", ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>'])
def test_a_hostile_note_is_escaped(
    client: Any,  # noqa: F811
    store: Store,
    text: str,
) -> None:
    seed(store)
    pk = pk_of(store, "report")
    apply(client, "pause_tasks", [pk], note=text)
    assert store.get("report").paused_note == text
    for url in (URL, f"{URL}{pk}/change/"):
        body = client.get(url).content.decode()
        assert "<script>alert" not in body
        assert "<img src=x" not in body
    body = ask(client, "resume_tasks", pk).content.decode()
    assert "<script>alert" not in body
    assert "<img src=x" not in body
