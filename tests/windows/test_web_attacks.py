"""Regressions of the attack run on ``cronstore web`` (issue 27) and of the database outage
that answered 500 (issue 30): each finding is a test named after it.

Open redirects after login, 500s on out-of-range numbers and newlines, unlimited login
guessing, no ``Host`` check (DNS rebinding), the store URL on the login page, and pages
(and ``/metrics``) during a PostgreSQL outage made real by cutting a TCP proxy.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest
import sqlalchemy as sa
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner
from werkzeug.test import Client, TestResponse

from celery_cronstore.cli import cronstore
from celery_cronstore.store import Store
from celery_cronstore.web import create_app
from celery_cronstore.web.guard import LoginLimiter, unsafe_next
from harness.tcp_proxy import Proxy

TOKEN = "tok-" + "y" * 20
BEARER = {"Authorization": f"Bearer {TOKEN}"}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    sqlite_store.add("job", task="app.job", timer="every 1h")
    return sqlite_store


@pytest.fixture
def client(store: Store) -> Client:
    return Client(create_app(store, token=TOKEN))


def text(response: TestResponse) -> str:
    return response.get_data(as_text=True)


# -- open redirect after login ------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "/\t/evil.example",
        "/%09/evil.example",  # decoded by the query string parser to the line above
        "//evil.example",
        "/\\evil.example",
        "\\\\evil.example",
        "/\\/evil.example",
        "https://evil.example/",
        "javascript:alert(1)",
        "evil.example",
        "/\r\n/evil.example",
        "/\n/evil.example",
        "/ok\r\nSet-Cookie: x=1",
        "/\x00/evil.example",
        " //evil.example",
    ],
)
def test_login_next_never_leaves_the_site(client: Client, target: str) -> None:
    """Regression: ``/login?next=/%09/evil.example`` redirected to ``//evil.example``, and a
    ``next`` holding ``\\r\\n`` answered 500."""
    query = target if "%" in target else None
    got = client.get("/login", query_string=f"next={query}" if query else {"next": target})
    assert got.status_code == 400
    assert "bad next" in text(got)
    posted = client.post("/login", data={"token": TOKEN, "next": unquote(target)})
    assert posted.status_code == 400, posted.headers.get("Location")
    assert "Location" not in posted.headers
    assert "bad next" in text(posted)
    assert "must" in text(posted)  # says what a good one looks like


def test_login_next_on_the_site_is_followed(client: Client) -> None:
    response = client.post("/login", data={"token": TOKEN, "next": "/task?name=job"})
    assert response.status_code == 303
    assert response.headers["Location"] == "/task?name=job"
    assert unsafe_next("/problems") is None


# -- out-of-range numbers -----------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "page=99999999999999999999999",
        "page=9223372036854775807",
        "page=0",
        "page=-1",
        "page=1e9",
        "per_page=9223372036854775807",
        "page=%ff",
        "page=" + "9" * 5000,  # past Python's int() digit limit
    ],
)
def test_out_of_range_page_numbers_get_400(client: Client, query: str) -> None:
    """Regression: ``/?page=99999999999999999999999`` (and 2**63 - 1) answered 500."""
    response = client.get(f"/?{query}", headers=BEARER)
    assert response.status_code == 400
    assert "must be a whole number from 1 to" in text(response)


@pytest.mark.parametrize("hp", ["99999999999999999999999", "9223372036854775807", "0", "x"])
def test_out_of_range_history_page_gets_400(client: Client, hp: str) -> None:
    """Regression: ``/task?name=...&hp=99999999999999999999999`` answered 500."""
    response = client.get(f"/task?name=job&hp={hp}", headers=BEARER)
    assert response.status_code == 400
    assert "hp must be a whole number from 1 to 100000" in text(response)
    assert client.get("/task?name=job&hp=2", headers=BEARER).status_code == 200


# -- login attempts -----------------------------------------------------------------------


def test_login_guessing_is_rate_limited_per_client(client: Client) -> None:
    """Regression: 200 wrong logins in 0.4 s were all answered."""
    env = {"REMOTE_ADDR": "203.0.113.9"}
    codes = [
        client.post("/login", data={"token": f"guess-{i:04d}-xxxxxxxx"}, environ_base=env)
        for i in range(200)
    ]
    assert [r.status_code for r in codes[:10]] == [403] * 10
    refused = codes[10:]
    assert {r.status_code for r in refused} == {429}
    assert 1 <= int(refused[0].headers["Retry-After"]) <= 6
    assert "too many login attempts" in text(refused[0])
    # Even the right token waits: the bucket is the address's, not the guess's.
    right = client.post("/login", data={"token": TOKEN}, environ_base=env)
    assert right.status_code == 429
    # Another address is not held back by this one.
    other = client.post("/login", data={"token": TOKEN}, environ_base={"REMOTE_ADDR": "10.0.0.2"})
    assert other.status_code == 303


def test_guessing_through_the_authorization_header_is_limited_too(client: Client) -> None:
    env = {"REMOTE_ADDR": "198.51.100.7"}
    codes = [
        client.get(
            "/", headers={"Authorization": f"Bearer wrong-{i}-xxxxxxxxxxxx"}, environ_base=env
        ).status_code
        for i in range(30)
    ]
    assert codes[:10] == [303] * 10  # to the login page
    assert set(codes[10:]) == {429}
    basic = client.get("/", auth=("u", "p"), environ_base=env)
    assert basic.status_code == 429
    # Right credentials give their attempt back: a script polling with its token is
    # never limited.
    for _ in range(30):
        assert client.get("/", headers=BEARER).status_code == 200


def test_the_limiter_keeps_a_bounded_number_of_clients() -> None:
    now = [0.0]
    limiter = LoginLimiter(capacity=2, refill_seconds=10, max_clients=100, clock=lambda: now[0])
    for i in range(5000):
        limiter.take(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(limiter) == 100
    assert limiter.take("192.0.2.1") == 0
    assert limiter.take("192.0.2.1") == 0
    assert limiter.take("192.0.2.1") == pytest.approx(10.0)
    now[0] += 5
    assert limiter.take("192.0.2.1") == pytest.approx(5.0)
    now[0] += 10
    assert limiter.take("192.0.2.1") == 0
    # IPv6 clients share their /64: rotating the low bits does not buy attempts.
    assert limiter.take("2001:db8::1") == limiter.take("2001:db8::2") == 0
    assert limiter.take("2001:db8::ffff") > 0


# -- Host header (DNS rebinding) ----------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example"])
def test_unknown_host_is_refused_with_the_setting_named(store: Store, host: str) -> None:
    """Regression: a credential-less dashboard answered any ``Host``: a page on another
    site could point its name at 127.0.0.1 and read it (DNS rebinding)."""
    client = Client(create_app(store))
    response = client.get("/", headers={"Host": host})
    assert response.status_code == 400
    assert "cronstore_web_allowed_hosts" in text(response)
    assert "job" not in text(response)
    for path in ("/metrics", "/login", "/static/app.css", "/task?name=job"):
        assert client.get(path, headers={"Host": host}).status_code == 400, path


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:8000", "127.0.0.1:8000", "[::1]:8000", "127.0.0.2"]
)
def test_localhost_names_are_always_served(store: Store, host: str) -> None:
    client = Client(create_app(store))
    assert client.get("/", headers={"Host": host}).status_code == 200


def test_allowed_hosts_come_from_the_setting_and_the_bound_address(store: Store) -> None:
    app = Celery(f"h-{uuid.uuid4().hex[:6]}", set_as_current=False)
    app.conf.cronstore_web_allowed_hosts = "cron.example.com, .ops.example"
    client = Client(create_app(store, celery_app=app, bound_host="10.1.2.3"))
    for host in ("cron.example.com", "CRON.example.com:443", "a.ops.example", "10.1.2.3:8000"):
        assert client.get("/", headers={"Host": host}).status_code == 200, host
    for host in ("example.com", "evil-ops.example", "10.1.2.4"):
        assert client.get("/", headers={"Host": host}).status_code == 400, host
    anything = Client(create_app(store, allowed_hosts=["*"]))
    assert anything.get("/", headers={"Host": "proxy.internal"}).status_code == 200


def test_the_web_command_takes_allowed_hosts(db_url: str, tmp_path: Path) -> None:
    app = Celery(f"h-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = db_url
    app.conf.cronstore_web_allowed_hosts = ["from-setting.example"]
    result = CliRunner().invoke(
        cronstore,
        ["web", "--check", "--token", TOKEN, "--allowed-hosts", "cron.example,.ops.example"],
        obj=CLIContext(app=app, no_color=True, workdir=None),
    )
    assert result.exit_code == 0, result.output
    assert "localhost, 127.0.0.1, ::1, from-setting.example, cron.example, .ops.example" in (
        result.output
    )
    bad = CliRunner().invoke(
        cronstore,
        ["web", "--check", "--token", TOKEN, "--allowed-hosts", "evil/path"],
        obj=CLIContext(app=app, no_color=True, workdir=None),
    )
    assert bad.exit_code == 2
    assert "is not a host name" in bad.output
    app.conf.cronstore_web_allowed_hosts = 42
    wrong = CliRunner().invoke(
        cronstore, ["web", "--check"], obj=CLIContext(app=app, no_color=True, workdir=None)
    )
    assert wrong.exit_code == 2
    assert "cronstore_web_allowed_hosts must be a list of host names" in wrong.output


# -- nothing about the store before login -------------------------------------------------


def test_login_page_does_not_show_the_store(store: Store, client: Client) -> None:
    """Regression: the login page showed the store URL (user, host, database) to anyone."""
    database = Path(store.engine.url.database or "").name
    for path in ("/login", "/login?next=/task%3Fname%3Djob"):
        page = text(client.get(path))
        assert database not in page, path
        assert "sqlite" not in page, path
    client.post("/login", data={"token": TOKEN})
    assert database in text(client.get("/"))


# -- database outage (issue 30) -----------------------------------------------------------


@pytest.fixture
def proxied(postgres_url: str) -> Iterator[tuple[Store, Proxy]]:
    """A PostgreSQL store reached through a proxy the test can cut (the database's clock)."""
    Store(postgres_url).upgrade()
    url = sa.make_url(postgres_url)
    proxy = Proxy((url.host or "127.0.0.1", url.port or 5432))
    through = url.set(host="127.0.0.1", port=proxy.port)
    store = Store(
        through.render_as_string(hide_password=False), connect_args={"connect_timeout": 3}
    )
    with store.begin() as conn:
        for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    store.add("job", task="app.job", timer="every 1h")
    yield store, proxy
    proxy.close()
    store.close()


@pytest.mark.postgres
def test_every_page_answers_503_while_the_database_is_away(
    proxied: tuple[Store, Proxy],
) -> None:
    """Regression: during a database outage ``/metrics`` (and the pages) answered 500."""
    store, proxy = proxied
    client = Client(create_app(store, token=TOKEN))
    anonymous = Client(create_app(store))
    assert client.get("/task?name=job", headers=BEARER).status_code == 200
    assert "cronstore_store_up 1.0" in text(client.get("/metrics", headers=BEARER))
    proxy.down()
    pages = ["/", "/task?name=job", "/task/edit?name=job", "/problems", "/task/new"]
    for path in pages:
        response = client.get(path, headers=BEARER)
        assert response.status_code in (503, 200), path  # /task/new needs no database
        if response.status_code == 503:
            page = text(response)
            assert "Store unavailable" in page, path
            assert "is unreachable or refused the connection" in page
            assert response.headers["Retry-After"] == "10"
    assert client.get("/", headers=BEARER).status_code == 503
    # Anonymous on a credential-less dashboard: the page says unavailable, no details
    # beyond what it shows anyway.
    assert "Store unavailable" in text(anonymous.get("/"))
    write = client.post("/task/action", data={"name": "job", "action": "disable"}, headers=BEARER)
    assert write.status_code == 503
    metrics = client.get("/metrics", headers=BEARER)
    assert metrics.status_code == 200
    assert "cronstore_store_up 0.0" in text(metrics)
    assert "cronstore_ledger_rows" not in text(metrics)
    assert client.get("/login").status_code == 200  # the login page needs no database
    proxy.up()
    assert client.get("/task?name=job", headers=BEARER).status_code == 200
    assert "cronstore_store_up 1.0" in text(client.get("/metrics", headers=BEARER))


# -- the migrate hint names the -A module -------------------------------------------------


def test_migrate_hint_names_the_module_given_to_dash_a(tmp_path: Path) -> None:
    """Regression: the hint said ``celery -A <the app's internal name>``, which is not
    importable; it names what ``-A`` was given."""
    (tmp_path / "hintproj.py").write_text(
        "from celery import Celery\n"
        "app = Celery('internal-name', broker='memory://')\n"
        f"app.conf.cronstore_url = 'sqlite:///{tmp_path / 'fresh.sqlite'}'\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "celery_cronstore.cli", "-A", "hintproj", "cronstore", "list"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1, done.stderr
    assert "celery -A hintproj cronstore migrate" in done.stderr
    assert "internal-name" not in done.stderr
    assert re.search(r"Traceback", done.stderr) is None


# -- found by the fuzz (tests/windows/test_fuzz_windows.py) -------------------------------


def test_add_form_posted_without_the_enabled_box_is_redrawn_not_a_500(client: Client) -> None:
    """Regression: a browser leaves an unticked checkbox out of the form; the add form
    posted that way with an error (or as a preview) answered 500 (the template read
    ``values.enabled``)."""
    client.post("/login", data={"token": TOKEN})
    page = text(client.get("/task/new"))
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    data = {"csrf": csrf.group(1), "name": "x", "task": "app.x", "timer": "every 99y"}
    response = client.post("/task/new", data=data)
    assert response.status_code == 400
    assert 'id="error-timer"' in text(response)
    assert 'name="enabled" checked' not in text(response)


def _cli(app: Celery, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cronstore, list(args), obj=CLIContext(app=app, no_color=True, workdir=None)
    )
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def test_prune_with_an_age_past_the_calendar_is_bad_input(sqlite_url: str) -> None:
    """Regression: ``prune --older-than 99999999999999999999d`` said ``unexpected
    OverflowError`` (exit 1)."""
    Store(sqlite_url).upgrade()
    app = Celery(f"p-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = sqlite_url
    for age in ("99999999999999999999d", "9" * 400, "365001d"):
        code, output = _cli(app, "prune", "--older-than", age)
        assert code == 2, output
        assert "is too long: at most 365000d" in output
    assert _cli(app, "prune", "--dry-run", "--older-than", "365000d")[0] == 0


def test_arguments_that_are_not_utf8_are_refused_by_name(sqlite_url: str) -> None:
    """Regression: ``show`` with a name holding bytes that are not UTF-8 (Python's
    surrogate escapes) said ``'utf-8' codec can't encode character``."""
    Store(sqlite_url).upgrade()
    app = Celery(f"u-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = sqlite_url
    name = b"job\xff".decode("utf-8", "surrogateescape")
    code, output = _cli(app, "show", name)
    assert code == 2
    assert "NAME is not valid UTF-8 (byte 0xff at position 3)" in output
    code, output = _cli(app, "list", "--task", name)
    assert code == 2
    assert "--task is not valid UTF-8" in output
