"""The dashboard in a real browser: Playwright driving Debian's Chromium (no download).

Skips locally when Playwright or ``/usr/bin/chromium`` is missing (``CI=true`` makes
that a failure: ``.ci/run`` installs both). Set ``CRONSTORE_WEB_SCREENSHOTS=docs/img`` to
refresh the screenshots in the docs.
"""

from __future__ import annotations

import os
import threading
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

from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.schema import fire
from celery_cronstore.web import create_app

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("CRONSTORE_TEST_CHROMIUM", "/usr/bin/chromium")
TOKEN = "browser-token-" + "z" * 12
SHOTS = os.environ.get("CRONSTORE_WEB_SCREENSHOTS")


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


def _nightly() -> None:
    """The task the operator adds in the browser."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    url = f"sqlite:///{tmp_path / 'cronstore.sqlite'}"
    store = Store(url)
    store.upgrade()
    app = Celery(f"browser-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = url
    # The dashboard refuses a task the app does not register (as the CLI does): the tasks
    # this page adds are registered; the ones the store holds already need not be.
    app.task(name="reports.nightly", shared=False)(_nightly)
    httpd = make_server("127.0.0.1", 0, create_app(store, token=TOKEN, celery_app=app))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}", store
    finally:
        httpd.shutdown()
        store.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    sync_playwright = _need_browser()
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def _seed_history(store: Store, name: str) -> None:
    """Write three hours of varied ledger rows (what beat and workers would leave)."""
    task_id = store.get(name).id
    now = store.now().replace(second=0, microsecond=0)
    states = ["succeeded"] * 5 + ["failed", "succeeded", "missed", "succeeded", "timed_out"]
    with store.begin() as conn:
        for i in range(36, 0, -1):
            at = now - timedelta(minutes=5 * i)
            state = states[i % len(states)]
            late = timedelta(milliseconds=40 + (i * 37) % 900 + (3000 if i % 11 == 0 else 0))
            ran = state != "missed"
            conn.execute(
                sa.insert(fire).values(
                    periodic_task_id=task_id,
                    fire_time=at,
                    task_id=f"seed-{i}",
                    state=state,
                    attempts=1 if ran else 0,
                    claimed_by="beat@host-a:4242" if ran else None,
                    claimed_at=at + late / 2 if ran else None,
                    published_at=at + late if ran else None,
                    started_at=at + late * 2 if ran else None,
                    finished_at=at + late * 2 + timedelta(seconds=3) if ran else None,
                    node="worker@host-b" if ran else None,
                    reason=None if ran else "beat was not running (misfire policy run_once)",
                    result='{"fetched": 12}' if state == "succeeded" else None,
                )
            )


def _shot(page: Any, name: str) -> None:
    if SHOTS:
        page.screenshot(path=str(Path(SHOTS) / f"web-{name}.png"))


def test_operator_flow_in_chromium(server: tuple[str, Store], browser: Any) -> None:
    base, store = server
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    csp_violations: list[str] = []
    page.on(
        "console",
        lambda msg: csp_violations.append(msg.text) if "Content Security" in msg.text else None,
    )

    # Log in with the token.
    page.goto(f"{base}/")
    assert page.url.startswith(f"{base}/login")
    page.fill("input[name=token]", TOKEN)
    page.click("form.login button[type=submit]")
    page.wait_for_url(f"{base}/")

    # Add a task; the live preview (timer.js) shows its next fires while typing.
    page.click("text=Add task")
    page.fill("input[name=name]", "nightly <report>")
    page.fill("input[name=task]", "reports.nightly")
    page.fill("#tz", "Europe/Berlin")
    page.fill("#timer", "Mon..Fri *-*-* 02:30")
    page.wait_for_selector("#preview li")
    assert "Europe/Berlin" in page.inner_text("#preview")
    page.click("button[value=save]")
    page.wait_for_selector("text=Added.")
    assert page.inner_text("h1") == "nightly <report>"

    # See it in the list.
    page.click("header nav >> text=Tasks")
    row = page.locator("table.tasks tbody tr", has_text="nightly <report>")
    assert "reports.nightly" in row.inner_text()
    assert store.get("nightly <report>").enabled

    # Disable it.
    row.locator("a").first.click()
    page.click("button[value=disable]")
    page.wait_for_selector("text=Disabled.")
    assert not store.get("nightly <report>").enabled
    assert page.locator("button[value=enable]").count() == 1

    # A disabled task offers no "Run now" (the worker would drop the fire): enable it,
    # run it now and see the fire in its history.
    assert page.locator("button[value=run]").count() == 0
    assert "enable it first" in page.inner_text("#run-hint")
    page.click("button[value=enable]")
    page.wait_for_selector("text=Enabled.")
    page.click("button[value=run]")
    page.wait_for_selector("text=Sent one fire now")
    first = page.locator("table.history tbody tr").first
    assert "published" in first.inner_text()
    assert "run-now requested" in first.inner_text()

    # Give it a beat's history for the chart and the screenshots.
    store.add("poll-mailbox", task="mail.poll", timer="every 5m", owner=("mailbox", "42"))
    store.add("hourly-sync", task="sync.run", timer="0 * * * *", tz="America/New_York")
    claimer = Claimer(store, "beat@host-a:4242")
    claimer.heartbeat(store.now())
    _seed_history(store, "poll-mailbox")
    page.goto(f"{base}/")
    _shot(page, "tasks")
    page.goto(f"{base}/task?name=poll-mailbox")
    _shot(page, "task")

    # Edit the timer with a bad expression: the live preview and the form show the error.
    page.goto(f"{base}/task?name=nightly+%3Creport%3E")
    page.click("text=Edit")
    page.fill("#timer", "Mon..Fri *-*-* 25:30")
    page.wait_for_selector("#preview .field-error")
    page.click("button[value=save]")
    error = page.wait_for_selector("#error-timer")
    assert error is not None
    assert "25" in error.inner_text()
    _shot(page, "edit")
    assert store.get("nightly <report>").timer == "Mon..Fri *-*-* 02:30:00"

    page.goto(f"{base}/problems")
    assert "beat@host-a:4242" in page.inner_text("table.beats")
    _shot(page, "problems")
    assert csp_violations == []

    # A write without the token (a fresh browser, no session) is refused, and so is a
    # logged-in write without the CSRF token.
    stranger = browser.new_context()
    refused = stranger.request.post(
        f"{base}/task/action", form={"name": "nightly <report>", "action": "disable"}
    )
    assert refused.status == 401
    no_csrf = context.request.post(
        f"{base}/task/action", form={"name": "nightly <report>", "action": "disable"}
    )
    assert no_csrf.status == 403
    assert store.get("nightly <report>").enabled
    stranger.close()
    context.close()
