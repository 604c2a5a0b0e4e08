"""Beat started with another scheduler while ``cronstore_url`` is set warns, naming the fix."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from celery import Celery, beat, signals

from celery_cronstore.beat import checks
from celery_cronstore.beat.scheduler import Scheduler


def make_app(url: str | None) -> Celery:
    app = Celery("shop", set_as_current=False, broker="memory://")
    if url is not None:
        app.conf.cronstore_url = url
    return app


@pytest.mark.parametrize(
    "scheduler",
    [beat.PersistentScheduler, "celery.beat:PersistentScheduler", "celery.beat.Scheduler"],
)
def test_another_scheduler_with_cronstore_url_warns(
    scheduler: object, caplog: pytest.LogCaptureFixture
) -> None:
    service = beat.Service(make_app("sqlite:///x.sqlite"), scheduler_cls=scheduler)
    with caplog.at_level(logging.WARNING, logger="celery.beat"):
        signals.beat_init.send(sender=service)  # what celery.beat.Service.start sends
    [record] = [r for r in caplog.records if r.name == "celery.beat"]
    assert record.levelno == logging.WARNING
    assert "cronstore_url is set but this beat runs celery.beat." in record.getMessage()
    assert "will NOT fire" in record.getMessage()
    assert "--scheduler cronstore" in record.getMessage()


@pytest.mark.parametrize(
    ("url", "scheduler"),
    [
        ("sqlite:///x.sqlite", Scheduler),
        ("sqlite:///x.sqlite", "celery_cronstore.Scheduler"),
        ("sqlite:///x.sqlite", "celery_cronstore.beat.scheduler:Scheduler"),
        (None, beat.PersistentScheduler),  # not a cronstore app: nothing to say
        ("sqlite:///x.sqlite", "no.such.module:Scheduler"),  # beat reports that itself
    ],
)
def test_no_warning(url: str | None, scheduler: object, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="celery.beat"):
        signals.beat_init.send(sender=beat.Service(make_app(url), scheduler_cls=scheduler))
    assert [r.getMessage() for r in caplog.records if r.name == "celery.beat"] == []


def test_a_subclass_of_ours_counts_as_ours() -> None:
    class Mine(Scheduler):  # type: ignore[misc]
        pass

    assert checks.other_scheduler_problem(make_app("sqlite://"), Mine) is None


def test_message_names_the_app_as_started() -> None:
    problem = checks.other_scheduler_problem(
        make_app("sqlite://"), "celery.beat:PersistentScheduler", app_name="proj.celery"
    )
    assert problem is not None
    assert "`celery -A proj.celery beat -S cronstore`" in problem


@pytest.mark.slow
def test_real_beat_with_the_default_scheduler_warns(tmp_path: Path) -> None:
    # A worker's -S is --statedb: `worker -B -S celery_cronstore.Scheduler` on an app
    # that does not name the scheduler runs Celery's default one. Beat alone shows it too.
    # The app imports nothing of ours: the celery command's plugin (our CLI) connects it.
    (tmp_path / "shopapp.py").write_text(
        textwrap.dedent(
            f"""
            from celery import Celery

            app = Celery("shop", broker="memory://")
            app.conf.cronstore_url = "sqlite:///{tmp_path / "store.sqlite"}"
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    log = tmp_path / "beat.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "shopapp", "beat", "-s", "beat-schedule"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 30
            while "will NOT fire" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            process.terminate()
            process.wait(timeout=30)
    output = log.read_text()
    assert "WARNING" in output
    assert "this beat runs celery.beat.PersistentScheduler, not celery-cronstore" in output
    assert "`celery -A shopapp beat -S cronstore`" in output
