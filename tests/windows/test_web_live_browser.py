"""The Problems page in a real browser: a task failing in a loop, updated live.

Playwright driving Debian's Chromium (as ``test_web_browser.py``: skipped locally without
them, a failure under ``CI=true``). The failures are recorded the way a worker records a
plain task's run (``runs.record_start``, then ``runs.finish_fire`` with the traceback
``worker.failure`` formats from a real exception). The page's clock is Playwright's, so
the 10-second refresh is run at once instead of waited for; the fetches are real.
``CRONSTORE_WEB_SCREENSHOTS=docs/img`` refreshes ``web-failures.png``.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery
from conftest import IN_CI
from werkzeug.serving import make_server

from celery_cronstore.store import Store, runs
from celery_cronstore.store.schema import fire
from celery_cronstore.web import create_app
from celery_cronstore.worker.failure import failure_detail

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("CRONSTORE_TEST_CHROMIUM", "/usr/bin/chromium")
TOKEN = "live-token-" + "q" * 12
SHOTS = os.environ.get("CRONSTORE_WEB_SCREENSHOTS")
NAME = "sync-upstream"


def _need_browser() -> Any:
    problem = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        problem = "the playwright package is not installed (pip install playwright)"
    if problem is None and not os.access(CHROMIUM, os.X_OK):
        problem = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if problem is not None:
        if IN_CI:
            pytest.fail(f"{problem}; CI=true requires it (.ci/run installs it)")
        pytest.skip(problem)
    return sync_playwright


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Store, Celery]]:
    url = f"sqlite:///{tmp_path / 'cronstore.sqlite'}"
    store = Store(url)
    store.upgrade()
    app = Celery(f"live-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = url
    app.conf.cronstore_require_registered = False
    dashboard = create_app(store, token=TOKEN, celery_app=app)
    dashboard.summaries.ttl = 0  # the summary line follows each refresh at once
    httpd = make_server("127.0.0.1", 0, dashboard)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}", store, app
    finally:
        httpd.shutdown()
        store.close()


def _upstream(attempt: int) -> None:
    url = "https://api.example.com/v1/orders?cursor=" + "c" * 400  # one long unbroken word
    raise RuntimeError(f"upstream returned 503 for {url} (attempt {attempt})")


def _fail_once(store: Store, app: Celery, minutes_ago: float, attempt: int) -> None:
    """Record one fire of the task that started and failed, as a worker would."""
    task = store.get(NAME)
    task_id = f"{NAME}-{attempt}"
    with store.begin() as conn:
        conn.execute(
            sa.insert(fire).values(
                periodic_task_id=task.id,
                fire_time=store.now() - timedelta(minutes=minutes_ago),
                task_id=task_id,
                state="published",
                attempts=1,
            )
        )
    assert runs.record_start(store.db, task_id, node="worker@host-b", abandon_after=60) == 0
    try:
        _upstream(attempt)
    except RuntimeError as exc:
        detail = failure_detail(exc, app)
        error = f"{type(exc).__name__}: {str(exc)[:60]}"
    assert runs.finish_fire(store.db, task_id, "failed", error=error, detail=detail)


def _no_overflow(page: Any) -> None:
    widths = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], f"horizontal overflow: {widths}"


def _wait_text(locator: Any, text: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in locator.inner_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared in {locator.inner_text()!r}")


def test_problems_page_shows_a_failing_loop_and_updates_live(
    server: tuple[str, Store, Celery],
) -> None:
    base, store, app = server
    store.add(NAME, task="app.sync", timer="every 5m")
    store.add("nightly", task="app.nightly", timer="0 3 * * *")
    for attempt in range(1, 12):
        _fail_once(store, app, minutes_ago=60 - attempt * 5, attempt=attempt)

    sync_playwright = _need_browser()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            csp: list[str] = []
            page.on(
                "console",
                lambda msg: csp.append(msg.text) if "Content Security" in msg.text else None,
            )
            page.clock.install()  # the page's timers run when the test says so
            page.goto(f"{base}/login")
            page.fill("input[name=token]", TOKEN)
            page.click("form.login button[type=submit]")
            page.wait_for_url(f"{base}/")
            page.goto(f"{base}/problems")

            row = page.locator("table.failures tbody.failure", has_text=NAME)
            assert row.locator("td.count").inner_text() == "11"
            assert "failed \N{MULTIPLICATION SIGN}11" in row.inner_text()
            assert "RuntimeError: upstream returned 503" in row.inner_text()
            assert "1 failing" in page.inner_text("#summary")
            row.locator("details summary").click()
            traceback = row.locator("pre.traceback")
            assert traceback.is_visible()
            assert "Traceback (most recent call last)" in traceback.inner_text()
            assert "attempt 11" in traceback.inner_text()
            for width in (1280, 1600):
                page.set_viewport_size({"width": width, "height": 900})
                _no_overflow(page)
            if SHOTS:
                page.screenshot(path=str(Path(SHOTS) / "web-failures.png"), full_page=True)

            # Another failure lands; the page takes it in without a reload.
            page.evaluate("() => { window.__notReloaded = true; }")
            _fail_once(store, app, minutes_ago=0.5, attempt=12)
            page.clock.run_for(11_000)
            _wait_text(row.locator("td.count"), "12")
            assert page.evaluate("() => window.__notReloaded") is True
            assert "attempt 12" in traceback.inner_text()
            assert row.locator("details").get_attribute("open") is not None  # kept open
            assert page.locator("main").get_attribute("data-live-count") == "1"
            _no_overflow(page)

            # While a form field has focus (typing somewhere), nothing is swapped.
            page.goto(f"{base}/")
            page.focus("input[type=search]")
            page.clock.run_for(11_000)
            time.sleep(0.5)
            assert page.locator("main").get_attribute("data-live-count") is None
            assert csp == []
            context.close()
        finally:
            browser.close()
