"""``celery -A app cronstore audit`` and the ``cli`` window of the audit trail, on every
backend: each command that writes is recorded as the OS user's, and ``audit`` shows the
trail (table or JSON, one task's, a limit), refusing a bad limit as bad input."""

from __future__ import annotations

import getpass
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner, Result

from celery_cronstore.cli import cronstore
from celery_cronstore.store import Store


@pytest.fixture
def clock() -> None:
    """The CLI reads the database's clock."""
    return None


@pytest.fixture
def run(db_url: str) -> Any:
    app = Celery(f"audit-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = db_url
    app.conf.cronstore_require_registered = False

    def invoke(*args: str, code: int = 0) -> Result:
        obj = CLIContext(app=app, no_color=True, workdir=None)
        result = CliRunner().invoke(cronstore, list(args), obj=obj)
        assert "Traceback" not in result.output
        assert result.exit_code == code, f"{args}: exit {result.exit_code}\n{result.output}"
        return result

    return invoke


def test_cli_writes_are_recorded_as_the_os_user(run: Any, store: Store) -> None:
    me = getpass.getuser()
    run("add", "a", "--task", "app.a", "--timer", "every 1h")
    run("edit", "a", "--timer", "every 2h")
    run("disable", "a")
    run("enable", "a")
    run("add", "b", "--task", "app.b", "--timer", "*/5 * * * *", "--owner", "tenant:9")
    run("remove-owned-by", "tenant", "9")
    run("remove", "a")
    run("edit", "nope", "--disabled", code=1)  # refused: recorded nowhere
    trail = [(e.actor, e.window, e.action, e.task_name) for e in reversed(store.audit_trail())]
    assert trail == [
        (me, "cli", "add", "a"),
        (me, "cli", "update", "a"),
        (me, "cli", "disable", "a"),
        (me, "cli", "enable", "a"),
        (me, "cli", "add", "b"),
        (me, "cli", "remove", "b"),
        (me, "cli", "remove", "a"),
    ]


def test_the_audit_command_shows_the_trail(run: Any, store: Store) -> None:
    assert "no audit entries" in run("audit").stdout
    store.acting("ann", "web").add("a", task="app.a", timer="every 1h")
    store.acting("bob", "admin").update("a", timer="every 2h")
    store.add("b", task="app.b", timer="every 1h")
    table = run("audit").stdout.splitlines()
    assert table[0].split() == ["AT", "ACTOR", "WINDOW", "ACTION", "TASK", "DETAIL"]
    assert [line.split()[1:5] for line in table[1:]] == [
        ["api", "api", "add", "b"],
        ["bob", "admin", "update", "a"],
        ["ann", "web", "add", "a"],
    ]
    assert "timer: every 1h -> every 2h" in table[2]
    one = json.loads(run("audit", "--task", "a", "--limit", "1", "--json").stdout)
    assert len(one) == 1
    assert {k: one[0][k] for k in ("actor", "window", "action", "task_name")} == {
        "actor": "bob",
        "window": "admin",
        "action": "update",
        "task_name": "a",
    }
    assert one[0]["at"].endswith("Z")
    assert json.loads(run("--json", "audit", "--task", "zz").stdout) == []
    bad = run("audit", "--limit", "0", code=2)
    assert "--limit" in bad.stderr
    assert "0" in bad.stderr


def test_apply_is_recorded_in_its_window(run: Any, store: Store, tmp_path: Path) -> None:
    me = getpass.getuser()
    plan = {"cronstore": 1, "tasks": [{"name": "f", "task": "app.f", "timer": "every 1h"}]}
    (tmp_path / "tasks.json").write_text(json.dumps(plan))
    run("apply", str(tmp_path / "tasks.json"))
    added = store.audit_trail(limit=1)[0]
    assert (added.actor, added.window, added.action, added.task_name) == (me, "apply", "add", "f")
