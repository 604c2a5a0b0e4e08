"""Hypothesis fuzzing of every window: every dashboard route and every CLI command.

Routes come from the dashboard's Werkzeug ``Map`` and commands from the click group, so
a new route or command is fuzzed without touching this file. The inputs are what broke
the windows before (issue 27): out-of-range numbers, over-long strings, control
characters, invalid UTF-8 (percent-encoded in URLs and forms, surrogate-escaped in argv)
and hostile text. The property: never a 500, never a traceback; a refusal is a 4xx (CLI:
exit 2 or 1) with a message.

The dashboard is fuzzed anonymous, logged in by session (with the session's CSRF token,
so the write handlers are really reached), by bearer token and with bad credentials;
a real SQLite store sits behind both windows.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
import pytest
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner
from hostile import HOSTILE, HTML_HOSTILE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.test import Client

from celery_cronstore import fields
from celery_cronstore.cli import cronstore
from celery_cronstore.store import Store
from celery_cronstore.web import create_app
from celery_cronstore.web.auth import SESSION_COOKIE
from celery_cronstore.web.guard import LoginLimiter

TOKEN = "fuzz-" + "z" * 20
FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # the same examples every run: CI fails or passes reproducibly
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- what to throw ----------------------------------------------------------------------------

NUMBERS = [
    "99999999999999999999999",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "2147483648",
    "0",
    "-1",
    "1e308",
    "-1e999",
    "nan",
    "inf",
    "1_000",
    "0x10",
    "\u0663",  # ARABIC-INDIC DIGIT THREE: int() reads it
    "9" * 5000,  # past Python's int() digit limit
    "1.5",
    "",
]
KNOWN = ["job", "every 1h", "*/5 * * * *", "UTC", "Europe/Berlin", "tenant:42", "[1]", "{}"]
CONTROL = st.text(
    alphabet=st.sampled_from(
        [chr(c) for c in range(0x20)] + ["\x7f", "\x85", "\u2028", "\u202e", "\ufeff"]
    ),
    min_size=1,
    max_size=8,
)
LONG = st.builds(
    lambda chunk, n: chunk * n,
    st.sampled_from(["a", "9", "é", "🚀", "%", "/"]),
    st.integers(1000, 70_000),
)
#: Numbers with the units ages, intervals and deadlines take ("99999999999999999999d").
WITH_UNITS = st.builds(
    lambda n, unit: n + unit,
    st.sampled_from([*NUMBERS[:5], "1e308", "0"]),
    st.sampled_from(["d", "h", "m", "s", "w", "min", " days"]),
)
TEXT = st.one_of(
    st.sampled_from(NUMBERS + KNOWN + HOSTILE + HTML_HOSTILE),
    WITH_UNITS,
    st.builds("every {}".format, WITH_UNITS),
    st.text(max_size=40),
    CONTROL,
    LONG,
    st.builds(lambda a, b: a + b, st.sampled_from(KNOWN), CONTROL),
)
#: Raw bytes a query string or form body may carry: percent-encoded invalid UTF-8, bad
#: escapes, empty keys.
RAW = st.lists(
    st.sampled_from(
        ["%ff", "%c0%af", "%ed%a0%80", "%", "%zz", "%00", "&", "=", "&&=", "a=%80", "+", "%0d%0a"]
    ),
    max_size=6,
).map("".join)


def form_keys() -> list[str]:
    """Every name a dashboard form or query string reads (fields from the field table)."""
    names = ["name", "page", "per_page", "hp", "q", "sort", "desc", "enabled", "error"]
    names += ["kind", "owner_type", "timer", "tz", "next", "done", "action", "csrf", "token"]
    names += ["user", "password", "version", "submit"]
    return names + [f.name for f in fields.table()]


#: What access control answers before a handler runs (the fuzz must get past it too).
BLOCKED = ("authentication required", "CSRF", "read-only", "too many", "unknown Host")
PARAMS = st.dictionaries(
    st.one_of(st.sampled_from(form_keys()), st.text(max_size=8)), TEXT, max_size=6
)

# -- the dashboard ----------------------------------------------------------------------------


def web_routes() -> list[tuple[str, str]]:
    """Return (rule, method) of every route of the dashboard's URL map."""
    app = create_app(Store("sqlite://"))
    found = []
    for rule in app.url_map.iter_rules():
        # A rule without methods answers any: fuzz the two a browser sends.
        for method in sorted((rule.methods or {"GET", "POST"}) - {"HEAD", "OPTIONS"}):
            found.append((rule.rule, method))
    return found


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'web.sqlite'}")
    store.upgrade()
    yield store
    store.close()


@pytest.fixture(scope="module")
def web(fuzz_store: Store) -> dict[str, Any]:
    celery_app = Celery(f"fuzz-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    celery_app.conf.cronstore_require_registered = False
    # Enough attempts that the fuzz reaches the handlers (the limit has its own tests).
    limiter = LoginLimiter(capacity=10**9)
    app = create_app(fuzz_store, token=TOKEN, celery_app=celery_app, limiter=limiter)
    session = Client(app)
    assert session.post("/login", data={"token": TOKEN}).status_code == 303
    cookie = session.get_cookie(SESSION_COOKIE)
    assert cookie is not None
    page = session.get("/task/new").get_data(as_text=True)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    return {
        "app": app,
        "open": create_app(fuzz_store, limiter=limiter),  # no credentials: read-only
        "session": cookie.value,
        "csrf": csrf.group(1),
    }


def _path(rule: str, file: str) -> str:
    return rule.replace("<file>", quote(file, safe=""))


def _ensure_job(store: Store) -> None:
    """Put back the task the fuzz aims at (an earlier example may have removed it)."""
    try:
        store.get("job")
    except KeyError:
        store.add("job", task="app.job", timer="every 1h")


@pytest.mark.parametrize(("rule", "method"), web_routes())
def test_every_route_answers_bad_input_without_a_500(
    web: dict[str, Any], fuzz_store: Store, rule: str, method: str
) -> None:
    reached: list[int] = []
    tried: list[str] = []

    @FUZZ
    @given(
        who=st.sampled_from(["session", "bearer", "anonymous", "open", "bad-bearer", "cookie"]),
        params=PARAMS,
        raw=RAW,
        file=TEXT,
        raw_body=st.booleans(),
        host=st.one_of(st.just("localhost"), st.just("127.0.0.1:8000"), TEXT),
    )
    def run(
        who: str, params: dict[str, str], raw: str, file: str, raw_body: bool, host: str
    ) -> None:
        tried.append(who)
        _ensure_job(fuzz_store)
        client = Client(web["open" if who == "open" else "app"])
        if who == "session":  # a fresh client each time: /logout drops its cookie
            client.set_cookie(SESSION_COOKIE, web["session"])
        # An HTTP server never hands over a header holding CR, LF or NUL (nor does the
        # test client take one): the rest of the junk reaches the dashboard.
        host = re.sub("[\r\n\x00]", "", host.encode("utf-8", "replace").decode("latin-1"))
        headers = {"Host": host}
        if who == "bearer":
            headers["Authorization"] = f"Bearer {TOKEN}"
        elif who == "bad-bearer":
            headers["Authorization"] = "Basic " + file[:50].encode("utf-8", "replace").hex()
        elif who == "cookie":
            client.set_cookie("cronstore_session", quote(file[:200]))
        path = _path(rule, file)
        if method == "GET":
            query = "&".join(f"{quote(k)}={quote(v)}" for k, v in params.items())
            response = client.get(path, query_string=f"{query}&{raw}", headers=headers)
        else:
            data = dict(params)
            if who == "session":
                data["csrf"] = web["csrf"]
            if raw_body:
                body = "&".join(f"{quote(k)}={quote(v)}" for k, v in data.items()) + "&" + raw
                response = client.post(
                    path,
                    data=body.encode("latin-1", "replace"),
                    content_type="application/x-www-form-urlencoded",
                    headers=headers,
                )
            else:
                response = client.post(path, data=data, headers=headers)
        body_text = response.get_data(as_text=True)
        assert response.status_code < 500, (path, params, body_text[:500])
        assert "Traceback" not in body_text
        if response.status_code >= 400:
            assert body_text.strip(), "a refusal says why"
        location = response.headers.get("Location", "")
        if not any(m in body_text for m in BLOCKED) and "/login?next=" not in location:
            reached.append(response.status_code)

    run()
    assert len(tried) >= 20, f"{method} {rule}: only {len(tried)} examples ran"
    assert reached, f"{method} {rule}: no example got past access control"


# -- the command line -------------------------------------------------------------------------

#: argv as Python sees bytes that are not UTF-8 (os.fsdecode: surrogate escapes).
ARGV_TEXT = st.one_of(
    TEXT, st.binary(min_size=1, max_size=12).map(lambda b: b.decode("utf-8", "surrogateescape"))
)


def cli_commands() -> list[str]:
    return sorted(cronstore.commands)


@pytest.fixture(scope="module")
def cli_app(tmp_path_factory: pytest.TempPathFactory) -> Celery:
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz-cli') / 'cli.sqlite'}"
    Store(url).upgrade()
    app = Celery(f"fuzz-cli-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = url
    app.conf.cronstore_require_registered = False
    app.conf.task_ignore_result = True
    return app


def _argv(draw: Any, command: click.Command) -> list[str]:
    """Draw an argv for ``command``: some of its options with fuzzed values, its
    arguments fuzzed (or a known name)."""
    params = command.get_params(click.Context(command))
    args: list[str] = []
    for param in params:
        if isinstance(param, click.Option):
            if param.name == "help" or not draw(st.booleans()):
                continue
            if param.is_flag:
                args.append(draw(st.sampled_from(param.opts + param.secondary_opts)))
            else:
                args += [param.opts[0], draw(ARGV_TEXT)]
    for param in params:
        if isinstance(param, click.Argument):
            args.append(draw(st.one_of(st.just("job"), ARGV_TEXT)))
    return args


@pytest.mark.parametrize("name", cli_commands())
def test_every_command_answers_bad_input_without_a_traceback(cli_app: Celery, name: str) -> None:
    command = cronstore.commands[name]
    store = Store(cli_app.conf.cronstore_url)
    tried: list[bool] = []
    try:

        @settings(FUZZ, max_examples=30)
        @given(data=st.data(), json_out=st.booleans(), tz=st.none() | ARGV_TEXT)
        def run(data: st.DataObject, json_out: bool, tz: str | None) -> None:
            tried.append(json_out)
            _ensure_job(store)
            argv = [*(["--json"] if json_out else []), *(["--tz", tz] if tz is not None else [])]
            argv += [name, *data.draw(st.composite(lambda draw: _argv(draw, command))())]
            if name == "web":
                argv.append("--check")  # validate everything, then exit instead of serving
            result = CliRunner().invoke(
                cronstore, argv, obj=CLIContext(app=cli_app, no_color=True, workdir=None)
            )
            output = result.output
            assert "Traceback" not in output, (argv, output)
            assert result.exception is None or isinstance(result.exception, SystemExit), (
                argv,
                repr(result.exception),
                output[-2000:],
            )
            assert result.exit_code in (0, 1, 2), (argv, result.exit_code, output[-2000:])
            assert "unexpected " not in output, (argv, output[-2000:])
            if result.exit_code:
                assert output.strip(), "a refusal says why"

        run()
    finally:
        store.close()
    assert len(tried) >= 15, f"{name}: only {len(tried)} examples ran"


def test_the_fuzz_covers_every_route_and_command() -> None:
    """The lists are read from the code: the dashboard's map and the click group."""
    routes = {rule for rule, _ in web_routes()}
    assert {"/", "/task", "/task/edit", "/task/new", "/login", "/metrics"} <= routes
    assert {"add", "edit", "list", "web", "migrate", "health"} <= set(cli_commands())
    assert Path(__file__).name == "test_fuzz_windows.py"
