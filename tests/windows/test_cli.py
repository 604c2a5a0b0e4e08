"""``celery -A app cronstore ...``: every command on SQLite, PostgreSQL and MariaDB.

Most tests drive the click group in-process with ``CliRunner`` and a Celery app whose
``cronstore_url`` is the test database (broker ``memory://``); the last ones run the real
``celery`` executable in a subprocess.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner, Result

from celery_cronstore.cli import cronstore
from celery_cronstore.store import Claimer, Store
from celery_cronstore.testing import FrozenClock

PASSWORD = "s3cret-Pw-91"
REPO = Path(__file__).resolve().parents[2]

Run = Callable[..., Result]


def make_app(url: str, *, registered: bool = False) -> Celery:
    """An app for the CLI; its tasks live in other services' workers unless ``registered``."""
    app = Celery(f"cli-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = url
    app.conf.task_ignore_result = True
    app.conf.cronstore_require_registered = registered
    return app


def runner_for(app: Celery) -> Run:
    def run(*args: str, code: int = 0) -> Result:
        result = CliRunner().invoke(
            cronstore, list(args), obj=CLIContext(app=app, no_color=True, workdir=None)
        )
        assert "Traceback" not in result.output
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"{args} raised {result.exception!r}\n{result.output}")
        assert result.exit_code == code, f"{args}: exit {result.exit_code}\n{result.output}"
        return result

    return run


@pytest.fixture
def app(db_url: str) -> Celery:
    return make_app(db_url)


@pytest.fixture
def run(app: Celery) -> Run:
    return runner_for(app)


@pytest.fixture
def clock() -> None:
    """No frozen clock for the shared ``store``: the CLI under test reads the real one."""
    return None


def as_json(result: Result) -> Any:
    return json.loads(result.stdout)


# -- what beat would refuse is refused when it is added ---------------------------------------


def test_add_refuses_a_task_the_app_does_not_register_unless_forced(db_url: str) -> None:
    app = make_app(db_url, registered=True)

    @app.task(name="reports.send", shared=False)
    def send(report_id: int) -> None:
        """A registered task with one argument."""

    run = runner_for(app)
    run("migrate")
    err = run("add", "a", "--task", "reports.sned", "--timer", "daily", code=2).stderr
    assert "task 'reports.sned' is not registered in app" in err
    assert "or give --force" in err
    run("add", "a", "--task", "reports.sned", "--timer", "daily", "--force")
    # Arguments that do not fit the task's signature are refused (beat would put it in error).
    err = run("add", "b", "--task", "reports.send", "--timer", "daily", code=2).stderr
    assert "do not fit task 'reports.send'" in err
    run("add", "b", "--task", "reports.send", "--timer", "daily", "--args", "[7]")
    err = run("edit", "b", "--args", "[1, 2]", code=2).stderr
    assert "do not fit task 'reports.send'" in err


def test_add_refuses_a_one_off_instant_already_past_unless_forced(run: Run) -> None:
    run("migrate")
    err = run("add", "once", "--task", "t", "--timer", "2020-01-01T09:00:00Z", code=2).stderr
    assert "the one-off instant 2020-01-01T09:00:00Z is already past" in err
    run("add", "once", "--task", "t", "--timer", "2020-01-01T09:00:00Z", "--force")


def test_tasks_added_without_a_zone_use_the_app_s_timezone(db_url: str) -> None:
    """Regression: API and CLI tasks defaulted to UTC while beat_schedule entries used the
    app's timezone: the same ``0 9 * * *`` meant two different times."""
    app = make_app(db_url)
    app.conf.timezone = "Europe/Berlin"
    run = runner_for(app)
    run("migrate")
    run("add", "nine", "--task", "t", "--timer", "0 9 * * *")
    assert as_json(run("--json", "show", "nine"))["tz"] == "Europe/Berlin"
    app.conf.cronstore_default_tz = "America/New_York"
    run = runner_for(app)
    run("add", "nine-ny", "--task", "t", "--timer", "0 9 * * *")
    assert as_json(run("--json", "show", "nine-ny"))["tz"] == "America/New_York"


# -- definitions ----------------------------------------------------------------------------


def test_migrate_is_idempotent_and_list_starts_empty(run: Run) -> None:
    assert "schema at revision" in run("migrate").output
    assert as_json(run("--json", "migrate"))["revision"]
    assert run("list").output.strip() == "(no periodic tasks)"
    assert as_json(run("--json", "list")) == []


def test_add_then_list_and_show_every_option(run: Run) -> None:
    out = run(
        "add", "report", "--task", "reports.send", "--timer", "30 9 * * mon-fri",
        "--tz", "Europe/Berlin", "--args", "[1, \"a\"]", "--kwargs", '{"full": true}',
        "--queue", "reports", "--owner", "tenant:42", "--description", "daily report",
        "--misfire-policy", "skip", "--start-deadline", "60", "--overlap-policy", "skip",
    ).output  # fmt: skip
    assert out.startswith("added report: reports.send on 30 9 * * mon-fri (Europe/Berlin)")
    run("add", "tick", "--task", "t.tick", "--timer", "every 5m", "--disabled")

    table = run("list").output.splitlines()
    assert table[0].split() == [
        *("NAME", "TIMER", "NEXT", "RUN", "(UTC)", "LAST", "RUN", "(UTC)", "LAST", "STATE"),
        *("FAILURES", "LAST", "SUCCESS", "(UTC)", "LATE", "BY"),
    ]
    assert table[1].startswith("report")
    assert "30 9 * * mon-fri (Europe/Berlin)" in table[1]
    assert table[2].startswith("tick")
    assert "disabled" in table[2]

    rows = as_json(run("--json", "list"))
    assert [r["name"] for r in rows] == ["report", "tick"]
    report = rows[0]
    assert report["args"] == [1, "a"]
    assert report["kwargs"] == {"full": True}
    assert report["options"] == {"queue": "reports"}
    assert (report["owner_type"], report["owner_id"]) == ("tenant", "42")
    assert (report["misfire_policy"], report["overlap_policy"]) == ("skip", "skip")
    assert report["start_deadline"] == 60
    assert report["source"] == "cli"
    assert report["last_state"] is None
    assert report["next_run"].endswith("Z")

    shown = run("show", "report").output
    assert "description:     daily report" in shown
    assert "owner_id:        42" in shown
    detail = as_json(run("--json", "show", "report"))
    assert detail["timer_kind"] == "cron"
    assert detail["status"]["state"] is None


def test_list_filters(run: Run) -> None:
    run("add", "a", "--task", "t.one", "--timer", "every 1h", "--owner", "tenant:1")
    run("add", "b", "--task", "t.two", "--timer", "every 1h", "--owner", "tenant:2")
    run("add", "c", "--task", "t.one", "--timer", "every 1h", "--disabled")

    def names(*args: str) -> list[str]:
        return [r["name"] for r in as_json(run("--json", "list", *args))]

    assert names("--owner", "tenant:1") == ["a"]
    assert names("--enabled") == ["a", "b"]
    assert names("--disabled") == ["c"]
    assert names("--task", "t.one") == ["a", "c"]
    assert names("--task", "t.one", "--enabled") == ["a"]


def test_display_zone(run: Run, store: Store) -> None:
    run("add", "a", "--task", "t", "--timer", "*-*-* 12:00:00")
    planned = store.get("a").next_run
    assert planned is not None
    berlin = run("--tz", "Asia/Tokyo", "list").output
    assert planned.astimezone(timezone(timedelta(hours=9))).isoformat() in berlin
    run("--tz", "Mars/Olympus", "list", code=2)


def test_edit_enable_disable(run: Run, store: Store) -> None:
    run("add", "a", "--task", "t", "--timer", "every 5m", "--queue", "q1", "--args", "[1]")
    out = run("edit", "a", "--timer", "every 10m", "--queue", "q2", "--description", "x").output
    assert out.startswith("updated a: t on every 10m, next run ")
    got = store.get("a")
    assert (got.timer, got.options, got.args, got.description) == (
        "every 10m",
        {"queue": "q2"},
        [1],
        "x",
    )
    assert run("disable", "a").output.strip() == "disabled a: t on every 10m, disabled"
    assert store.get("a").next_run is None
    assert as_json(run("--json", "enable", "a"))["enabled"] is True
    assert store.get("a").next_run is not None
    assert as_json(run("--json", "edit", "a", "--disabled"))["enabled"] is False
    run("edit", "a", "--tz", "Europe/Paris", "--owner", "team:7")
    assert (store.get("a").tz, store.get("a").owner) == ("Europe/Paris", ("team", "7"))


def test_abandon_policy_option(run: Run, store: Store) -> None:
    run("add", "a", "--task", "t", "--timer", "every 5m", "--abandon-policy", "rerun")
    assert store.get("a").abandon_policy == "rerun"
    assert "abandon_policy:  rerun" in run("show", "a").output
    assert as_json(run("--json", "edit", "a", "--abandon-policy", "leave"))["abandon_policy"] == (
        "leave"
    )
    run("edit", "a", "--timer", "every 10m")  # not given: unchanged
    assert store.get("a").abandon_policy == "leave"
    refused = run("edit", "a", "--abandon-policy", "twice", code=2).output
    assert "abandon_policy must be one of ('leave', 'rerun'), got 'twice'" in refused
    run("add", "b", "--task", "t", "--timer", "every 5m")
    assert store.get("b").abandon_policy == "leave"


def test_remove_and_remove_owned_by(run: Run, store: Store) -> None:
    for name, owner in (("a", "tenant:1"), ("b", "tenant:1"), ("c", "tenant:2")):
        run("add", name, "--task", "t", "--timer", "every 1h", "--owner", owner)
    assert run("remove", "c").output.strip() == "removed c"
    out = run("remove-owned-by", "tenant", "1").output
    assert out.strip() == "removed 2 periodic task(s) owned by tenant:1"
    assert store.list() == []
    assert as_json(run("--json", "remove-owned-by", "tenant", "1"))["removed"] == 0
    run("remove", "a", code=1)


# -- time -----------------------------------------------------------------------------------


def test_next(run: Run, store: Store) -> None:
    run("add", "a", "--task", "t", "--timer", "*:0/15")
    lines = run("next", "a", "-n", "3").output.split()
    assert len(lines) == 3
    assert all(line.endswith(":00Z") for line in lines)
    got = as_json(run("--json", "next", "a", "-n", "4"))
    assert len(got["next"]) == 4
    assert got["next"][0] == lines[0]
    times = [datetime.fromisoformat(t.replace("Z", "+00:00")) for t in got["next"]]
    assert all(b - a == timedelta(minutes=15) for a, b in itertools.pairwise(times))
    run("disable", "a")
    assert "disabled" in run("next", "a").output
    run("next", "a", "-n", "0", code=2)


def test_validate_needs_no_database() -> None:
    run = runner_for(make_app(f"postgresql+psycopg://u:{PASSWORD}@127.0.0.1:1/none"))
    args = ("30 9 * * mon-fri", "--tz", "Europe/Berlin", "-n", "2", "--after", "2026-03-27T12:00Z")
    out = run("validate", *args).output
    assert "canonical:   30 9 * * mon-fri" in out
    assert "description: at 09:30 on Monday-Friday (Europe/Berlin)" in out
    assert "2026-03-30T07:30:00Z" in out
    assert "2026-03-31T07:30:00Z" in out
    got = as_json(run("--json", "validate", *args))
    assert got["kind"] == "cron"
    assert got["zone"] == "Europe/Berlin"
    assert got["next"] == ["2026-03-30T07:30:00Z", "2026-03-31T07:30:00Z"]
    assert got["description"] == "at 09:30 on Monday-Friday (Europe/Berlin)"
    assert len(as_json(run("--json", "validate", "every 5m"))["next"]) == 5

    bad = run("validate", "Mon *-*-* 25:00", code=2)
    assert "'25' at position 10" in bad.stderr
    assert "unknown time zone" in run("validate", "every 5m", "--tz", "Nowhere/X", code=2).stderr


# -- the ledger -----------------------------------------------------------------------------


def test_run_now_publishes_under_the_ledger_task_id(app: Celery, run: Run, store: Store) -> None:
    queue = f"cli-{uuid.uuid4().hex[:8]}"
    run("add", "a", "--task", "cli.unregistered", "--timer", "every 1h", "--args", "[7]",
        "--queue", queue)  # fmt: skip
    sent = as_json(run("--json", "run-now", "a"))
    fires = store.history("a")
    assert [(f.task_id, f.state, f.reason) for f in fires] == [
        (sent["task_id"], "published", "run-now requested")
    ]
    with app.connection_for_read() as conn:
        message = conn.SimpleQueue(queue).get(timeout=5)
        message.ack()
    assert message.headers["id"] == sent["task_id"]
    assert message.headers["task"] == "cli.unregistered"
    assert message.headers["cronstore_name"] == "a"
    assert json.loads(message.body)[0] == [7]

    out = run("run-now", "a").output
    assert out.startswith("sent a (cli.unregistered) as task id ")
    history = run("history", "a").output.splitlines()
    assert history[0].split()[:5] == ["FIRE", "TIME", "(UTC)", "STATE", "TASK"]
    assert len(history) == 3
    assert sent["task_id"] in history[2]
    assert len(as_json(run("--json", "history", "a", "-n", "1"))) == 1
    run("run-now", "missing", code=1)


def test_run_now_respects_the_allowlist(db_url: str) -> None:
    app = make_app(db_url)
    app.conf.cronstore_task_allowlist = ["safe."]
    run = runner_for(app)
    refused = run("add", "a", "--task", "danger.rm", "--timer", "every 1h", code=2).stderr
    assert "task 'danger.rm' is not in cronstore_task_allowlist, or give --force" in refused
    run("add", "a", "--task", "danger.rm", "--timer", "every 1h", "--force")
    assert "not in cronstore_task_allowlist" in run("run-now", "a", code=1).stderr


def test_run_now_refuses_a_disabled_task(run: Run, store: Store) -> None:
    """Issue 24: it said "sent" and the worker's guard then dropped the fire."""
    run("add", "a", "--task", "t.a", "--timer", "every 1h", "--disabled")
    refused = run("run-now", "a", code=1).stderr
    assert "periodic task 'a' is disabled: enable it first" in refused
    assert store.history("a") == []  # nothing claimed


def test_an_interval_shows_no_zone(run: Run) -> None:
    """Issue 24: an interval's zone has no effect on it, so list and show name none."""
    run("add", "tick", "--task", "t.tick", "--timer", "every 5m", "--tz", "Europe/Berlin")
    run("add", "noon", "--task", "t.noon", "--timer", "0 12 * * *", "--tz", "Europe/Berlin")
    rows = {line.split()[0]: line for line in run("list").output.splitlines()[1:]}
    assert "Europe/Berlin" not in rows["tick"]
    assert "0 12 * * * (Europe/Berlin)" in rows["noon"]
    assert "tz:              - (no effect on an interval)" in run("show", "tick").output
    assert "tz:              Europe/Berlin" in run("show", "noon").output


def test_edit_detects_a_new_expression_s_kind_and_honours_a_given_one(
    run: Run, store: Store
) -> None:
    run("add", "a", "--task", "t.a", "--timer", "*/5 * * * *")
    run("edit", "a", "--timer", "every 5m")
    assert store.get("a").timer_kind == "interval"
    refused = run("edit", "a", "--timer", "every 10m", "--kind", "cron", code=2).stderr
    assert "the timer kind is cron but the expression reads as interval" in refused
    assert store.get("a").timer == "every 5m"


def test_history_of_a_task_that_never_fired(run: Run) -> None:
    run("add", "a", "--task", "t", "--timer", "every 1h")
    assert run("history", "a").output.strip() == "(no fires of a yet)"
    assert as_json(run("--json", "history", "a")) == []


# -- health ---------------------------------------------------------------------------------


def test_health(run: Run, db_url: str) -> None:
    result = run("health", code=1)
    assert result.stderr.strip().startswith("Error: unhealthy: no beat has ever ticked")
    assert len(result.stderr.strip().splitlines()) == 1

    stale = Store(db_url, clock=FrozenClock(datetime.now(timezone.utc) - timedelta(hours=1)))
    try:
        Claimer(stale, "old-beat").heartbeat(stale.now())
    finally:
        stale.close()
    assert "newest beat tick was" in run("health", "--max-age", "60", code=1).stderr
    got = as_json(run("--json", "health", code=1))
    assert got["healthy"] is False
    assert got["beats"][0]["node"] == "old-beat"
    run("health", "--max-age", "86400")

    fresh = Store(db_url)
    try:
        Claimer(fresh, "new-beat").heartbeat(fresh.now())
    finally:
        fresh.close()
    assert run("health", "--max-age", "30").output.startswith("healthy: beat new-beat ticked")
    got = as_json(run("--json", "health"))
    assert got["healthy"] is True
    assert [b["node"] for b in got["beats"]] == ["new-beat", "old-beat"]

    # Per host: a pod's probe looks at the beats on its own host only.
    here = socket.gethostname()
    stale = Store(db_url, clock=FrozenClock(datetime.now(timezone.utc) - timedelta(hours=1)))
    try:
        Claimer(stale, f"{here}:1:abc").heartbeat(stale.now())
    finally:
        stale.close()
    elsewhere = run("health", "--host", "elsewhere", code=1).stderr
    assert "no beat on host elsewhere has ever" in elsewhere
    assert "newest beat tick was" in run("health", "--this-host", code=1).stderr
    assert run("health", "--host", "new-beat", code=1).exit_code == 1  # "new-beat" has no host:
    assert run("health", "--host", "x", "--this-host", code=2).stderr.startswith("Error: give")


# -- bad input ------------------------------------------------------------------------------


def test_bad_input_exits_non_zero_with_the_message(run: Run) -> None:
    def error(*args: str, code: int) -> str:
        return run(*args, code=code).stderr

    add = ("add", "a", "--task", "t")
    assert "'25' at position 10" in error(*add, "--timer", "Mon *-*-* 25:00", code=2)
    assert "not valid JSON" in error(*add, "--timer", "every 1h", "--args", "[1,", code=2)
    assert "must be a JSON array" in error(*add, "--timer", "every 1h", "--args", "{}", code=2)
    assert "must be a JSON object" in error(*add, "--timer", "every 1h", "--kwargs", "[]", code=2)
    assert "TYPE:ID" in error(*add, "--timer", "every 1h", "--owner", "nocolon", code=2)
    blank = error("add", "a", "--task", " ", "--timer", "every 1h", code=2)
    assert "task must be a non-empty string" in blank
    run(*add, "--timer", "every 1h")
    assert "already exists" in error(*add, "--timer", "every 1h", code=1)
    assert "no periodic task named 'nope'" in error("show", "nope", code=1)
    assert "no periodic task named 'nope'" in error("edit", "nope", "--disabled", code=1)
    assert "nothing to change" in error("edit", "a", code=2)
    assert "position" in error("edit", "a", "--timer", "*/70 * * * *", code=2)
    assert "Missing option '--timer'" in error("add", "b", "--task", "t", code=2)


def test_missing_schema_names_the_fix(tmp_path: Path) -> None:
    """Regression: ``list`` on an unmigrated SQLite store created an empty database file
    while it failed, and the message said ``celery -A <app>``."""
    app = make_app(f"sqlite:///{tmp_path / 'fresh.sqlite'}")
    run = runner_for(app)
    message = run("list", code=1).stderr
    assert "fresh.sqlite does not exist" in message
    # Run without -A (the test's CLIContext): a placeholder, never the app's own name.
    assert "run `celery -A <your -A module> cronstore migrate`" in message
    assert app.main not in message
    assert not (tmp_path / "fresh.sqlite").exists()
    run("migrate")
    run("list")
    (tmp_path / "empty.sqlite").touch()  # a file without our tables
    message = runner_for(make_app(f"sqlite:///{tmp_path / 'empty.sqlite'}"))("list", code=1).stderr
    assert "cronstore tables do not exist yet" in message


# -- passwords ------------------------------------------------------------------------------


def test_no_password_in_errors_when_the_database_is_down() -> None:
    run = runner_for(make_app(f"postgresql+psycopg://cron:{PASSWORD}@127.0.0.1:1/cron"))
    for args in (("list",), ("health",), ("migrate",), ("show", "a"), ("disable", "a")):
        result = run(*args, code=1)
        assert result.stderr.startswith(
            "Error: the cronstore database postgresql+psycopg://cron:***@127.0.0.1:1/cron "
            "is unreachable or refused the connection: "
        ), result.stderr
        assert "Connection refused" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, "one clean line"
        assert PASSWORD not in result.output


@pytest.fixture
def url_with_password(db_url: str) -> Iterator[str]:
    """``db_url`` with a password the server checks (PostgreSQL here trusts loopback)."""
    url = sa.engine.make_url(db_url)
    if url.get_backend_name() == "sqlite":  # no password in the URL: the broker's has one
        yield db_url
        return
    if url.get_backend_name() == "postgresql":
        yield url.set(password=PASSWORD).render_as_string(hide_password=False)
        return
    user = f"cli_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(db_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for host in ("%", "localhost", "127.0.0.1"):
            conn.exec_driver_sql("CREATE USER %s@%s IDENTIFIED BY %s", (user, host, PASSWORD))
            conn.exec_driver_sql(f"GRANT ALL ON {url.database}.* TO %s@%s", (user, host))
    try:
        yield url.set(username=user, password=PASSWORD).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            for host in ("%", "localhost", "127.0.0.1"):
                conn.exec_driver_sql("DROP USER IF EXISTS %s@%s", (user, host))
        admin.dispose()


def test_no_password_in_output_when_the_url_has_one(url_with_password: str) -> None:
    app = make_app(url_with_password)
    app.conf.broker_url = f"memory://cli:{PASSWORD}@localhost//"
    run = runner_for(app)
    outputs = [
        run("migrate").output,
        run("--json", "migrate").output,
        run("add", "a", "--task", "t", "--timer", "every 1h").output,
        run("list").output,
        run("--json", "list").output,
        run("show", "a").output,
        run("health", code=1).output,
        run("show", "nope", code=1).output,
        run("run-now", "a").output,
    ]
    if not url_with_password.startswith("sqlite"):
        assert "***" in outputs[0]  # the store URL is shown, its password masked
    for out in outputs:
        assert PASSWORD not in out

    wrong = sa.engine.make_url(url_with_password).set(password=PASSWORD + "-wrong")
    if wrong.get_backend_name() == "mysql":  # PostgreSQL here trusts loopback; SQLite has none
        run = runner_for(make_app(wrong.render_as_string(hide_password=False)))
        result = run("list", code=1)
        assert 'refused the connection: (1045, "Access denied' in result.stderr
        assert PASSWORD not in result.output


# -- the real executable --------------------------------------------------------------------


@pytest.fixture
def app_module(tmp_path: Path, db_url: str) -> dict[str, str]:
    """A module ``cli_app`` defining ``app`` on the test database; the env to import it."""
    (tmp_path / "cli_app.py").write_text(
        "import os\n"
        "from celery import Celery\n"
        "app = Celery('cli_app', broker='memory://')\n"
        "app.conf.cronstore_url = os.environ['CLI_STORE']\n"
    )
    path = os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "CLI_STORE": db_url}


def _celery(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from celery.__main__ import main; sys.exit(main())",
         *args],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_python_m_runs_the_group_without_the_entry_point(
    app_module: dict[str, str], store: Store
) -> None:
    store.add("a", task="t.a", timer="every 1h")
    proc = subprocess.run(
        [sys.executable, "-m", "celery_cronstore.cli", "-A", "cli_app", "cronstore", "list"],
        env=app_module, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].startswith("a ")


def test_celery_cronstore_list_in_a_subprocess(app_module: dict[str, str], store: Store) -> None:
    probe = _celery("cronstore", "--help", env=app_module)
    assert probe.returncode == 0, (
        "`celery cronstore` is not registered: is the package installed with its "
        f"celery.commands entry point?\n{probe.stderr}"
    )
    store.add("a", task="t.a", timer="every 1h")
    proc = _celery("-A", "cli_app", "cronstore", "--json", "list", env=app_module)
    assert proc.returncode == 0, proc.stderr
    assert [r["name"] for r in json.loads(proc.stdout)] == ["a"]
    bad = _celery("-A", "cli_app", "cronstore", "validate", "Mon 25:00", env=app_module)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
