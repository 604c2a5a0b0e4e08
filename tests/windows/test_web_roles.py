"""Dashboard roles (viewer vs operator) and the audit trail's ``web`` window, on every
backend, through the WSGI app (Werkzeug's test client).

A viewer sees every page but no write button, and every write page or action answers
403 with a page saying why, changing nothing. An operator's writes (and the token's) are
recorded under their name. Roles are read from the configuration at each request.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from celery import Celery
from werkzeug.test import Client, TestResponse

from celery_cronstore.store import Store
from celery_cronstore.web import create_app
from celery_cronstore.web.auth import Credentials, parse_accounts

TOKEN = "tok-" + "r" * 20
KEY = b"k" * 32
USERS = {"ann": "ann-pass-1", "vic": "vic-pass-1"}
ROLES = {"vic": "viewer"}
#: Every write the dashboard has: (method, path, form).
WRITES = [
    ("GET", "/task/new", {}),
    ("GET", "/task/edit?name=job", {}),
    ("POST", "/task/new", {"name": "new", "task": "app.n", "timer": "every 1h"}),
    ("POST", "/task/edit?name=job", {"name": "job", "timer": "every 2h", "version": "1"}),
    ("POST", "/task/action", {"name": "job", "action": "disable"}),
    ("POST", "/task/action", {"name": "job", "action": "run"}),
    ("POST", "/task/action", {"name": "job", "action": "remove"}),
]


@pytest.fixture
def celery_app(db_url: str) -> Celery:
    app = Celery(f"roles-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = db_url
    app.conf.task_ignore_result = True
    app.conf.cronstore_require_registered = False
    return app


def dashboard(store: Store, celery_app: Celery, roles: dict[str, str] | None = None) -> Client:
    app = create_app(
        store,
        token=TOKEN,
        users=USERS,
        roles=ROLES if roles is None else roles,
        celery_app=celery_app,
        secret_key=KEY,
    )
    return Client(app)


def html(response: TestResponse) -> str:
    return response.get_data(as_text=True)


def log_in(client: Client, user: str) -> str:
    """Log ``user`` in through the form; return the session's CSRF token."""
    response = client.post("/login", data={"user": user, "password": USERS[user], "next": "/"})
    assert response.status_code == 303
    cookie = client.get_cookie("cronstore_session")
    assert cookie is not None
    # A viewer's pages carry no form with it: made as the dashboard makes it, so that a
    # refused write is refused for the role, not for a missing token.
    identity = client.application.signer.read_session(cookie.value)
    assert identity is not None
    return str(client.application.signer.csrf(identity))


def test_users_take_a_role_after_the_password() -> None:
    users, roles = parse_accounts("ann:pw1, vic:pw:2:viewer,op:x:operator,odd:ends:viewer:operator")
    assert users == {"ann": "pw1", "vic": "pw:2", "op": "x", "odd": "ends:viewer"}
    assert roles == {"vic": "viewer", "op": "operator", "odd": "operator"}
    with pytest.raises(ValueError, match="roles are lower case"):
        parse_accounts("ann:pw:Viewer")
    with pytest.raises(ValueError, match=r"user:password\[:role\]"):
        parse_accounts("ann::viewer")  # a role but no password
    with pytest.raises(ValueError, match="bad role 'admin' for web user 'ann'"):
        Credentials(users={"ann": "pw"}, roles={"ann": "admin"})
    with pytest.raises(ValueError, match="stands for the token login"):
        Credentials(users={"token": "pw"})
    creds = Credentials(token=TOKEN, users={"ann": "pw", "vic": "pw"}, roles={"vic": "viewer"})
    assert [creds.role_of(n) for n in ("token", "ann", "vic", "gone")] == [
        "operator",
        "operator",
        "viewer",
        None,
    ]


def test_a_viewer_sees_every_page_but_no_write_button(store: Store, celery_app: Celery) -> None:
    store.add("job", task="app.job", timer="every 1h")
    store.add("off", task="app.off", timer="every 1h", enabled=False)
    client = dashboard(store, celery_app)
    log_in(client, "vic")
    for path in ("/", "/task?name=job", "/task?name=off", "/problems", "/audit"):
        response = client.get(path)
        assert response.status_code == 200, path
        page = html(response)
        assert "viewer" in page, path
        for button in ("Add task", ">Disable<", ">Enable<", "Run now<", ">Edit<", ">Remove<"):
            assert button not in page, (path, button)
    # The same pages for an operator have them (the check above is not vacuous).
    operator = dashboard(store, celery_app)
    log_in(operator, "ann")
    page = html(operator.get("/task?name=job"))
    for button in ("Add task", ">Disable<", ">Edit<", ">Remove<"):
        assert button in page, button


@pytest.mark.parametrize(("method", "path", "form"), WRITES)
def test_every_write_answers_403_to_a_viewer(
    store: Store, celery_app: Celery, method: str, path: str, form: dict[str, str]
) -> None:
    store.add("job", task="app.job", timer="every 1h")
    client = dashboard(store, celery_app)
    csrf = log_in(client, "vic")
    before = store.get("job")
    if method == "GET":
        response = client.get(path)
    else:
        response = client.post(path, data={**form, "csrf": csrf})
    assert response.status_code == 403
    page = html(response)
    assert "Not allowed" in page
    assert "vic" in page
    assert "a viewer" in page
    assert "Nothing was changed" in page
    assert store.get("job") == before
    assert [t.name for t in store.list()] == ["job"]
    assert [e.action for e in store.audit_trail()] == ["add"]
    assert store.history("job") == []  # no run
    # Basic auth as the viewer is refused the same way.
    basic = Client(client.application)
    auth = ("vic", USERS["vic"])
    got = basic.get(path, auth=auth) if method == "GET" else basic.post(path, data=form, auth=auth)
    assert got.status_code == 403


def test_operator_and_token_writes_are_recorded_under_their_names(
    store: Store, celery_app: Celery
) -> None:
    store.add("job", task="app.job", timer="every 1h")
    client = dashboard(store, celery_app)
    csrf = log_in(client, "ann")
    done = client.post("/task/action", data={"name": "job", "action": "disable", "csrf": csrf})
    assert done.status_code == 303
    added = client.post(
        "/task/new",
        data={"name": "new", "task": "app.n", "timer": "every 5m", "enabled": "on", "csrf": csrf},
    )
    assert added.status_code == 303, html(added)
    bearer = Client(client.application)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    sent = bearer.post("/task/action", data={"name": "job", "action": "enable"}, headers=headers)
    assert sent.status_code == 303
    ran = bearer.post("/task/action", data={"name": "job", "action": "run"}, headers=headers)
    assert ran.status_code == 303, html(ran)
    trail = [(e.actor, e.window, e.action, e.task_name) for e in reversed(store.audit_trail())]
    assert trail == [
        ("api", "api", "add", "job"),
        ("ann", "web", "disable", "job"),
        ("ann", "web", "add", "new"),
        ("token", "web", "enable", "job"),
        ("token", "web", "run", "job"),
    ]
    # The audit page shows them, newest first, to a viewer too.
    viewer = dashboard(store, celery_app)
    log_in(viewer, "vic")
    page = html(viewer.get("/audit"))
    rows = re.findall(r"<tr>\s*<td>[^<]*</td>\s*<td>([^<]*)</td>\s*<td>([^<]*)</td>", page)
    assert rows == [
        ("token", "web"),
        ("token", "web"),
        ("ann", "web"),
        ("ann", "web"),
        ("api", "api"),
    ]
    one = html(viewer.get("/audit?task=new"))
    assert "ann" in one
    assert "token" not in one.split("<table")[1]
    assert viewer.get("/audit?per_page=0").status_code == 400
    assert viewer.get("/audit?before=x").status_code == 400


def test_roles_are_read_at_each_request(store: Store, celery_app: Celery) -> None:
    """A session does not carry its role: changing the configuration changes it at once,
    and the session of a user no longer configured is no longer valid."""
    store.add("job", task="app.job", timer="every 1h")
    client = dashboard(store, celery_app, roles={})  # vic is an operator for now
    csrf = log_in(client, "vic")
    assert ">Disable<" in html(client.get("/task?name=job"))
    cookie = client.get_cookie("cronstore_session")
    assert cookie is not None
    # The same key (another process, or a restart) with vic now a viewer.
    demoted = dashboard(store, celery_app)
    demoted.set_cookie("cronstore_session", cookie.value)
    refused = demoted.post("/task/action", data={"name": "job", "action": "disable", "csrf": csrf})
    assert refused.status_code == 403
    assert store.get("job").enabled is True
    # And with vic removed: back to the login page.
    gone = Client(create_app(store, token=TOKEN, users={"ann": "ann-pass-1"}, secret_key=KEY))
    gone.set_cookie("cronstore_session", cookie.value)
    assert gone.get("/").status_code == 303


def test_a_paged_audit_page_links_to_older_entries(store: Store, celery_app: Celery) -> None:
    for i in range(5):
        store.add(f"t{i}", task="app.t", timer="every 1h")
    client = dashboard(store, celery_app)
    log_in(client, "vic")
    page = html(client.get("/audit?per_page=2"))
    link = re.search(r'<a rel="next" href="([^"]+)"', page)
    assert link is not None
    older = html(client.get(link.group(1).replace("&amp;", "&")))
    assert "t2" in older
    assert "t4" not in older.split("<table")[1]


# -- in a real browser ------------------------------------------------------------------------


@pytest.mark.browser
def test_viewer_and_audit_pages_in_chromium(tmp_path: Path) -> None:
    """A viewer logs in in Chromium, reads the audit trail, finds no write button and
    gets the 403 page for a write URL; neither page overflows at 1280 or 1600 px."""
    import threading

    from test_web_browser import CHROMIUM, _need_browser
    from werkzeug.serving import make_server

    sync_playwright = _need_browser()
    store = Store(f"sqlite:///{tmp_path / 'roles.sqlite'}")
    store.upgrade()
    store.acting("ann", "web").add("nightly", task="app.n", timer="*-*-* 02:00")
    store.acting("ann", "web").update("nightly", timer="*-*-* 03:00", description="later")
    httpd = make_server("127.0.0.1", 0, create_app(store, users=USERS, roles=ROLES))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_port}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{base}/login")
            page.fill("input[name=user]", "vic")
            page.fill("input[name=password]", USERS["vic"])
            page.click("button[type=submit]")
            page.wait_for_url(f"{base}/")
            assert page.locator("nav >> text=Add task").count() == 0
            page.click("nav >> text=Audit")
            page.wait_for_url(f"{base}/audit")
            rows = page.locator("table.audit tbody tr")
            assert rows.count() == 2
            assert "timer: *-*-* 02:00:00 -> *-*-* 03:00:00" in rows.nth(0).inner_text()
            assert rows.nth(1).locator("td").nth(1).inner_text() == "ann"
            for width in (1280, 1600):
                page.set_viewport_size({"width": width, "height": 800})
                assert page.evaluate("document.documentElement.scrollWidth") <= width
            page.goto(f"{base}/task?name=nightly")
            assert page.locator("button", has_text="Disable").count() == 0
            response = page.goto(f"{base}/task/edit?name=nightly")
            assert response is not None
            assert response.status == 403
            assert "a viewer" in page.locator("main").inner_text()
            browser.close()
    finally:
        httpd.shutdown()
        store.close()
