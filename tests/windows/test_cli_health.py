"""Per-task health in ``cronstore list`` and ``show`` (text and ``--json``) and the
``list --failing`` filter, on every backend."""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from celery import Celery

from celery_cronstore.store import Store
from celery_cronstore.store.schema import fire

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import Run, make_app, runner_for


@pytest.fixture
def app(db_url: str) -> Celery:
    return make_app(db_url)


@pytest.fixture
def run(app: Celery) -> Run:
    return runner_for(app)


@pytest.fixture
def clock() -> None:
    """The CLI reads the real clock."""
    return None


def write(store: Store, name: str, states: list[str]) -> None:
    """Fires of ``name`` one a minute up to a minute ago, oldest first, each sent 2 s late."""
    task_id = store.get(name).id
    end = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=1)
    rows = []
    for i, state in enumerate(states):
        when = end - timedelta(minutes=len(states) - 1 - i)
        rows.append(
            {
                "periodic_task_id": task_id,
                "fire_time": when,
                "task_id": f"{name}-{i}",
                "state": state,
                "published_at": when + timedelta(seconds=2),
                "finished_at": when + timedelta(seconds=4),
            }
        )
    with store.begin() as conn:
        conn.execute(sa.insert(fire), rows)


@pytest.fixture
def two(run: Run, store: Store) -> Store:
    run("add", "broken", "--task", "app.t", "--timer", "every 1h")
    run("add", "fine", "--task", "app.t", "--timer", "every 1h")
    write(store, "broken", ["succeeded", "failed", "failed", "timed_out"])
    write(store, "fine", ["failed", "succeeded"])
    return store


def test_list_shows_failures_last_success_and_lateness(run: Run, two: Store) -> None:
    text = run("list").output
    header, *lines = text.splitlines()
    assert "FAILURES" in header
    assert "LAST SUCCESS" in header
    assert "LATE BY" in header
    broken = next(line for line in lines if line.startswith("broken"))
    fine = next(line for line in lines if line.startswith("fine"))
    assert " 3 " in broken
    assert "2.0s" in broken
    assert "timed_out" in broken
    assert " 0 " in fine


def test_list_json_carries_health(run: Run, two: Store) -> None:
    rows = {r["name"]: r for r in json.loads(run("--json", "list").stdout)}
    broken, fine = rows["broken"], rows["fine"]
    assert broken["consecutive_failures"] == 3
    assert broken["failing"] is True
    assert broken["failures_at_least"] is False
    assert broken["late_by"] == 2.0
    assert broken["last_state"] == "timed_out"
    success = datetime.fromisoformat(broken["last_success"])
    assert success == two.history("broken", limit=4)[-1].finished_at
    assert fine["consecutive_failures"] == 0
    assert fine["failing"] is False


def test_list_failing_filter(run: Run, two: Store) -> None:
    names = [r["name"] for r in json.loads(run("--json", "list", "--failing").stdout)]
    assert names == ["broken"]
    names = [r["name"] for r in json.loads(run("--json", "list", "--not-failing").stdout)]
    assert names == ["fine"]
    assert "broken" in run("list", "--failing").output
    # A value after the flag is not a filter value: refused by name, never a traceback.
    refused = run("list", "--failing", "maybe", code=2)
    assert "maybe" in refused.output


def test_show_health(run: Run, two: Store) -> None:
    text = run("show", "broken").output
    assert "failures in row: 3" in text
    assert re.search(r"^late by:\s+2\.0s$", text, re.M)
    assert re.search(r"^last success:\s+\d{4}-", text, re.M)
    shown = json.loads(run("--json", "show", "broken").stdout)
    assert shown["health"]["consecutive_failures"] == 3
    assert shown["health"]["failing"] is True


def test_show_a_task_that_never_ran(run: Run, store: Store) -> None:
    run("add", "new", "--task", "app.t", "--timer", "every 1h")
    text = run("show", "new").output
    assert re.search(r"^last success:\s+-$", text, re.M)
    assert re.search(r"^failures in row: 0$", text, re.M)
    assert re.search(r"^late by:\s+-$", text, re.M)
