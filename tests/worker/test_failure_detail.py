"""A failed run leaves its traceback in ``fire.detail``: bounded, scrubbed, beside ``reason``.

In this process over every backend (CronTask and a plain task run eagerly, the way the
worker runs them), and once in a REAL prefork worker (``slow``): the traceback a worker
process formats is what the failures view shows.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery
from timeline import at
from whole_messages import URL as WHOLE_FILES

from celery_cronstore.store import Claim, Claimer, Store
from celery_cronstore.store.failures import DETAIL_MAX, clip
from celery_cronstore.store.schema import fire
from celery_cronstore.testing import FrozenClock
from celery_cronstore.worker import plain, use_store
from celery_cronstore.worker.failure import failure_detail
from celery_cronstore.worker.task import CronTask

ROOT = Path(__file__).resolve().parents[2]
#: A password only the app's configuration knows (scrub() has no pattern for it bare).
APP_SECRET = "app-secret-4242"
HEADERS = {"celery_beat_task": True}


def _detail(store: Store, task_id: str) -> tuple[str, str | None, str | None]:
    with store.engine.connect() as conn:
        row = conn.execute(
            sa.select(fire.c.state, fire.c.reason, fire.c.detail).where(fire.c.task_id == task_id)
        ).one()
    return row.state, row.reason, row.detail


def _huge_failure() -> None:
    """Fails deep in a call chain with a message of 50,000 characters and two passwords."""

    def inner(depth: int) -> None:
        if depth:
            inner(depth - 1)
        raise RuntimeError(
            "upstream returned 503 from postgresql://svc:hunter2@db.internal/app "
            f"(app password {APP_SECRET}) " + "x" * 50_000 + " END-OF-MESSAGE"
        )

    inner(30)


@pytest.fixture
def app(store: Store) -> Iterator[Celery]:
    app = Celery(f"detail-{uuid.uuid4().hex[:6]}", set_as_current=False)
    app.conf.cronstore_url = store.url
    # Never contacted (eager runs keep no results): only its password matters here.
    app.conf.result_backend = f"redis://:{APP_SECRET}@127.0.0.1:1/0"
    use_store(app, store)
    yield app
    use_store(app, None)


def _claim(store: Store, clock: FrozenClock, name: str, task: str) -> Claim:
    store.add(name, task=task, timer="every 1m")
    clock.set(at(60))
    claimer = Claimer(store, "beat-1")
    result = claimer.claim_due()
    claimer.mark_published(result.claims)
    (claim,) = result.claims
    return claim


def _beat_headers(claim: Claim) -> dict[str, Any]:
    return {
        **HEADERS,
        "cronstore_name": claim.name,
        "cronstore_fire_time": claim.fire_time.isoformat(),
        "cronstore_interval": claim.interval,
    }


def _assert_bounded_and_scrubbed(detail: str | None) -> None:
    assert detail is not None
    assert len(detail) <= DETAIL_MAX
    assert detail.startswith("Traceback (most recent call last):")
    assert "characters cut] …" in detail
    assert detail.rstrip().endswith("END-OF-MESSAGE")  # the tail names the exception
    assert "hunter2" not in detail
    assert APP_SECRET not in detail
    assert "_huge_failure" in detail  # the head keeps the outer frames


def test_a_failing_crontask_leaves_a_bounded_scrubbed_traceback(
    store: Store, clock: FrozenClock, app: Celery
) -> None:
    @app.task(base=CronTask, bind=True, shared=False, name="tests.explode")
    def explode(self: CronTask) -> None:
        _huge_failure()

    claim = _claim(store, clock, "explode", "tests.explode")
    result = explode.apply(task_id=claim.task_id, headers=_beat_headers(claim))
    assert result.state == "FAILURE"
    state, reason, detail = _detail(store, claim.task_id)
    assert state == "failed"
    assert reason is not None
    assert reason.startswith("RuntimeError: upstream returned 503")  # one line, as before
    _assert_bounded_and_scrubbed(detail)


def test_a_failing_plain_task_leaves_a_bounded_scrubbed_traceback(
    store: Store, clock: FrozenClock, app: Celery
) -> None:
    @app.task(bind=True, shared=False, name="tests.plain_explode")
    def plain_explode(self: Any) -> None:
        _huge_failure()

    assert plain.install(app) == 1  # what the worker does as it starts
    claim = _claim(store, clock, "plain-explode", "tests.plain_explode")
    result = plain_explode.apply(task_id=claim.task_id, headers=_beat_headers(claim))
    assert result.state == "FAILURE"
    state, reason, detail = _detail(store, claim.task_id)
    assert state == "failed"
    assert reason is not None
    assert reason.startswith("RuntimeError: upstream returned 503")
    _assert_bounded_and_scrubbed(detail)


def test_a_success_leaves_no_traceback(store: Store, clock: FrozenClock, app: Celery) -> None:
    @app.task(base=CronTask, bind=True, shared=False, name="tests.fine")
    def fine(self: CronTask) -> str:
        return "ok"

    claim = _claim(store, clock, "fine", "tests.fine")
    assert fine.apply(task_id=claim.task_id, headers=_beat_headers(claim)).state == "SUCCESS"
    assert _detail(store, claim.task_id) == ("succeeded", None, None)


@pytest.mark.parametrize("size", [0, 10, DETAIL_MAX - 1, DETAIL_MAX, DETAIL_MAX + 1, 10**6])
def test_clip_keeps_head_and_tail_within_the_bound(size: int) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(size))
    clipped = clip(text)
    assert len(clipped) <= DETAIL_MAX
    if size <= DETAIL_MAX:
        assert clipped == text
        return
    head, _, rest = clipped.partition("\n… [")
    count, _, tail = rest.partition(" characters cut] …\n")
    assert text.startswith(head)
    assert text.endswith(tail)
    assert len(head) + int(count.replace(",", "")) + len(tail) == size


def test_an_exception_that_cannot_be_formatted_still_leaves_a_detail(app: Celery) -> None:
    class Hostile(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    try:
        raise Hostile()
    except Hostile as exc:
        detail = failure_detail(exc, app)
    assert "Hostile" in detail


# -- a real prefork worker -------------------------------------------------------------------

APP_SOURCE = '''
"""The worker side of test_failure_detail.py (written to a temporary directory)."""

import os
from pathlib import Path

from celery import Celery

from celery_cronstore import CronTask

HERE = Path(os.environ["FD_DIR"])
app = Celery("failure_detail_app")
app.conf.update(
    broker_url="filesystem://",
    broker_transport_options={
        "data_folder_in": str(HERE / "broker"),
        "data_folder_out": str(HERE / "broker"),
        "processed_folder": str(HERE / "processed"),
    },
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    cronstore_url=os.environ["FD_STORE"],
)


def fail_deep(depth):
    if depth:
        fail_deep(depth - 1)
    raise RuntimeError(
        "upstream returned 503 from postgresql://svc:hunter2@db.internal/app "
        + "x" * 50000 + " END-OF-MESSAGE"
    )


@app.task(base=CronTask, bind=True, name="fd.guarded")
def guarded(self):
    fail_deep(30)


@app.task(bind=True, name="fd.plain")
def plain(self):
    fail_deep(30)
'''


def _wait(predicate: Callable[[], Any], what: str, log: Path, timeout: float = 40.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
    raise AssertionError(f"timed out waiting for {what}; worker log:\n{tail}")


@pytest.mark.slow
def test_a_real_worker_records_the_traceback_of_both_kinds_of_task(tmp_path: Path) -> None:
    for folder in ("broker", "processed"):
        (tmp_path / folder).mkdir()
    (tmp_path / "failure_detail_app.py").write_text(textwrap.dedent(APP_SOURCE))
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = Store(url)
    store.upgrade()
    sender = Celery("fd-sender", set_as_current=False)
    sender.conf.update(
        broker_url=WHOLE_FILES,  # whole messages only: see whole_messages.py
        broker_transport_options={
            "data_folder_in": str(tmp_path / "broker"),
            "data_folder_out": str(tmp_path / "broker"),
        },
    )
    env = dict(os.environ, FD_DIR=str(tmp_path), FD_STORE=url)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT), env.get("PYTHONPATH", "")])
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "celery", "-A", "failure_detail_app", "worker"),
                *("--pool", "prefork", "-c", "1", "--loglevel", "INFO", "-n", "fd@%h"),
                *("--without-gossip", "--without-mingle", "--without-heartbeat"),
            ],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait(lambda: " ready." in log.read_text(errors="replace"), "the worker", log)
        store.add("guarded", task="fd.guarded", timer="every 2s")
        store.add("plain", task="fd.plain", timer="every 2s")
        claimer = Claimer(store, "test-beat")
        due: dict[str, Claim] = {}

        def both() -> bool:
            result = claimer.claim_due()
            claimer.mark_published(result.claims)
            for c in result.claims:
                due.setdefault(c.name, c)
            return len(due) == 2

        _wait(both, "a due fire of each task", log)  # nothing claims any further fire
        claims = list(due.values())
        for claim in claims:
            sender.send_task(claim.task, task_id=claim.task_id, headers=_beat_headers(claim))
        for claim in claims:
            _, reason, detail = _wait(
                lambda c=claim: (found := _detail(store, c.task_id))[0] == "failed" and found,
                f"{claim.name} to fail",
                log,
            )
            assert reason is not None
            assert reason.startswith("RuntimeError: upstream"), claim
            assert detail is not None
            assert len(detail) <= DETAIL_MAX
            assert detail.startswith("Traceback (most recent call last):")
            assert "fail_deep" in detail
            assert detail.rstrip().endswith("END-OF-MESSAGE")
            assert "hunter2" not in detail
        failures = store.failures()
        assert sorted((t.name, t.counts["failed"]) for t in failures.tasks) == [
            ("guarded", 1),
            ("plain", 1),
        ]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        sender.close()
        store.close()
