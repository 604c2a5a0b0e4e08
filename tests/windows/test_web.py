"""The web dashboard through its WSGI app (Werkzeug's test client), on every backend.

Pages, filters, paging, actions, the edit form, access control (login, CSRF, read-only),
escaping of hostile stored strings, password scrubbing, mounting under a prefix, the
timer preview endpoint and ``/metrics``. Real databases; the frozen clock of conftest.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from html import unescape
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner
from hostile import HOSTILE, HTML_HOSTILE
from timeline import T0
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.test import Client, TestResponse

from celery_cronstore.cli import cronstore
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.testing import FrozenClock
from celery_cronstore.web import create_app

TOKEN = "tok-" + "x" * 20
BEARER = {"Authorization": f"Bearer {TOKEN}"}


#: Strings that try to break out of HTML, attributes, URLs and SVG.
def make_celery(url: str) -> Celery:
    app = Celery(f"web-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = url
    app.conf.task_ignore_result = True
    app.conf.cronstore_require_registered = False  # its tasks live in other services
    return app


@pytest.fixture
def celery_app(db_url: str) -> Celery:
    return make_celery(db_url)


@pytest.fixture
def client(store: Store, celery_app: Celery) -> Client:
    return Client(create_app(store, token=TOKEN, celery_app=celery_app))


def html(response: TestResponse) -> str:
    return response.get_data(as_text=True)


def login(client: Client) -> str:
    """Log in with the token; return the CSRF token of the session."""
    response = client.post("/login", data={"token": TOKEN, "next": "/"})
    assert response.status_code == 303
    page = html(client.get("/task/new"))
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match is not None
    return match.group(1)


# -- pages ----------------------------------------------------------------------------------


def test_task_list_shows_each_column(store: Store, client: Client, clock: FrozenClock) -> None:
    store.add(
        "report",
        task="app.report",
        timer="Mon..Fri *-*-* 09:30",
        tz="Europe/Berlin",
        owner=("tenant", "42"),
    )
    page = html(client.get("/", headers=BEARER))
    assert "report" in page
    assert "app.report" in page
    assert "Mon..Fri *-*-* 09:30:00" in page
    assert "Europe/Berlin" in page
    assert "tenant:42" in page
    # T0 is Monday 12:00 UTC (13:00 CET): the next fire is Tuesday 09:30 CET, listed in
    # the dashboard's one display zone (UTC), which the column's header names.
    assert "<span>2026-01-06</span> <span>08:30:00 UTC</span>" in page
    assert 'Next fire</a> <span class="zone">(UTC)</span>' in page
    assert "in 20 h" in page


def test_paging_sorting_and_filters(store: Store, client: Client) -> None:
    for i in range(7):
        store.add(
            f"t{i}",
            task=f"app.job{6 - i}",
            timer="*/5 * * * *" if i % 2 else "every 1h",
            owner=("team", str(i)) if i < 3 else None,
            enabled=i != 6,
        )

    def names(query: str) -> list[str]:
        page = html(client.get(f"/?{query}", headers=BEARER))
        return re.findall(r'<a href="/task\?name=([^"]+)">', page)

    assert names("per_page=3") == ["t0", "t1", "t2"]
    assert names("per_page=3&page=3") == ["t6"]
    assert 'rel="next"' in html(client.get("/?per_page=3", headers=BEARER))
    assert names("sort=task") == ["t6", "t5", "t4", "t3", "t2", "t1", "t0"]
    assert names("sort=name&desc=1&per_page=2") == ["t6", "t5"]
    assert names("enabled=no") == ["t6"]
    assert names("kind=cron") == ["t1", "t3", "t5"]
    assert names("owner_type=team") == ["t0", "t1", "t2"]
    assert names("q=job3") == ["t3"]
    assert names("q=team:2") == ["t2"]
    assert names("q=%25") == []  # LIKE wildcards are searched for literally
    assert "t6" not in names("sort=next")  # disabled: no next fire
    with store.begin() as conn:
        conn.execute(
            sa.update(periodic_task).where(periodic_task.c.name == "t4").values(error="broken")
        )
    assert names("error=yes") == ["t4"]
    assert client.get("/?per_page=100000", headers=BEARER).status_code == 400
    assert client.get("/?sort=evil", headers=BEARER).status_code == 400


def test_task_page_definition_next_fires_history_and_chart(
    store: Store, client: Client, clock: FrozenClock
) -> None:
    store.add("poll", task="app.poll", timer="every 5m", args=[1, "two"], tz="Europe/Berlin")
    claimer = Claimer(store, "beat-a")
    for _ in range(3):
        clock.advance(minutes=5)
        result = claimer.claim_due()
        claimer.mark_published(result.claims)
    page = html(client.get("/task?name=poll", headers=BEARER))
    assert "every 5 minutes" in page
    # The next 10 fires, in the display zone (UTC); an interval's zone (Berlin) has no
    # effect on it, so the page shows none ("—") and no local times beside them.
    assert page.count('<li><span class="when"><span>2026-01-05</span>') == 10
    assert "<dt>Zone</dt><dd>—</dd>" in page
    assert "CET" not in page
    assert page.count('class="state st-published"') >= 3
    assert "beat-a" in page
    assert '<svg class="chart"' in page
    assert page.count('class="mark st-published"') == 3
    assert "[1, &#34;two&#34;]" in page or '[1, "two"]' in page.replace("&#34;", '"')


def test_problems_page(store: Store, client: Client, clock: FrozenClock) -> None:
    task = store.add("flaky", task="app.flaky", timer="every 1h")
    store.add("bad", task="app.bad", timer="every 1h")
    with store.begin() as conn:
        conn.execute(
            sa.update(periodic_task)
            .where(periodic_task.c.name == "bad")
            .values(error="task 'app.bad' is not registered")
        )
        rows: list[dict[str, Any]] = [
            dict(fire_time=T0 - timedelta(hours=2), state="missed", attempts=0, reason="beat down"),
            dict(fire_time=T0 - timedelta(hours=30), state="expired", attempts=0, reason="old"),
            dict(fire_time=T0 - timedelta(hours=1), state="succeeded", attempts=2, reason=None),
        ]
        for i, row in enumerate(rows):
            conn.execute(sa.insert(fire).values(periodic_task_id=task.id, task_id=f"id-{i}", **row))
    Claimer(store, "host-1:99").heartbeat(T0)
    page = html(client.get("/problems", headers=BEARER))
    assert "host-1:99" in page
    assert "is not registered" in page
    assert "beat down" in page
    assert "old" not in page.split("Fires missed")[1]  # older than 24 h
    republished = page.split("published more than once")[1]
    assert "flaky" in republished
    assert "succeeded" in republished


# -- writes ---------------------------------------------------------------------------------


def test_actions_enable_disable_run_remove(store: Store, client: Client) -> None:
    store.add("job", task="app.job", timer="every 1h")
    csrf = login(client)
    response = client.post("/task/action", data={"name": "job", "action": "disable", "csrf": csrf})
    assert response.status_code == 303
    assert "done=disabled" in response.headers["Location"]
    assert store.get("job").enabled is False
    client.post("/task/action", data={"name": "job", "action": "enable", "csrf": csrf})
    assert store.get("job").enabled is True
    response = client.post("/task/action", data={"name": "job", "action": "run", "csrf": csrf})
    assert response.status_code == 303
    [ran] = store.history("job")
    assert ran.state == "published"
    assert ran.reason == "run-now requested"
    page = html(client.get("/task?name=job&done=run"))
    assert ("Sent one fire now" in page and ran.task_id not in page) or "published" in page
    response = client.post("/task/action", data={"name": "job", "action": "remove", "csrf": csrf})
    assert response.status_code == 303
    assert store.list() == []
    missing = client.post("/task/action", data={"name": "job", "action": "run", "csrf": csrf})
    assert missing.status_code == 404


def test_edit_form_validates_previews_and_saves(store: Store, client: Client) -> None:
    store.add("job", task="app.job", timer="every 1h", tz="Europe/Berlin")
    csrf = login(client)
    form = html(client.get("/task/edit?name=job"))
    version = re.search(r'name="version" value="(\d+)"', form)
    assert version is not None
    base = {
        "csrf": csrf,
        "name": "job",
        "version": version.group(1),
        "task": "app.job",
        "timer": "Mon *-*-* 25:00",
        "tz": "Europe/Berlin",
        "args": "[1]",
        "kwargs": "{}",
        "options": "{}",
        "misfire_policy": "run_once",
        "overlap_policy": "allow",
        "submit": "save",
    }
    bad = client.post("/task/edit", data=base)
    assert bad.status_code == 400
    assert 'id="error-timer"' in html(bad)
    assert "25" in html(bad)
    assert store.get("job").timer == "every 1h"
    bad_json = client.post("/task/edit", data={**base, "timer": "*:0/15", "args": "[1,"})
    assert bad_json.status_code == 400
    assert 'id="error-args"' in html(bad_json)
    preview = client.post("/task/edit", data={**base, "timer": "*:0/15", "submit": "preview"})
    assert preview.status_code == 200
    assert "2026-01-05 13:15:00 CET" in html(preview)
    assert store.get("job").timer == "every 1h"
    saved = client.post(
        "/task/edit",
        data={**base, "timer": "*:0/15", "kwargs": '{"a": 1}', "start_deadline": "30"},
    )
    assert saved.status_code == 303
    got = store.get("job")
    assert (got.timer_kind, got.kwargs, got.start_deadline, got.args) == (
        "calendar",
        {"a": 1},
        30.0,
        [1],
    )
    stale = client.post("/task/edit", data={**base, "timer": "*:0/15"})
    assert stale.status_code == 409
    assert "someone changed this task" in html(stale)
    policy = client.post(
        "/task/edit",
        data={**base, "version": str(got.version), "timer": "*:0/5", "misfire_policy": "never"},
    )
    assert policy.status_code == 400
    assert "misfire_policy" in html(policy)


def test_edit_form_detects_the_kind_of_a_changed_expression(store: Store, client: Client) -> None:
    """Issue 24: the form posts back the stored kind ("cron"); "every 5m" used to be read
    as cron and refused with a misleading parse error."""
    store.add("five", task="app.job", timer="*/5 * * * *")
    csrf = login(client)
    form = html(client.get("/task/edit?name=five"))
    assert 'data-kind="cron"' in form  # timer.js applies the same rule to its preview
    base = {"csrf": csrf, "name": "five", "task": "app.job", "tz": "UTC", "submit": "save"}
    preview = client.post(
        "/task/edit",
        data={**base, "version": "1", "timer": "every 5m", "kind": "cron", "submit": "preview"},
    )
    assert "(interval, UTC)" in html(preview)
    saved = client.post(
        "/task/edit", data={**base, "version": "1", "timer": "every 5m", "kind": "cron"}
    )
    assert saved.status_code == 303, html(saved)
    got = store.get("five")
    assert (got.timer_kind, got.timer) == ("interval", "every 5m")
    # A kind changed on purpose is honoured, and a mismatch names both.
    version = str(got.version)
    chosen = client.post(
        "/task/edit", data={**base, "version": version, "timer": "every 10m", "kind": "cron"}
    )
    assert chosen.status_code == 400
    assert "the timer kind is cron but the expression reads as interval" in unescape(html(chosen))
    assert store.get("five").timer == "every 5m"
    # The zone alone changed: the stored kind stays.
    zoned = client.post(
        "/task/edit",
        data={
            **base,
            "version": version,
            "timer": "every 5m",
            "kind": "interval",
            "tz": "Asia/Tokyo",
        },
    )
    assert zoned.status_code == 303
    assert (store.get("five").timer_kind, store.get("five").tz) == ("interval", "Asia/Tokyo")


def test_run_now_refuses_a_disabled_task(store: Store, client: Client) -> None:
    """Issue 24: it said "Sent" and the worker's guard then dropped the fire."""
    store.add("job", task="app.job", timer="every 1h", enabled=False)
    csrf = login(client)
    page = html(client.get("/task?name=job"))
    assert 'value="run"' not in page
    assert "enable it first" in page
    refused = client.post("/task/action", data={"name": "job", "action": "run", "csrf": csrf})
    assert refused.status_code == 409
    assert "periodic task &#39;job&#39; is disabled: enable it first" in html(refused)
    assert store.history("job") == []


def test_an_edit_saved_meanwhile_wins_and_the_stale_form_is_refused(
    store: Store, client: Client
) -> None:
    store.add("job", task="app.job", timer="every 1h", description="as loaded")
    csrf = login(client)
    form = html(client.get("/task/edit?name=job"))
    loaded = re.search(r'name="version" value="(\d+)"', form)
    assert loaded is not None
    meanwhile = store.update("job", description="saved meanwhile", args=[7])
    data = {"csrf": csrf, "name": "job", "version": loaded.group(1), "task": "app.job"}
    data.update(timer="every 2h", tz="UTC", args="[]", kwargs="{}", options="{}")
    data.update(misfire_policy="run_once", overlap_policy="allow", submit="save")
    data.update(description="mine", enabled="on")
    refused = client.post("/task/edit", data=data)
    assert refused.status_code == 409
    page = html(refused)
    assert "someone changed this task" in page
    assert "saved meanwhile" in page, "the form shows the definition saved meanwhile"
    assert f'name="version" value="{meanwhile.version}"' in page
    assert store.get("job") == meanwhile, "the stale form wrote nothing"
    # Saved again from the refreshed form: it goes through.
    again = client.post("/task/edit", data={**data, "version": str(meanwhile.version)})
    assert again.status_code == 303
    assert (store.get("job").description, store.get("job").timer) == ("mine", "every 2h")


def test_add_task_form(store: Store, client: Client) -> None:
    csrf = login(client)
    data = {**{"csrf": csrf, "name": "new-one", "task": "app.new", "timer": "every 10m"}}
    data.update(tz="UTC", args="[]", kwargs="{}", options="{}", enabled="on")
    data.update(misfire_policy="run_once", overlap_policy="allow", submit="save")
    response = client.post("/task/new", data=data)
    assert response.status_code == 303
    assert store.get("new-one").enabled is True
    duplicate = client.post("/task/new", data=data)
    assert duplicate.status_code == 400
    assert "already exists" in html(duplicate)


def test_the_abandon_policy_is_offered_saved_and_validated(store: Store, client: Client) -> None:
    csrf = login(client)
    assert 'name="abandon_policy"' in html(client.get("/task/new"))
    data = {"csrf": csrf, "name": "again", "task": "app.new", "timer": "every 10m"}
    data.update(tz="UTC", args="[]", kwargs="{}", options="{}", enabled="on")
    data.update(misfire_policy="run_once", overlap_policy="allow", abandon_policy="rerun")
    assert client.post("/task/new", data={**data, "submit": "save"}).status_code == 303
    assert store.get("again").abandon_policy == "rerun"
    assert "Abandon policy</dt><dd>rerun" in html(client.get("/task?name=again"))
    form = html(client.get("/task/edit?name=again"))
    assert '<option value="rerun" selected>' in form
    version = str(store.get("again").version)
    bad = client.post(
        "/task/edit",
        data={**data, "version": version, "abandon_policy": "twice", "submit": "save"},
    )
    assert bad.status_code == 400
    assert 'id="error-abandon_policy"' in html(bad)
    assert "got &#39;twice&#39;" in html(bad)
    assert store.get("again").abandon_policy == "rerun"
    # A form without the field (an older page) keeps the stored policy.
    kept = {k: v for k, v in data.items() if k != "abandon_policy"}
    response = client.post("/task/edit", data={**kept, "version": version, "submit": "save"})
    assert response.status_code == 303
    assert store.get("again").abandon_policy == "rerun"


def test_preview_endpoint(client: Client) -> None:
    ok = client.get("/api/preview?timer=Mon..Fri+09:30&tz=Europe/Berlin", headers=BEARER).json
    assert ok is not None
    assert ok["ok"] is True
    assert ok["kind"] == "calendar"
    assert ok["next"][0]["local"] == "2026-01-06 09:30:00 CET"
    bad = client.get("/api/preview?timer=*/61+*+*+*+*", headers=BEARER).json
    assert bad is not None
    assert bad["ok"] is False
    assert "61" in bad["error"]
    assert client.get("/api/preview?timer=every+1h").status_code == 401


# -- access control -------------------------------------------------------------------------


def test_no_credentials_means_read_only(store: Store) -> None:
    store.add("job", task="app.job", timer="every 1h")
    client = Client(create_app(store))
    assert client.get("/").status_code == 200
    refused = client.post("/task/action", data={"name": "job", "action": "disable"})
    assert refused.status_code == 403
    assert "read-only" in html(refused)
    assert store.get("job").enabled is True
    assert "Disable" not in html(client.get("/task?name=job"))


def test_read_only_flag_refuses_writes_even_when_logged_in(store: Store) -> None:
    store.add("job", task="app.job", timer="every 1h")
    client = Client(create_app(store, token=TOKEN, read_only=True))
    response = client.post(
        "/task/action", data={"name": "job", "action": "disable"}, headers=BEARER
    )
    assert response.status_code == 403
    assert store.get("job").enabled is True


def test_writes_need_login_and_csrf(store: Store, client: Client) -> None:
    store.add("job", task="app.job", timer="every 1h")
    anonymous = client.get("/task?name=job")
    assert anonymous.status_code == 303
    assert "/login?next=" in anonymous.headers["Location"]
    assert client.post("/task/action", data={"name": "job", "action": "disable"}).status_code == 401
    wrong = client.post("/login", data={"token": "nope" * 5})
    assert wrong.status_code == 403
    csrf = login(client)
    no_csrf = client.post("/task/action", data={"name": "job", "action": "disable"})
    assert no_csrf.status_code == 403
    assert "CSRF" in html(no_csrf)
    forged = client.post(
        "/task/action", data={"name": "job", "action": "disable", "csrf": csrf + "x"}
    )
    assert forged.status_code == 403
    cross = client.post(
        "/task/action",
        data={"name": "job", "action": "disable", "csrf": csrf},
        headers={"Origin": "https://evil.example"},
    )
    assert cross.status_code == 403
    assert store.get("job").enabled is True
    # A bearer token is never sent by a browser on its own: no CSRF token needed.
    api = Client(client.application)
    response = api.post("/task/action", data={"name": "job", "action": "disable"}, headers=BEARER)
    assert response.status_code == 303
    assert store.get("job").enabled is False


def test_basic_auth_users(store: Store) -> None:
    store.add("job", task="app.job", timer="every 1h")
    client = Client(create_app(store, users={"ops": "pa55word-ops"}))
    assert client.get("/", auth=("ops", "wrong")).status_code == 303
    page = html(client.get("/task?name=job", auth=("ops", "pa55word-ops")))
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    data = {"name": "job", "action": "disable"}
    assert client.post("/task/action", data=data, auth=("ops", "pa55word-ops")).status_code == 403
    data["csrf"] = csrf.group(1)
    assert client.post("/task/action", data=data, auth=("ops", "pa55word-ops")).status_code == 303
    assert "pa55word-ops" not in page


def test_security_headers_and_no_inline_script_or_style(store: Store, client: Client) -> None:
    store.add("job", task="app.job", timer="every 1h")
    login(client)
    for path in ("/", "/task?name=job", "/task/edit?name=job", "/problems", "/login"):
        response = client.get(path)
        csp = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert response.headers["X-Frame-Options"] == "DENY"
        page = html(response)
        assert re.search(r"<script(?![^>]*\bsrc=)", page) is None, path
        assert " style=" not in page, path
        assert "<style" not in page, path
        assert re.search(r"\son[a-z]+=", page) is None, path


@pytest.mark.parametrize("text", HOSTILE + HTML_HOSTILE)
def test_hostile_strings_are_escaped_everywhere(store: Store, client: Client, text: str) -> None:
    store.add(
        text,
        task=text,
        timer="every 1h",
        args=[text],
        kwargs={text: text},
        owner=(text[:100], text),
        description=text,
    )
    with store.begin() as conn:
        task_id = conn.execute(
            sa.select(periodic_task.c.id).where(periodic_task.c.name == text)
        ).scalar_one()
        conn.execute(
            sa.insert(fire).values(
                periodic_task_id=task_id,
                fire_time=T0 - timedelta(hours=1),
                task_id="hostile-1",
                state="missed",
                attempts=0,
                claimed_by=text,
                reason=text,
                result=text,
            )
        )
        conn.execute(
            sa.update(periodic_task).where(periodic_task.c.id == task_id).values(error=text)
        )
    login(client)
    link = client.get("/").get_data(as_text=True)
    match = re.search(r'<a href="(/task\?name=[^"]+)">', link)
    assert match is not None
    href = unescape(match.group(1))
    pages = {
        "list": html(client.get("/")),
        "task": html(client.get(href)),
        "edit": html(client.get(href.replace("/task?", "/task/edit?"))),
        "problems": html(client.get("/problems")),
    }
    assert "<h1>" in pages["task"], "the link must lead back to the same task"
    for where, page in pages.items():
        for needle in ("<script>alert", "<img src=x", "<svg onload", "</title><script>"):
            assert needle not in page, (where, needle)
        if "{{ 7*7 }}" in text:  # evaluated as a template, it would read 49 instead
            # (not "49 is absent": a CSRF token or a clock at :49 may contain it)
            assert "{{ 7*7 }}" in page, where


def test_passwords_never_appear(store: Store, celery_app: Celery) -> None:
    url = "postgresql://admin:hunter2-secret@db.internal/app"
    store.add("leaky", task="app.leaky", timer="every 1h", description="see logs")
    with store.begin() as conn:
        conn.execute(
            sa.update(periodic_task)
            .where(periodic_task.c.name == "leaky")
            .values(error=f"could not connect to {url}")
        )
    client = Client(create_app(store, token=TOKEN, secrets=["broker-pw-77"]))
    for path in ("/", "/task?name=leaky", "/problems"):
        page = html(client.get(path, headers=BEARER))
        assert "hunter2-secret" not in page, path
        assert TOKEN not in page, path
        assert "admin:***@db.internal" in page, path


def test_mounted_under_a_prefix(store: Store) -> None:
    store.add("job", task="app.job", timer="every 1h")

    def host_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"host"]

    mounted = DispatcherMiddleware(host_app, {"/ops/cron": create_app(store, token=TOKEN)})
    client = Client(mounted)
    assert html(client.get("/")) == "host"
    page = html(client.get("/ops/cron/", headers=BEARER))
    assert 'href="/ops/cron/task?name=job"' in page
    assert 'href="/ops/cron/static/app.css"' in page
    login = client.get("/ops/cron/task?name=job")
    assert login.headers["Location"].startswith("/ops/cron/login?next=/ops/cron/task?name%3Djob")
    assert client.get("/ops/cron/static/app.css").status_code == 200


def test_metrics_match_the_ledger(store: Store, client: Client, clock: FrozenClock) -> None:
    store.add("a", task="app.a", timer="every 1m")
    store.add("b", task="app.b", timer="every 1m", enabled=False)
    claimer = Claimer(store, "beat-m")
    claimer.heartbeat(T0)
    for _ in range(3):
        clock.advance(minutes=1)
        claimer.mark_published(claimer.claim_due().claims)
    clock.advance(seconds=42)
    text = html(client.get("/metrics", headers=BEARER))
    with store.engine.connect() as conn:
        ledger = conn.execute(sa.select(sa.func.count()).select_from(fire)).scalar_one()
    assert f"cronstore_ledger_rows {float(ledger)}" in text
    assert 'cronstore_ledger_fires{state="published"} 3.0' in text
    assert 'cronstore_periodic_tasks{enabled="true"} 1.0' in text
    assert 'cronstore_periodic_tasks{enabled="false"} 1.0' in text
    assert "cronstore_tasks_in_error 0.0" in text
    assert 'cronstore_beat_heartbeat_age_seconds{node="beat-m"} 222.0' in text
    assert client.get("/metrics").status_code == 401


# -- the command ----------------------------------------------------------------------------


def test_cli_refuses_a_public_address_without_credentials(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CRONSTORE_WEB_TOKEN", raising=False)
    monkeypatch.delenv("CRONSTORE_WEB_USERS", raising=False)
    result = CliRunner().invoke(
        cronstore,
        ["web", "--host", "0.0.0.0"],
        obj=CLIContext(app=make_celery(db_url), no_color=True, workdir=None),
    )
    assert result.exit_code == 2
    assert "refusing to listen on 0.0.0.0 without credentials" in result.output
