"""The kill switch (issue 25) in the windows: ``cronstore health`` and the dashboard say
that firing is off, and run-now is refused where it is off, from the CLI and the
dashboard alike. On every backend; the beat rows are written as beat writes them
(``BeatHeartbeat``), the beat process itself is in ``tests/e2e/test_fire_switch.py``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from celery import Celery
from werkzeug.test import Client

from celery_cronstore.store import Store
from celery_cronstore.store.heartbeat import BeatHeartbeat
from celery_cronstore.web import create_app

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import Run, make_app, runner_for
from test_web import BEARER, TOKEN, login


@pytest.fixture
def clock() -> None:
    """The CLI and the beat rows read the database's clock."""
    return None


@pytest.fixture
def app(db_url: str) -> Celery:
    return make_app(db_url)


@pytest.fixture
def run(app: Celery) -> Run:
    return runner_for(app)


def beat_row(store: Store, node: str, *, firing: bool) -> None:
    """Write the heartbeat of beat ``node`` as beat does."""
    BeatHeartbeat(store.db, node).heartbeat(store.now(), firing=firing)


def test_health_says_firing_is_off_and_require_firing_fails_it(run: Run, store: Store) -> None:
    run("add", "job", "--task", "app.job", "--timer", "every 1s")
    beat_row(store, "stage:1:a", firing=False)
    text = run("health", "--max-late", "3600").output
    assert text.startswith("healthy: firing is off: beat stage:1:a"), text
    assert "CRONSTORE_FIRE=0" in text
    refused = run("health", "--max-late", "3600", "--require-firing", code=1).stderr
    assert "unhealthy: firing is off: beat stage:1:a" in refused, refused
    beat_row(store, "prod:1:b", firing=True)
    text = run("health", "--max-late", "3600", "--require-firing").output
    assert text.startswith("healthy: beat prod:1:b"), text
    assert "1 more alive beat(s) with firing off" in text


def test_health_json_carries_each_beats_firing(run: Run, store: Store) -> None:
    beat_row(store, "stage:1:a", firing=False)
    found = json.loads(run("--json", "health").stdout)
    assert found["healthy"] is True
    assert [(b["node"], b["firing"]) for b in found["beats"]] == [("stage:1:a", False)]


def test_run_now_is_refused_where_firing_is_off(
    run: Run, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    run("add", "job", "--task", "app.job", "--timer", "every 1h")
    monkeypatch.setenv("CRONSTORE_FIRE", "0")
    refused = run("run-now", "job", code=1).stderr
    assert "firing is off here (CRONSTORE_FIRE=0" in refused
    assert store.history("job") == []
    monkeypatch.setenv("CRONSTORE_FIRE", "1")
    assert run("run-now", "job").output.startswith("sent job (app.job)")


def test_a_bad_cronstore_fire_is_one_line_in_the_cli(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONSTORE_FIRE", "sometimes")
    refused = run("run-now", "job", code=2).stderr
    assert "CRONSTORE_FIRE must be 0" in refused
    assert "got 'sometimes'" in refused


def test_the_dashboard_says_firing_is_off_on_every_page(
    store: Store, app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add("job", task="app.job", timer="every 1h")
    client = Client(create_app(store, token=TOKEN, celery_app=app))
    page = client.get("/", headers=BEARER).get_data(as_text=True)
    assert 'id="firing-off"' not in page
    beat_row(store, "stage:1:a", firing=False)
    create = Client(create_app(store, token=TOKEN, celery_app=app))
    for path in ("/", "/problems", "/task?name=job"):
        page = create.get(path, headers=BEARER).get_data(as_text=True)
        banner = re.search(r'<strong class="bad" id="firing-off">(.*?)</strong>', page, re.S)
        assert banner is not None, path
        assert "Firing is off" in banner.group(1)
        assert "CRONSTORE_FIRE=0" in banner.group(1)
    beat_row(store, "prod:1:b", firing=True)
    fresh = Client(create_app(store, token=TOKEN, celery_app=app))
    page = fresh.get("/", headers=BEARER).get_data(as_text=True)
    assert "1 running beat with firing off (CRONSTORE_FIRE=0)" in page

    monkeypatch.setenv("CRONSTORE_FIRE", "0")
    csrf = login(fresh)
    refused = fresh.post("/task/action", data={"name": "job", "action": "run", "csrf": csrf})
    assert refused.status_code == 409
    assert "firing is off here (CRONSTORE_FIRE=0" in refused.get_data(as_text=True)
    assert store.history("job") == []
