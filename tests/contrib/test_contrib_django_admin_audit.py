"""The Django admin's writes in the audit trail: each recorded as ``request.user``'s,
from the ``admin`` window (the admin's fixtures: test_contrib_django_admin.py)."""

from __future__ import annotations

from typing import Any

from test_contrib_django_admin import (  # noqa: F401  (fixtures)
    URL,
    act,
    alias,
    celery_app,
    client,
    db_url,
    form_of,
    pk_of,
    seed,
)

from celery_cronstore.store import Store


def test_every_admin_write_is_recorded_as_the_admin_user(
    client: Any,  # noqa: F811  (the admin tests' fixture, imported above)
    store: Store,
) -> None:
    seed(store)
    with store.begin() as conn:
        conn.exec_driver_sql("DELETE FROM cronstore_audit")
    values = form_of(store, "report", name="weekly", timer="Sun 03:00")
    assert client.post(f"{URL}add/", values).status_code == 302
    changed = form_of(store, "poll-1", timer="Mon 07:30")
    assert client.post(f"{URL}{pk_of(store, 'poll-1')}/change/", changed).status_code == 302
    act(client, "disable_tasks", pk_of(store, "poll-2"))
    act(client, "enable_tasks", pk_of(store, "poll-2"))
    act(client, "run_tasks_now", pk_of(store, "report"))
    assert (
        client.post(f"{URL}{pk_of(store, 'cleanup')}/delete/", {"post": "yes"}).status_code == 302
    )
    # A refused edit (a bad timer) records nothing.
    bad = form_of(store, "poll-1", timer="*/70 * * * *")
    assert client.post(f"{URL}{pk_of(store, 'poll-1')}/change/", bad).status_code == 200
    trail = [(e.actor, e.window, e.action, e.task_name) for e in reversed(store.audit_trail())]
    assert trail == [
        ("admin", "admin", "add", "weekly"),
        ("admin", "admin", "update", "poll-1"),
        ("admin", "admin", "disable", "poll-2"),
        ("admin", "admin", "enable", "poll-2"),
        ("admin", "admin", "run", "report"),
        ("admin", "admin", "remove", "cleanup"),
    ]
    edit = store.audit_trail(task="poll-1")[0]
    assert edit.detail == "timer: *-*-* *:00/5:00 -> Mon *-*-* 07:30:00"
