"""The failures view, the summary line and live pages, through the dashboard's WSGI app.

Werkzeug's test client on the real app, over every backend (``db_url``), on the frozen
clock of conftest (the store's now is :data:`timeline.T0`). The browser half (a page
updating without a reload) is in ``test_web_browser.py``.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from html import unescape
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery
from hostile import HTML_HOSTILE
from timeline import T0
from werkzeug.test import Client, TestResponse

from celery_cronstore.store import Store
from celery_cronstore.store.failures import MAX_FAILURE_LIMIT, Summary
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.web import create_app

TOKEN = "tok-" + "f" * 20
BEARER = {"Authorization": f"Bearer {TOKEN}"}
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/sync.py", line 42, in run\n'
    "    response.raise_for_status()\n"
    "RuntimeError: upstream returned 503\n"
)
REASON = "RuntimeError: upstream returned 503"
#: How the page writes a count: "failed", the multiplication sign, "11".
X = "\N{MULTIPLICATION SIGN}"


def html(response: TestResponse) -> str:
    return response.get_data(as_text=True)


@pytest.fixture
def celery_app(db_url: str) -> Celery:
    app = Celery(f"failures-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = db_url
    app.conf.cronstore_require_registered = False  # its tasks live in other services
    return app


@pytest.fixture
def client(store: Store, celery_app: Celery) -> Client:
    return Client(create_app(store, token=TOKEN, celery_app=celery_app))


def _fires(store: Store, name: str, *rows: dict[str, Any]) -> None:
    """Write ledger rows for task ``name`` (``ago``: minutes before T0)."""
    task_id = store.get(name).id
    with store.begin() as conn:
        for row in rows:
            values = dict(row)
            values["fire_time"] = T0 - timedelta(minutes=values.pop("ago"))
            if "until" in values:
                values["fire_until"] = T0 - timedelta(minutes=values.pop("until"))
            values.setdefault("task_id", f"{name}-{values['fire_time']:%Y%m%d%H%M%S}")
            conn.execute(sa.insert(fire).values(periodic_task_id=task_id, **values))


def _seed(store: Store) -> None:
    """A task failing in a loop, one ending badly in other ways, one old and one future."""
    for name in ("loop", "quiet", "old", "ahead", "fine"):
        store.add(name, task=f"app.{name}", timer="every 5m")
    _fires(
        store,
        "loop",
        dict(ago=120, state="succeeded"),
        dict(ago=70, until=60, fire_count=3, state="missed", reason="beat was down"),
        *(
            dict(ago=5 * k, state="failed", reason=REASON, detail=TRACEBACK if k == 1 else None)
            for k in range(1, 12)
        ),
    )
    _fires(
        store,
        "quiet",
        dict(ago=300, state="lost", reason="never started"),
        dict(ago=240, state="abandoned", reason="worker went silent"),
        dict(ago=180, state="timed_out", reason="time box of 150s exceeded", detail="deep\n"),
    )
    _fires(store, "old", dict(ago=30 * 60, state="failed", reason="long ago"))
    _fires(store, "ahead", dict(ago=-60, state="failed", reason="not yet"))
    _fires(store, "fine", dict(ago=5, state="succeeded"), dict(ago=3, state="skipped"))


def _failures_section(page: str) -> str:
    return page.split('<h2 id="failures">')[1].split("<h2>")[0]


def test_store_groups_bad_ends_by_task(store: Store) -> None:
    _seed(store)
    found = store.failures()
    assert (found.since, found.until, found.more) == (T0 - timedelta(hours=24), T0, False)
    loop, quiet = found.tasks
    assert (loop.name, quiet.name) == ("loop", "quiet")  # the newest failure first
    assert loop.counts == {"failed": 11, "missed": 3}  # a missed row stands for 3 fires
    assert loop.total == 14
    assert (loop.first, loop.last) == (T0 - timedelta(minutes=70), T0 - timedelta(minutes=5))
    assert (loop.state, loop.reason, loop.detail) == ("failed", REASON, TRACEBACK)
    assert loop.detail_at == loop.last
    assert quiet.counts == {"timed_out": 1, "abandoned": 1, "lost": 1}
    assert (quiet.state, quiet.detail) == ("timed_out", "deep\n")
    assert quiet.first == T0 - timedelta(minutes=300)

    week = store.failures(window=timedelta(days=7))
    assert [t.name for t in week.tasks] == ["loop", "quiet", "old"]
    (only,) = store.failures(limit=1).tasks
    assert only.name == "loop"
    assert store.failures(limit=1).more
    for limit in (0, MAX_FAILURE_LIMIT + 1):
        with pytest.raises(ValueError, match="limit must be"):
            store.failures(limit=limit)


def test_a_newer_failure_without_a_traceback_keeps_the_newest_traceback(store: Store) -> None:
    store.add("mixed", task="app.mixed", timer="every 5m")
    _fires(
        store,
        "mixed",
        dict(ago=20, state="failed", reason=REASON, detail=TRACEBACK),
        dict(ago=10, state="expired", reason="past its starting deadline"),
    )
    (mixed,) = store.failures().tasks
    assert (mixed.state, mixed.reason) == ("expired", "past its starting deadline")
    assert (mixed.detail, mixed.detail_at) == (TRACEBACK, T0 - timedelta(minutes=20))


def test_problems_page_shows_failures_grouped_with_counts_and_traceback(
    store: Store, client: Client
) -> None:
    _seed(store)
    page = html(client.get("/problems", headers=BEARER))
    section = _failures_section(page)
    rows = section.split('<tbody class="failure">')[1:]
    assert len(rows) == 2
    loop, quiet = rows
    assert ">loop</a>" in loop
    assert '<td class="count">14</td>' in loop
    assert f"failed {X}11" in loop
    assert f"missed {X}3" in loop
    assert REASON in loop
    details = re.search(r'<details id="traceback-\d+">(.*?)</details>', loop, re.S)
    assert details is not None
    assert unescape(details.group(1)).count("RuntimeError: upstream returned 503") == 1
    assert 'File "/srv/app/sync.py", line 42' in unescape(details.group(1))
    assert "2026-01-05" in loop  # first and last occurrence
    assert "5 min ago" in loop
    for text in (">quiet</a>", f"timed_out {X}1", f"abandoned {X}1", f"lost {X}1"):
        assert text in quiet
    for absent in ("old", "ahead", "fine"):
        assert f">{absent}</a>" not in section
    # The existing sections stay.
    for heading in ("Beats", "Tasks in error", "Fires missed, expired or dropped"):
        assert f"<h2>{heading}" in page


@pytest.mark.parametrize(
    ("window", "shown", "counts"),
    [
        ("1h", ["loop"], f"failed {X}11"),
        ("24h", ["loop", "quiet"], f"missed {X}3"),
        ("7d", ["loop", "quiet", "old"], f"missed {X}3"),
        ("", ["loop", "quiet"], f"missed {X}3"),  # the default: 24 h
    ],
)
def test_the_window_is_chosen_on_the_page(
    store: Store, client: Client, window: str, shown: list[str], counts: str
) -> None:
    _seed(store)
    page = html(client.get(f"/problems?window={window}", headers=BEARER))
    section = _failures_section(page)
    names = re.findall(r'<tbody class="failure">\s*<tr>\s*<td><a [^>]*>([^<]+)</a>', section)
    assert names == shown
    assert counts in section
    current = re.search(r'<a href="[^"]*window=(\w+)" class="current" aria-current="page">', page)
    assert current is not None
    assert current.group(1) == (window or "24h")
    if window == "1h":
        assert f"missed {X}3" not in section  # 60 to 70 minutes ago
        assert "beat was down" not in page  # the not-run list follows the window too


@pytest.mark.parametrize(
    "value", ["3w", "24", "1d", "24h;x", "7d7d", "-1h", "\x00", "é", "<b>1h</b>", "9" * 5000]
)
def test_a_bad_window_value_is_refused_with_the_choices(client: Client, value: str) -> None:
    response = client.get("/problems", query_string={"window": value}, headers=BEARER)
    assert response.status_code == 400
    assert response.mimetype == "text/plain"
    body = response.get_data(as_text=True)
    assert body.startswith("window must be one of 1h, 24h, 7d, got ")
    assert "Traceback" not in body
    assert len(body) < 200


def test_a_hostile_traceback_is_escaped_and_scrubbed(store: Store, client: Client) -> None:
    name = HTML_HOSTILE[0] + " sync"
    store.add(name, task="app.sync", timer="every 5m")
    hostile = "\n".join(
        [*HTML_HOSTILE, "connect postgresql://svc:pw-in-trace@db/app", f"token {TOKEN}"]
    )
    _fires(store, name, dict(ago=5, state="failed", reason=HTML_HOSTILE[1], detail=hostile))
    page = html(client.get("/problems", headers=BEARER))
    section = _failures_section(page)
    for text in HTML_HOSTILE:
        if "<" in text:
            assert text not in section  # never raw markup
    assert "{{ 7*7 }}" in section  # kept as text, never evaluated
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section
    assert "<script" not in page.replace('<script src="/static/live.js" defer></script>', "")
    assert "pw-in-trace" not in page
    assert TOKEN not in page
    assert "postgresql://svc:***@db/app" in unescape(section)
    assert unescape(section).count(HTML_HOSTILE[0] + " sync") == 1


def _summary_store(store: Store) -> None:
    for name in ("ok", "off", "broken", "failing", "late"):
        store.add(name, task=f"app.{name}", timer="every 5m")
    store.disable("off")
    with store.begin() as conn:
        conn.execute(
            sa.update(periodic_task)
            .where(periodic_task.c.name == "broken")
            .values(error="task 'app.broken' is not registered")
        )
        conn.execute(
            sa.update(periodic_task)
            .where(periodic_task.c.name == "late")
            .values(next_run=T0 - timedelta(minutes=10))
        )
        conn.execute(
            sa.update(periodic_task)
            .where(periodic_task.c.name == "ok")
            .values(next_run=T0 + timedelta(minutes=1))
        )
    _fires(store, "failing", dict(ago=10, state="succeeded"), dict(ago=5, state="failed"))
    _fires(store, "ok", dict(ago=10, state="failed"), dict(ago=5, state="succeeded"))


def test_summary_line_counts_and_shows_on_every_page(store: Store, client: Client) -> None:
    _summary_store(store)
    assert store.summary() == Summary(tasks=5, enabled=4, in_error=1, failing=1, late=1)
    for path in ("/", "/task?name=ok", "/problems", "/task/edit?name=ok", "/task/new"):
        page = html(client.get(path, headers=BEARER))
        line = page.split('<p class="summary" id="summary">')[1].split("</p>")[0]
        text = " ".join(re.sub(r"<[^>]+>", "", line).split())
        assert text == "5 tasks · 4 enabled · 1 in error · 1 failing · 1 late", path
        assert 'href="/?failing=yes" class="bad"' in line
    # The "failing" link lists the same task the summary counted.
    listed = html(client.get("/?failing=yes", headers=BEARER))
    assert ">failing</a>" in listed
    assert ">ok</a>" not in listed


def test_summary_line_is_only_for_who_may_see_the_store(store: Store, celery_app: Celery) -> None:
    _summary_store(store)
    guarded = Client(create_app(store, token=TOKEN, celery_app=celery_app))
    assert guarded.get("/").status_code == 303  # to the login page
    assert 'id="summary"' not in html(guarded.get("/login"))
    open_dashboard = Client(create_app(store, celery_app=celery_app))  # read-only, no login
    assert "5 tasks" in html(open_dashboard.get("/"))


def test_live_pages_load_the_script_and_refresh_requests_are_marked(
    store: Store, client: Client
) -> None:
    store.add("job", task="app.job", timer="every 5m")
    for path in ("/", "/task?name=job", "/problems?window=1h"):
        response = client.get(path, headers=BEARER)
        page = html(response)
        assert '<main data-live="10">' in page, path
        assert '<script src="/static/live.js" defer></script>' in page
        assert "script-src 'self'" in response.headers["Content-Security-Policy"]
        # The refresh asks the same URL: the same page, marked only by its header.
        live = client.get(path, headers={**BEARER, "X-Cronstore-Live": "1"})
        assert live.status_code == 200
        assert "<main data-live" in html(live)
    for path in ("/task/edit?name=job", "/task/new"):
        page = html(client.get(path, headers=BEARER))
        assert "live.js" not in page
        assert "<main>" in page
    script = client.get("/static/live.js")
    assert script.status_code == 200
    assert script.mimetype == "text/javascript"
    assert "X-Cronstore-Live" in script.get_data(as_text=True)
    # A lapsed session: a reload goes to the login page; a live refresh gets 401 and stops.
    assert client.get("/problems").status_code == 303
    refused = client.get("/problems", headers={"X-Cronstore-Live": "1"})
    assert refused.status_code == 401
