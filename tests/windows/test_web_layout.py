"""The pages' layout and the form fixes in a real browser (Playwright driving Debian's Chromium).

At 1280 and 1600 px wide, the task list, a task page holding a 2,000-character error with
no spaces and a long reason with spaces, the edit form, the Problems page, the login page
and the Django admin's change list fit the window (no horizontal scrolling); the long
error wraps inside its cell, and a reason with spaces breaks only between words. The edit
form reads a changed expression afresh (``*/5 * * * *`` -> ``every 5m`` saves as an
interval), and "Run now" on a task disabled meanwhile is refused with the reason. Each
page's screenshot is written to the test's tmp dir and its path printed (``pytest -s``).

Skips locally when Playwright or ``/usr/bin/chromium`` is missing (``CI=true`` makes that
a failure), as ``test_web_browser.py`` does.
"""

from __future__ import annotations

import os
import sys
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
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.web import create_app

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("CRONSTORE_TEST_CHROMIUM", "/usr/bin/chromium")
TOKEN = "layout-token-" + "q" * 12
WIDTHS = (1280, 1600)
#: A stored error with no place to break (a URL-safe token, a base64 blob...).
LONG_ERROR = "E" + ("x0123456789abcdef" * 118)[:1998] + "!"
#: A long reason with spaces: it must wrap between words, never inside one.
LONG_REASON = " ".join(["the upstream mail server answered 503 Service Unavailable"] * 12)


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


def _poll() -> None:
    """The task the pages show."""


def _serve(wsgi: Any) -> tuple[str, Any]:
    httpd = make_server("127.0.0.1", 0, wsgi)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_port}", httpd


@pytest.fixture
def browser() -> Iterator[Any]:
    sync_playwright = _need_browser()
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    """The dashboard over a SQLite store holding the long error and reason."""
    url = f"sqlite:///{tmp_path / 'cronstore.sqlite'}"
    store = Store(url)
    store.upgrade()
    app = Celery(f"layout-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = url
    app.conf.task_ignore_result = True
    for name in ("mail.poll", "reports.sync"):
        app.task(name=name, shared=False)(_poll)
    _seed(store)
    base, httpd = _serve(create_app(store, token=TOKEN, celery_app=app))
    try:
        yield base, store
    finally:
        httpd.shutdown()
        store.close()


def _seed(store: Store) -> None:
    """A few tasks, one in error with :data:`LONG_ERROR`, fires ending with long reasons."""
    store.add("poll-mailbox-42", task="mail.poll", timer="every 5m", owner=("mailbox", "42"))
    store.add("hourly-sync", task="reports.sync", timer="0 * * * *", tz="America/New_York")
    store.add("nightly", task="mail.poll", timer="Mon..Fri *-*-* 02:30", tz="Europe/Berlin")
    store.add("cron-five", task="mail.poll", timer="*/5 * * * *")
    with store.begin() as conn:
        conn.execute(
            sa.update(periodic_task)
            .where(periodic_task.c.name == "poll-mailbox-42")
            .values(error=LONG_ERROR)
        )
    task_id = store.get("poll-mailbox-42").id
    now = store.now().replace(microsecond=0)
    with store.begin() as conn:
        for i, (state, reason) in enumerate(
            [("missed", LONG_REASON), ("dropped", LONG_ERROR), ("succeeded", None)]
        ):
            at = now - timedelta(minutes=10 * (i + 1))
            conn.execute(
                sa.insert(fire).values(
                    periodic_task_id=task_id,
                    fire_time=at,
                    task_id=f"seed-{i}",
                    state=state,
                    attempts=0 if reason else 1,
                    claimed_by="beat@host-a:4242",
                    reason=reason,
                    result=None if reason else '{"fetched": 12}',
                )
            )
    Claimer(store, "beat@host-a:4242").heartbeat(store.now())


def _log_in(page: Any, base: str) -> None:
    page.goto(f"{base}/login")
    page.fill("input[name=token]", TOKEN)
    page.click("form.login button[type=submit]")
    page.wait_for_url(f"{base}/")


def _fits(page: Any) -> None:
    """Assert the page needs no horizontal scrolling."""
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner, f"{page.url}: {scroll} px wide in a {inner} px window"


def _shot(page: Any, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


#: For every element matching the selector: [its width, its content's width, the words of
#: its text broken across two lines (a Range over each word spanning more than one line)].
_WRAPS = """(selector) => [...document.querySelectorAll(selector)].map((el) => {
  const split = [];
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const re = /\\S+/g;
    let m;
    while ((m = re.exec(node.data)) !== null) {
      if (m[0].length > 40) continue;  // a word longer than a line may break
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      if (tops.size > 1) split.push(m[0]);
    }
  }
  return [el.clientWidth, el.scrollWidth, el.getBoundingClientRect().right, split];
})"""


def _wrapped(page: Any, selector: str) -> list[list[Any]]:
    """Assert every element matching ``selector`` wraps inside its box; return the facts."""
    found: list[list[Any]] = page.evaluate(_WRAPS, selector)
    assert found, f"{page.url}: nothing matches {selector}"
    inner = page.evaluate("window.innerWidth")
    for client, content, right, split in found:
        assert content <= client + 1, f"{selector} overflows its box ({content} > {client})"
        assert right <= inner, f"{selector} ends at {right} px in a {inner} px window"
        assert split == [], f"{selector} broke words mid-word: {split[:5]}"
    return found


@pytest.mark.parametrize("width", WIDTHS)
def test_pages_fit_the_window_and_long_text_wraps(
    site: tuple[str, Store], browser: Any, tmp_path: Path, width: int
) -> None:
    base, _ = site
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.goto(f"{base}/login")
    _fits(page)
    _shot(page, tmp_path, f"login-{width}")
    _log_in(page, base)

    _fits(page)
    _wrapped(page, "table.tasks td.error")
    # Plain columns keep their words whole (the timer's description, the next fire).
    _wrapped(page, "table.tasks td:nth-child(3), table.tasks td:nth-child(7)")
    _shot(page, tmp_path, f"tasks-{width}")

    page.goto(f"{base}/task?name=poll-mailbox-42")
    _fits(page)
    [(client, _, _, _)] = _wrapped(page, "p.error.long")
    assert client < width
    reasons = _wrapped(page, "table.history td.long")
    assert any(LONG_REASON[:40] in page.inner_text("table.history") for _ in reasons)
    _shot(page, tmp_path, f"task-{width}")

    page.goto(f"{base}/task/edit?name=poll-mailbox-42")
    _fits(page)
    _shot(page, tmp_path, f"edit-{width}")

    page.goto(f"{base}/problems")
    _fits(page)
    _wrapped(page, "td.error")
    _shot(page, tmp_path, f"problems-{width}")
    context.close()


def test_intervals_show_no_zone_and_times_share_the_display_zone(
    site: tuple[str, Store], browser: Any
) -> None:
    base, _ = site
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    _log_in(page, base)
    row = page.locator("table.tasks tbody tr", has_text="poll-mailbox-42")
    assert row.locator("td").nth(3).inner_text() == "—"  # an interval: its zone does nothing
    hourly = page.locator("table.tasks tbody tr", has_text="hourly-sync")
    assert hourly.locator("td").nth(3).inner_text() == "America/New_York"
    assert "(UTC)" in page.inner_text("table.tasks thead th:nth-child(7)")
    next_fires = [
        page.locator("table.tasks tbody tr").nth(i).locator("td").nth(6).inner_text()
        for i in range(4)
    ]
    assert all(" UTC" in text for text in next_fires), next_fires


def test_edit_form_reads_a_changed_expression_afresh(
    site: tuple[str, Store], browser: Any, tmp_path: Path
) -> None:
    base, store = site
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    _log_in(page, base)
    page.goto(f"{base}/task/edit?name=cron-five")
    assert page.input_value("#kind") == "cron"  # the stored kind, left as it is
    page.fill("#timer", "every 5m")
    page.wait_for_selector("#preview >> text=interval")
    assert "(interval, UTC)" in page.inner_text("#preview")
    _shot(page, tmp_path, "edit-cron-to-interval")
    page.click("button[value=save]")
    page.wait_for_selector("text=Saved.")
    saved = store.get("cron-five")
    assert (saved.timer_kind, saved.timer) == ("interval", "every 5m")

    # A kind chosen on purpose is honoured: one the expression is not is refused, naming both.
    page.goto(f"{base}/task/edit?name=cron-five")
    page.select_option("#kind", "cron")
    page.fill("#timer", "every 10m")
    page.wait_for_selector("#preview .field-error")
    page.click("button[value=save]")
    error = page.inner_text("#error-timer")
    assert "the timer kind is cron but the expression reads as interval" in error
    assert "'every 10m'" in error
    _fits(page)
    assert store.get("cron-five").timer == "every 5m"


def test_run_now_on_a_disabled_task_is_refused(
    site: tuple[str, Store], browser: Any, tmp_path: Path
) -> None:
    base, store = site
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    _log_in(page, base)
    page.goto(f"{base}/task?name=nightly")
    assert page.locator("button[value=run]").count() == 1
    # Another window disables it while this page is open; then the button is pressed.
    store.disable("nightly")
    page.click("button[value=run]")
    message = page.inner_text("#action-error")
    assert "'nightly' is disabled: enable it first" in message
    assert store.history("nightly") == []  # nothing was claimed
    _shot(page, tmp_path, "run-now-refused")
    # Drawn again, a disabled task offers no "Run now", and says why.
    page.goto(f"{base}/task?name=nightly")
    assert page.locator("button[value=run]").count() == 0
    assert "enable it first" in page.inner_text("#run-hint")


# -- the Django admin -----------------------------------------------------------------------


@pytest.fixture
def admin_site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Store]]:
    """The Django admin (SQLite ``default`` alias) served live, with its static files."""
    pytest.importorskip("django")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "contrib"))
    from django_setup import configure

    configure(request, tmp_path_factory)
    from django.contrib.auth.models import User
    from django.contrib.staticfiles.handlers import StaticFilesHandler
    from django.core.handlers.wsgi import WSGIHandler
    from django.test import override_settings

    from celery_cronstore.contrib.django import store_url_from_django

    store = Store(store_url_from_django("default"))
    with store.begin() as conn:
        for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    _seed(store)
    for i in range(8):
        store.add(f"mailbox-poller-for-tenant-{i:03d}", task="mail.poll", timer="*:0/5")
    User.objects.filter(username="layout").delete()
    User.objects.create_superuser("layout", "layout@example.org", "pw")
    with override_settings(
        CRONSTORE_DATABASE="default",
        CRONSTORE_STORE=store,
        STATIC_URL="/static/",
        ALLOWED_HOSTS=["127.0.0.1"],
    ):
        base, httpd = _serve(StaticFilesHandler(WSGIHandler()))
        try:
            yield base, store
        finally:
            httpd.shutdown()
            store.close()


def test_admin_change_list_fits_1600_px(
    admin_site: tuple[str, Store], browser: Any, tmp_path: Path
) -> None:
    base, _ = admin_site
    page = browser.new_context(viewport={"width": 1600, "height": 900}).new_page()
    page.goto(f"{base}/admin/login/?next=/admin/cronstore/periodictask/")
    page.fill("#id_username", "layout")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    sheets = page.evaluate(
        "[...document.styleSheets].filter(s => s.cssRules.length).map(s => s.href)"
    )
    assert any(href.endswith("/static/cronstore/admin.css") for href in sheets), sheets
    assert any(href.endswith("/static/admin/css/changelists.css") for href in sheets), sheets
    _shot(page, tmp_path, "admin-changelist-1600")
    _fits(page)
    # The admin scrolls a list too wide inside its own box: that box must not scroll.
    inner, content = page.evaluate(
        "(e => [e.clientWidth, e.scrollWidth])(document.querySelector('#changelist .results'))"
    )
    widths = page.evaluate(
        "[...document.querySelectorAll('#result_list thead th')]"
        ".map(e => e.className + ':' + Math.round(e.getBoundingClientRect().width))"
    )
    assert content <= inner, f"the change list is {content} px wide in a {inner} px box: {widths}"
    _wrapped(page, "#result_list td.field-error_column")
    row = page.locator("#result_list tbody tr", has_text="poll-mailbox-42")
    # An interval names no zone (it has no effect); a calendar timer names its own.
    assert row.locator("td.field-timer_column").inner_text() == "every 5m\nevery 5 minutes"
    nightly = page.locator("#result_list tbody tr", has_text="nightly")
    assert "Europe/Berlin" in nightly.locator("td.field-timer_column").inner_text()
    header = page.inner_text("#result_list thead th.column-next_fire")
    assert "UTC" in header or "/" in header  # the one zone the column is shown in
