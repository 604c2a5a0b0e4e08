"""The kill switch (issue 25), with real processes: a `celery beat` started with
``CRONSTORE_FIRE=0`` on a store whose tasks are due claims and publishes nothing (no
ledger row, no message, no run), keeps its heartbeat marked ``firing = false`` and says
so in its log; ``cronstore health`` (a process) says that firing is off. The same store
then gets a beat without the switch, and the waiting fires go.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from processes import beat, celery_env, deliveries, running, wait_for, worker

from celery_cronstore.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.redis]

STORES = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", marks=pytest.mark.postgres, id="postgres"),
]


def _health(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "e2e_app", "cronstore", "health", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("store_kind", STORES)
def test_beat_with_firing_off_sends_nothing_and_says_so(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str, store_kind: str
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'store.sqlite'}"
        if store_kind == "sqlite"
        else str(request.getfixturevalue("postgres_url"))
    )
    store = Store(url)
    store.upgrade()
    for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
        with store.begin() as conn:
            conn.exec_driver_sql(f"DELETE FROM {table}")
    store.add("plain-1s", task="e2e.record", timer="every 1s", args=["plain"])
    store.add("guarded-1s", task="e2e.guarded", timer="*:*:*", args=["guarded"])
    record = tmp_path / "record.jsonl"
    queue = f"e2e-{uuid.uuid4().hex[:8]}"
    base = celery_env(redis_url, url, record, E2E_QUEUE=queue)
    base.pop("CRONSTORE_FIRE", None)
    off = dict(base, CRONSTORE_FIRE="0")
    logs = tmp_path
    with running([worker("w1"), beat()], off, logs):

        def unarmed_seen() -> bool:
            return any(b.firing is False for b in store.beats())

        wait_for(unarmed_seen, 40, "the beat's heartbeat with firing off", logs)
        time.sleep(4)  # four one-second fires fall due meanwhile
        healthy = _health(off, logs, "--max-late", "2")
        strict = _health(off, logs, "--max-late", "2", "--require-firing")
    beat_log = next(logs.glob("proc1-beat.log")).read_text(errors="replace")
    assert "beat: firing is off" in beat_log, beat_log[-2000:]
    assert "CRONSTORE_FIRE=0" in beat_log
    assert "sending" not in beat_log, beat_log[-2000:]
    assert deliveries(record) == []
    assert store.history("plain-1s") == []
    assert store.history("guarded-1s") == []
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert healthy.stdout.startswith("healthy: firing is off: beat "), healthy.stdout
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert "unhealthy: firing is off" in strict.stderr

    # The switch unset: the same store fires again.
    with running([worker("w2"), beat()], base, logs):

        def both_ran() -> bool:
            got = {tuple(d["args"]) for d in deliveries(record)}
            return {("plain",), ("guarded",)} <= got

        wait_for(both_ran, 40, "fires once the switch is off", logs)
        fired = _health(base, logs, "--max-late", "30", "--require-firing")
    assert fired.returncode == 0, fired.stdout + fired.stderr
    assert fired.stdout.startswith("healthy: beat "), fired.stdout
    # The nominal fire time reaches a plain task (``celery_cronstore.fire_time``), however
    # late the fire ran: the ledger's.
    ledger = {f.task_id: f.fire_time for f in store.history("plain-1s", 1000)}
    plain = [d for d in deliveries(record) if d["args"] == ["plain"]]
    assert plain
    for delivery in plain:
        assert datetime.fromisoformat(delivery["fire_time"]) == ledger[delivery["task_id"]]
    store.close()
