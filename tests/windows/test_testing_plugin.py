"""The pytest plugin users get (``celery_cronstore.testing``, entry point ``pytest11``)."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest

from celery_cronstore.testing import FrozenClock, Ticker, memory_store

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]

USER_TESTS = """
import pytest
from celery import Celery

app = Celery("shop", set_as_current=False)
app.conf.task_always_eager = False
ran = []

@app.task(name="shop.report")
def report(kind):
    ran.append(kind)
    return f"report {kind}"

def test_clock_starts_on_the_default_monday(cronstore_clock):
    assert cronstore_clock().isoformat() == "2026-01-05T00:00:00+00:00"

@pytest.mark.cronstore_now("2026-03-29T00:59:00Z")
def test_marker_moves_the_start(cronstore_clock, cronstore_store):
    assert cronstore_store.now().isoformat() == "2026-03-29T00:59:00+00:00"

def test_tick_claims_each_fire_once(cronstore_store, cronstore_tick):
    cronstore_store.add("report", task="shop.report", timer="*:0/15", args=["daily"])
    assert cronstore_tick(minutes=14) == []
    first = cronstore_tick(minutes=1)
    assert [(c.name, c.args, c.fire_time.isoformat()) for c in first] == [
        ("report", ["daily"], "2026-01-05T00:15:00+00:00")
    ]
    assert cronstore_tick() == []  # claimed and published: not claimed again
    later = cronstore_tick(minutes=15)
    assert [c.fire_time.minute for c in later] == [30]

def test_run_executes_the_due_tasks_eagerly(cronstore_store, cronstore_tick):
    cronstore_store.add("report", task="shop.report", timer="0 * * * *", args=["hourly"])
    results = cronstore_tick.run(app, hours=1)
    assert [r.get() for r in results] == ["report hourly"]
    assert ran == ["hourly"]
"""


def _plugin_args() -> list[str]:
    """Load the plugin by name only where the entry point is not installed yet."""
    installed = {ep.value for ep in metadata.entry_points(group="pytest11")}
    return [] if "celery_cronstore.testing" in installed else ["-p", "celery_cronstore.testing"]


def test_pyproject_registers_the_plugin() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"cronstore": "celery_cronstore.testing"}


def test_fixtures_in_a_users_test_suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_shop=USER_TESTS)
    result = pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)


def test_a_leaked_connection_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_leak="""
        def test_leaks(cronstore_store):
            conn = cronstore_store.engine.connect()
            conn.exec_driver_sql("SELECT 1")
        """
    )
    result = pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*1 cronstore connection(s) left checked out*"])


def test_ticker_without_pytest_fixtures() -> None:
    clock = FrozenClock("2026-03-29T00:59:00Z")
    store = memory_store(clock)
    try:
        store.add("poll", task="mail.poll", timer="*:0/5")
        tick = Ticker(store, clock)
        assert [c.name for c in tick(minutes=1)] == ["poll"]  # 01:00 is on the 5-minute grid
        assert tick(minutes=4) == []
        assert [c.fire_time.minute for c in tick(minutes=1)] == [5]
    finally:
        store.close()
