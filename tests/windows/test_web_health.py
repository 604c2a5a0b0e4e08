"""Per-task health on the dashboard: the task list's columns and "failing" filter, and the
per-task series of ``/metrics`` with their cap (the rest summed under ``task=""``)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from html import unescape

import pytest
import sqlalchemy as sa
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families
from timeline import T0
from werkzeug.test import Client

from celery_cronstore.store import Store
from celery_cronstore.store.schema import fire
from celery_cronstore.testing import FrozenClock
from celery_cronstore.web import create_app

TOKEN = "tok-" + "h" * 20
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def make_celery(url: str, **conf: object) -> Celery:
    app = Celery(f"web-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = url
    app.conf.cronstore_require_registered = False
    app.conf.update(conf)
    return app


def write(store: Store, name: str, states: list[str], late: float = 2.0) -> None:
    """Fires of ``name`` one a minute ending at T0, oldest first."""
    task_id = store.get(name).id
    rows = []
    for i, state in enumerate(states):
        when = T0 - timedelta(minutes=len(states) - 1 - i)
        sent = state != "missed"
        rows.append(
            {
                "periodic_task_id": task_id,
                "fire_time": when,
                "task_id": f"{name}-{i}",
                "state": state,
                "published_at": when + timedelta(seconds=late) if sent else None,
                "finished_at": when + timedelta(seconds=late + 1) if sent else None,
            }
        )
    with store.begin() as conn:
        conn.execute(sa.insert(fire), rows)


@pytest.fixture
def tasks(store: Store, clock: FrozenClock) -> Store:
    clock.set(T0 - timedelta(hours=1))
    for name in ("alpha", "beta", "gamma"):
        store.add(name, task="app.t", timer="every 1h")
    write(store, "alpha", ["succeeded", "failed", "failed"])
    write(store, "beta", ["failed", "succeeded"], late=0.2)
    write(store, "gamma", ["succeeded", "missed", "timed_out"])
    clock.set(T0 + timedelta(seconds=30))
    return store


def page(client: Client, query: str = "", status: int = 200) -> str:
    response = client.get(f"/{query}", headers=BEARER)
    assert response.status_code == status, response.get_data(as_text=True)
    return unescape(response.get_data(as_text=True))


def row_of(html: str, name: str) -> str:
    start = html.index(f">{name}</a>")
    return html[start : html.index("</tr>", start)]


def test_list_shows_health_columns(tasks: Store, db_url: str) -> None:
    client = Client(create_app(tasks, token=TOKEN, celery_app=make_celery(db_url)))
    html = page(client)
    assert "Failures in a row" in html
    assert "Last success" in html
    assert "Late by" in html
    alpha = row_of(html, "alpha")
    assert 'class="failures failing">2<' in alpha
    assert "2.0 s" in alpha  # the newest fire's publish minus its time
    assert "11:58" in alpha  # its last success finished at 11:58:03 UTC
    beta = row_of(html, "beta")
    assert 'class="failures">0<' in beta
    assert "200 ms" in beta


def test_failing_filter_and_its_refusal(tasks: Store, db_url: str) -> None:
    client = Client(create_app(tasks, token=TOKEN, celery_app=make_celery(db_url)))
    failing = page(client, "?failing=yes")
    assert ">alpha</a>" in failing
    assert ">gamma</a>" in failing
    assert ">beta</a>" not in failing
    assert '<option value="yes" selected>' in failing
    others = page(client, "?failing=no")
    assert ">beta</a>" in others
    assert ">alpha</a>" not in others
    refused = page(client, "?failing=maybe", status=400)
    assert "failing must be yes, no or empty (any task), got 'maybe'" in refused


def scrape(client: Client) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    response = client.get("/metrics", headers=BEARER)
    assert response.status_code == 200
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            found.setdefault(sample.name, {})[labels] = sample.value
    return found


def test_metrics_per_task_series(tasks: Store, db_url: str) -> None:
    client = Client(create_app(tasks, token=TOKEN, celery_app=make_celery(db_url)))
    got = scrape(client)
    failures = got["cronstore_task_consecutive_failures"]
    assert failures == {(("task", "alpha"),): 2, (("task", "beta"),): 0, (("task", "gamma"),): 2}
    success = got["cronstore_task_last_success_timestamp_seconds"]
    finished = (T0 - timedelta(minutes=2) + timedelta(seconds=3)).timestamp()
    assert success[(("task", "alpha"),)] == finished
    fires = got["cronstore_task_fires"]
    assert fires[(("state", "missed"), ("task", "gamma"))] == 1
    assert fires[(("state", "failed"), ("task", "alpha"))] == 2
    assert got["cronstore_task_late_seconds"][(("task", "alpha"),)] == pytest.approx(2.0)
    # Seven fires were sent in the last hour: 2 at 0.2 s, 5 at 2 s.
    buckets = got["cronstore_fire_lateness_seconds_bucket"]
    assert buckets[(("le", "0.25"),)] == 2
    assert buckets[(("le", "2.5"),)] == 7
    assert got["cronstore_fire_lateness_seconds_gcount"][()] == 7
    assert got["cronstore_task_series_folded"][()] == 0


def test_metrics_cap_sums_the_rest(tasks: Store, db_url: str) -> None:
    app = make_celery(db_url, cronstore_metrics_max_tasks=1)
    got = scrape(Client(create_app(tasks, token=TOKEN, celery_app=app)))
    failures = got["cronstore_task_consecutive_failures"]
    # Failing tasks first, then names: alpha (2) before gamma (2); beta and gamma folded.
    assert failures == {(("task", "alpha"),): 2, (("task", ""),): 2}
    assert got["cronstore_task_series_folded"][()] == 2
    fires = got["cronstore_task_fires"]
    assert {k for k in fires if ("task", "gamma") in k or ("task", "beta") in k} == set()
    assert fires[(("state", "succeeded"), ("task", ""))] == 2  # beta's and gamma's
    assert fires[(("state", "failed"), ("task", ""))] == 1
    success = got["cronstore_task_last_success_timestamp_seconds"]
    oldest = (T0 - timedelta(minutes=2) + timedelta(seconds=3)).timestamp()  # gamma's
    assert success[(("task", ""),)] == oldest
    assert len(failures) == 2  # however many tasks there are


def test_metrics_max_tasks_is_refused_at_start(store: Store, db_url: str) -> None:
    app = make_celery(db_url, cronstore_metrics_max_tasks=0)
    with pytest.raises(ValueError, match="cronstore_metrics_max_tasks must be a positive integer"):
        create_app(store, token=TOKEN, celery_app=app)
