"""``cronstore pause`` and ``resume`` (issue 25) on every backend: the note, the end (with
an offset, or read in the task's zone) and the resume choice reach the store and the
audit trail, ``list`` and ``show`` say paused, and every refusal is one line with exit
status 2 and nothing written."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from celery import Celery

from celery_cronstore.store import Store

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import Run, make_app, runner_for


@pytest.fixture
def clock() -> None:
    """The CLI reads the database's clock."""
    return None


@pytest.fixture
def app(db_url: str) -> Celery:
    return make_app(db_url)


@pytest.fixture
def run(app: Celery) -> Run:
    return runner_for(app)


def test_pause_with_a_note_and_an_end_then_resume(run: Run, app: Celery) -> None:
    store = Store.from_app(app)
    store.add("nightly", task="t", timer="every 1h", tz="Europe/Berlin")
    end = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=2)
    local = end.astimezone(ZoneInfo("Europe/Berlin"))
    out = run(
        "pause",
        "nightly",
        "--note",
        "db migration",
        "--until",
        local.replace(tzinfo=None).isoformat(),  # no offset: read in Europe/Berlin (CET)
        "--resume",
        "newest",
    ).output
    assert "paused nightly: paused by" in out
    assert "(then newest): db migration" in out
    task = store.get("nightly")
    assert (task.paused_note, task.paused_resume, task.paused_until) == (
        "db migration",
        "newest",
        end,
    )
    listed = run("list").output
    assert "paused to" in listed
    shown = json.loads(run("--json", "show", "nightly").output)
    assert shown["paused_note"] == "db migration"
    assert [e.action for e in store.audit_trail(task="nightly")][:1] == ["pause"]

    resumed = run("resume", "nightly", "--skip").output
    assert "resumed nightly: next run" in resumed
    assert store.get("nightly").paused_at is None
    run("resume", "nightly", code=1)  # not paused: the operation fails, one line
    store.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--until", "2001-01-01T00:00:00Z"], "is not in the future"),
        (["--until", "someday"], "--until 'someday' is not an instant"),
        (["--resume", "later"], "Invalid value for '--resume'"),
        (["--note", "x" * 1001], "note is longer than 1000 characters"),
    ],
)
def test_bad_pauses_are_refused_in_one_line(
    run: Run, app: Celery, args: list[str], message: str
) -> None:
    store = Store.from_app(app)
    store.add("p", task="t", timer="every 1h")
    before = store.get("p")
    result = run("pause", "p", *args, code=2)
    assert message in " ".join(result.output.split())
    assert store.get("p") == before
    store.close()
