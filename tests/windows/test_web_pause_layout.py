"""Pause and resume in a real browser (Playwright driving Debian's Chromium): the task
page's forms pause with a note, an end and the choice, and resume; the paused task's page
and list, and the Django admin's change list holding a paused task with a long note, fit
the window. Skips as ``test_web_layout.py`` does (its fixtures)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from test_web_layout import (  # noqa: F401  (fixtures)
    _fits,
    _log_in,
    _shot,
    _wrapped,
    admin_site,
    browser,
    site,
)

from celery_cronstore.store import Store

pytestmark = pytest.mark.browser

#: A note with long words and no spaces in part: it wraps inside its box.
NOTE = "db migration of the mailbox tables " + "x" * 120


@pytest.mark.parametrize("width", [1280])
def test_pause_and_resume_from_the_task_page(
    site: tuple[str, Store],  # noqa: F811  (test_web_layout's fixtures, imported above)
    browser: Any,  # noqa: F811
    tmp_path: Path,
    width: int,
) -> None:
    base, store = site
    page = browser.new_context(viewport={"width": width, "height": 900}).new_page()
    _log_in(page, base)
    page.goto(f"{base}/task?name=nightly")
    page.fill("form.pause input[name=note]", NOTE)
    page.fill("form.pause input[name=until]", "2099-01-07T09:00")
    page.select_option("form.pause select[name=resume]", "newest")
    page.click("form.pause button[value=pause]")
    page.wait_for_selector("#paused")
    task = store.get("nightly")
    assert task.paused_note == NOTE
    assert task.paused_until == datetime(2099, 1, 7, 8, 0, tzinfo=timezone.utc)  # Berlin
    assert "(then newest): db migration" in page.inner_text("#paused")
    _shot(page, tmp_path, f"task-paused-{width}")
    _fits(page)
    _wrapped(page, "#paused")
    page.goto(f"{base}/")
    row = page.locator("table.tasks tbody tr", has_text="nightly")
    assert "paused until" in row.inner_text()
    _fits(page)

    # A refusal: the store's message on the page, the typed values kept.
    page.goto(f"{base}/task?name=nightly")
    page.fill("form.pause input[name=until]", "2001-01-01T00:00:00Z")
    page.click("form.pause button[value=pause]")
    page.wait_for_selector("#pause-error")
    assert "is not in the future" in page.inner_text("#pause-error")
    assert page.input_value("form.pause input[name=until]") == "2001-01-01T00:00:00Z"
    _fits(page)

    page.select_option("form.resume select[name=mode]", "skip")
    page.click("form.resume button[value=resume]")
    page.wait_for_selector("p.flash")
    assert page.inner_text("p.flash") == "Resumed."
    assert page.locator("#paused").count() == 0
    assert store.get("nightly").paused_at is None


def test_admin_change_list_with_a_paused_task_fits_1600_px(
    admin_site: tuple[str, Store],  # noqa: F811
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    base, store = admin_site
    store.pause("nightly", note=NOTE, until="2099-01-07T08:00:00Z", resume="newest")
    page = browser.new_context(viewport={"width": 1600, "height": 900}).new_page()
    page.goto(f"{base}/admin/login/?next=/admin/cronstore/periodictask/")
    page.fill("#id_username", "layout")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    _shot(page, tmp_path, "admin-paused-1600")
    _fits(page)
    inner, content = page.evaluate(
        "(e => [e.clientWidth, e.scrollWidth])(document.querySelector('#changelist .results'))"
    )
    assert content <= inner, f"the change list is {content} px wide in a {inner} px box"
    row = page.locator("#result_list tbody tr", has_text="nightly")
    assert "paused until" in row.locator("td.field-next_fire").inner_text()
