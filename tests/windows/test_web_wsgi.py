"""Production serving: ``celery_cronstore.web.wsgi:application`` under a real gunicorn,
its configuration errors, ``/healthz``, and the development server saying what it is.

The gunicorn test starts the real executable with two worker processes on a free port
and logs in and lists through it (a session made by one worker is valid in the other);
a bad configuration stops gunicorn at once with one line naming the variable.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner
from werkzeug.test import Client

from celery_cronstore.cli import cronstore
from celery_cronstore.store import Store
from celery_cronstore.store.migrate import app_argument, fix
from celery_cronstore.web import create_app
from celery_cronstore.web.wsgi import ENV_APP, WsgiConfigError, load, secret_key
from harness.ports import free_port

REPO = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).with_name("gunicorn")
PASSWORD = "wsgi-Pw-5150"


def write_project(where: Path, url: str, *, name: str = "wsgiproj") -> str:
    """Write a Celery project module whose app's own name is not importable."""
    (where / f"{name}.py").write_text(
        "from celery import Celery\n"
        "app = Celery('internal-name', broker='memory://')\n"
        f"app.conf.cronstore_url = {url!r}\n"
        "app.conf.cronstore_require_registered = False\n"
    )
    return name


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Store]:
    url = f"sqlite:///{tmp_path / 'cron.sqlite'}"
    store = Store(url)
    store.upgrade()
    store.add("nightly-report", task="app.report", timer="*-*-* 02:00")
    store.close()
    monkeypatch.syspath_prepend(str(tmp_path))
    return write_project(tmp_path, url), Store(url)


# -- the configuration --------------------------------------------------------------------


def test_load_builds_the_dashboard_the_environment_describes(project: tuple[str, Store]) -> None:
    module, store = project
    env = {ENV_APP: module, "CRONSTORE_WEB_USERS": f"ann:{PASSWORD},vic:{PASSWORD}:viewer"}
    app = load(env)
    assert app.credentials.role_of("vic") == "viewer"
    assert app.credentials.role_of("ann") == "operator"
    client = Client(app)
    assert client.get("/", auth=("ann", PASSWORD)).status_code == 200
    assert "nightly-report" in client.get("/", auth=("vic", PASSWORD)).get_data(as_text=True)
    # Every worker derives the same session key from the same credentials.
    assert load(env).signer.key == app.signer.key
    assert load({**env, "CRONSTORE_WEB_SECRET_KEY": "s" * 32}).signer.key == b"s" * 32
    assert load({**env, f"{ENV_APP}": f"{module}:app"}).celery_app.main == "internal-name"
    app.store.close()
    store.close()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "CRONSTORE_APP is not set: set it to the module of your Celery app"),
        ({ENV_APP: "no_such_module_xyz"}, "CRONSTORE_APP='no_such_module_xyz': no Celery app"),
        ({ENV_APP: "{module}:nothing"}, ":nothing': no Celery app found there"),
        ({ENV_APP: "{module}:Celery"}, "names a type, not a Celery app"),
        ({ENV_APP: "{module}"}, "no credentials: set CRONSTORE_WEB_TOKEN or CRONSTORE_WEB_USERS"),
        ({ENV_APP: "{module}", "CRONSTORE_WEB_USERS": "ann"}, "CRONSTORE_WEB_USERS: web users"),
        ({ENV_APP: "{module}", "CRONSTORE_WEB_TOKEN": "short"}, "at least 16 characters"),
        ({ENV_APP: "{module}", "CRONSTORE_WEB_READ_ONLY": "maybe"}, "give 1 or 0"),
        (
            {ENV_APP: "{module}", "CRONSTORE_WEB_TOKEN": "t" * 20, "CRONSTORE_WEB_SECRET_KEY": "x"},
            "CRONSTORE_WEB_SECRET_KEY must be at least 16",
        ),
    ],
)
def test_a_bad_environment_is_refused_naming_the_variable(
    project: tuple[str, Store], env: dict[str, str], message: str
) -> None:
    module, store = project
    given = {k: v.replace("{module}", module) for k, v in env.items()}
    with pytest.raises(WsgiConfigError) as refused:
        load(given)
    assert message in str(refused.value)
    store.close()


def test_read_only_needs_no_credentials(project: tuple[str, Store]) -> None:
    module, store = project
    app = load({ENV_APP: module, "CRONSTORE_WEB_READ_ONLY": "1"})
    assert app.read_only
    app.store.close()
    store.close()


def test_an_old_schema_stops_it_naming_the_module_given(tmp_path: Path) -> None:
    module = write_project(tmp_path, f"sqlite:///{tmp_path / 'fresh.sqlite'}", name="hintmod")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(WsgiConfigError) as refused:
            load({ENV_APP: module, "CRONSTORE_WEB_TOKEN": "t" * 20})
    finally:
        sys.path.remove(str(tmp_path))
    assert "celery -A hintmod cronstore migrate" in str(refused.value)
    assert "internal-name" not in str(refused.value)


def test_the_migrate_hint_names_what_dash_a_was_given_else_a_placeholder() -> None:
    assert app_argument(["celery", "-A", "proj.celery", "beat"]) == "proj.celery"
    assert app_argument(["celery", "--app=proj", "worker", "-B"]) == "proj"
    assert app_argument(["celery", "-Aproj", "beat"]) == "proj"
    assert app_argument(["manage.py", "runserver"]) is None
    assert fix("proj") == "run `celery -A proj cronstore migrate` (or Store.upgrade())"
    assert "celery -A <your -A module> cronstore migrate" in fix(None)


def test_beat_names_the_dash_a_it_was_started_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: beat's schema error said ``celery -A <the app's internal name>``."""
    from celery_cronstore import Scheduler

    app = Celery("internal-name", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    app.conf.cronstore_auto_migrate_sqlite = False
    monkeypatch.setattr(sys, "argv", ["celery", "-A", "proj.celery", "beat", "-S", "cronstore"])
    with pytest.raises(SystemExit) as stopped:
        Scheduler(app, lazy=True).tick()
    assert "run `celery -A proj.celery cronstore migrate`" in str(stopped.value)
    assert "internal-name" not in str(stopped.value)
    monkeypatch.setattr(sys, "argv", ["python", "run_beat.py"])
    with pytest.raises(SystemExit, match="celery -A <your -A module> cronstore migrate"):
        Scheduler(app, lazy=True).tick()


def test_the_session_key_changes_with_any_credential() -> None:
    one = secret_key({}, "t" * 20, {"ann": "a"})
    assert secret_key({}, "t" * 20, {"ann": "a"}) == one
    assert secret_key({}, "t" * 20, {"ann": "b"}) != one
    assert secret_key({}, "u" * 20, {"ann": "a"}) != one


# -- /healthz -----------------------------------------------------------------------------


def test_healthz_answers_without_login_from_any_host(store: Store) -> None:
    client = Client(create_app(store, token="t" * 20))
    for host in ("localhost", "10.0.3.7:8000", "pod-1.internal"):  # a probe's Host
        response = client.get("/healthz", headers={"Host": host})
        assert response.status_code == 200
        assert response.headers["Content-Type"] == "application/json"
        assert json.loads(response.get_data()) == {"status": "ok"}
    assert client.get("/", headers={"Host": "10.0.3.7:8000"}).status_code == 400  # pages: not


def test_healthz_is_503_on_an_old_schema_and_a_database_away(tmp_path: Path) -> None:
    unmigrated = Store(f"sqlite:///{tmp_path / 'secret-name.sqlite'}")
    response = Client(create_app(unmigrated)).get("/healthz")
    assert response.status_code == 503
    body = response.get_data(as_text=True)
    assert json.loads(body)["status"] == "schema"
    assert "secret-name" not in body
    assert "sqlite" not in body
    away = Store(
        f"postgresql+psycopg://cron:{PASSWORD}@127.0.0.1:1/prod_db",
        connect_args={"connect_timeout": 2},
    )
    response = Client(create_app(away, token="t" * 20)).get("/healthz")
    assert response.status_code == 503
    body = response.get_data(as_text=True)
    assert json.loads(body) == {"status": "unavailable", "reason": "the store does not answer"}
    for leak in (PASSWORD, "cron", "prod_db", "127.0.0.1", "postgresql"):
        assert leak not in body
    unmigrated.close()
    away.close()


# -- the development server says what it is -------------------------------------------------


def test_the_web_command_says_it_is_the_development_server(db_url: str) -> None:
    app = Celery(f"web-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = db_url
    obj = CLIContext(app=app, no_color=True, workdir=None)
    helped = CliRunner().invoke(cronstore, ["web", "--help"], obj=obj)
    assert "Werkzeug's development server" in helped.output
    assert "celery_cronstore.web.wsgi:application" in helped.output
    started = CliRunner().invoke(cronstore, ["web", "--check", "--read-only"], obj=obj)
    assert started.exit_code == 0, started.output
    assert "this is Werkzeug's development server" in started.stderr
    assert "gunicorn" in started.stderr
    assert "waitress" in started.stderr


# -- a real gunicorn ------------------------------------------------------------------------


@pytest.fixture
def gunicorn_env(project: tuple[str, Store], tmp_path: Path) -> Iterator[dict[str, str]]:
    if not GUNICORN.exists() and shutil.which("gunicorn") is None:
        pytest.skip("gunicorn is not installed (the dev group has it)")
    module, store = project
    store.close()
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": f"{tmp_path}:{REPO}",
        ENV_APP: module,
        "CRONSTORE_WEB_USERS": f"ann:{PASSWORD},vic:{PASSWORD}:viewer",
    }


def gunicorn_command() -> list[str]:
    """Return gunicorn and, where it has one (27+), its control socket turned off: two
    gunicorns (parallel tests) would share ``~/.gunicorn/gunicorn.ctl``."""
    command = [str(GUNICORN if GUNICORN.exists() else shutil.which("gunicorn"))]
    helped = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60)
    return [*command, "--no-control-socket"] if "--no-control-socket" in helped.stdout else command


def start_gunicorn(
    env: dict[str, str], cwd: Path, port: int, workers: int = 2
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *gunicorn_command(),
            "--workers",
            str(workers),
            "--bind",
            f"127.0.0.1:{port}",
            "--graceful-timeout",
            "5",
            "celery_cronstore.web.wsgi:application",
        ],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def fetch(opener: urllib.request.OpenerDirector, url: str, data: Any = None) -> tuple[int, str]:
    body = None if data is None else urllib.parse.urlencode(data).encode()
    try:
        with opener.open(url, body, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.slow
def test_gunicorn_serves_the_dashboard(gunicorn_env: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    server = start_gunicorn(gunicorn_env, tmp_path, port)
    base = f"http://127.0.0.1:{port}"
    plain = urllib.request.build_opener()
    try:
        deadline = time.monotonic() + 30
        status = 0
        while time.monotonic() < deadline and status != 200:
            assert server.poll() is None, server.communicate()[0]
            try:
                status, body = fetch(plain, f"{base}/healthz")
            except OSError:
                time.sleep(0.2)
        assert status == 200
        assert json.loads(body) == {"status": "ok"}
        # Not logged in: the login page, which shows nothing about the store.
        status, page = fetch(plain, f"{base}/login")
        assert status == 200
        assert "cron.sqlite" not in page
        jar = http.cookiejar.CookieJar()
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        status, page = fetch(
            browser, f"{base}/login", {"user": "vic", "password": PASSWORD, "next": "/"}
        )
        assert status == 200, page  # followed the redirect to the list
        assert "nightly-report" in page
        # Two workers: the session is valid in whichever answers (same derived key).
        for _ in range(8):
            status, page = fetch(browser, f"{base}/?q=nightly")
            assert status == 200
            assert "nightly-report" in page
            assert "viewer" in page
        status, page = fetch(browser, f"{base}/task/new")
        assert status == 403
        assert "Not allowed" in page
    finally:
        server.send_signal(signal.SIGTERM)
        output = server.communicate(timeout=30)[0]
    assert "Traceback" not in output, output


@pytest.mark.slow
def test_gunicorn_stops_at_once_on_a_bad_configuration(
    gunicorn_env: dict[str, str], tmp_path: Path
) -> None:
    env = {k: v for k, v in gunicorn_env.items() if k != ENV_APP}
    # One worker: with two failing at once gunicorn 27 itself may print a traceback of its
    # own (HaltServer raised again while it stops), whatever the application does.
    server = start_gunicorn(env, tmp_path, free_port(), workers=1)
    try:
        output = server.communicate(timeout=60)[0]
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode != 0
    assert "celery-cronstore: CRONSTORE_APP is not set" in output
    assert "Worker failed to boot" in output  # gunicorn stopped instead of looping
    assert "Traceback" not in output


def test_the_login_page_never_shows_the_store(tmp_path: Path) -> None:
    """Regression: without credentials the login page showed the store URL to anyone."""
    store = Store(f"sqlite:///{tmp_path / 'hidden-name.sqlite'}")
    store.upgrade()
    for app in (create_app(store), create_app(store, token="t" * 20)):
        page = Client(app).get("/login").get_data(as_text=True)
        assert "hidden-name" not in page
        assert "sqlite" not in page
    store.close()
