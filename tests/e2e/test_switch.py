"""Switching over from RedBeat with one command: no fire lost or doubled across the switch.

Real processes: a worker that records every delivery, RedBeat's own beat
(``redbeat.RedBeatScheduler``) firing entries RedBeat itself saved, then ours. The switch is
the one docs/migrating.md describes: stop the old beat, ``cronstore import --from redbeat``
(a dry run first), and our beat, already running on an empty store, picks the tasks up.
Every task's deliveries, old and new, must keep its period: a fire doubled at the switch
would come a period early, one lost a period late.
"""

from __future__ import annotations

import itertools
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner
from processes import beat, celery_env, deliveries, running, wait_for, worker

from celery_cronstore.cli import cronstore
from celery_cronstore.store import Store

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.serial]

PERIODS = {"every-3s": 3, "every-4s": 4}


def cli(app: Celery, *args: str) -> str:
    result = CliRunner().invoke(
        cronstore, list(args), obj=CLIContext(app=app, no_color=True, workdir=None)
    )
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == 0, f"{args}: exit {result.exit_code}\n{result.output}"
    return result.output


def times(got: list[dict[str, Any]], name: str) -> list[float]:
    return sorted(d["at"] for d in got if d["args"] == [name])


def test_a_redbeat_deployment_moves_over_with_no_fire_lost_or_doubled(
    tmp_path: Path, redis_url: str
) -> None:
    from celery.schedules import schedule
    from redbeat import RedBeatSchedulerEntry

    prefix = f"switch-{uuid.uuid4().hex[:8]}:"
    url = f"sqlite:///{tmp_path / 'cronstore.sqlite'}"
    app = Celery("switch", broker=redis_url, set_as_current=False)
    app.conf.update(redbeat_redis_url=redis_url, redbeat_key_prefix=prefix, cronstore_url=url)
    for name, period in PERIODS.items():
        entry = RedBeatSchedulerEntry(
            name, "e2e.record", schedule(timedelta(seconds=period)), args=[name], app=app
        )
        entry.save()
    record = tmp_path / "record.jsonl"
    env = celery_env(redis_url, url, record, E2E_REDBEAT_URL=redis_url, E2E_REDBEAT_PREFIX=prefix)
    logs = {part: tmp_path / part for part in ("worker", "redbeat", "ours")}
    for folder in logs.values():
        folder.mkdir()
    cli(app, "migrate")
    store = Store(url)
    redbeat = beat(scheduler="redbeat.RedBeatScheduler")
    with (
        running([worker("switch")], env, logs["worker"]),
        running([redbeat], env, logs["redbeat"]) as old,
    ):
        wait_for(
            lambda: all(len(times(deliveries(record), n)) >= 3 for n in PERIODS),
            60,
            "RedBeat's first fires",
            logs["redbeat"],
        )
        with running([beat()], env, logs["ours"]):
            wait_for(lambda: bool(store.beats()), 30, "our beat", logs["ours"])
            dry = cli(app, "import", "--from", "redbeat", "--dry-run")
            assert "would write 2 task(s)" in dry, dry
            assert store.list() == [], "a dry run wrote"
            # The switch: stop the old beat, import; ours picks the tasks up.
            old[0].terminate()
            old[0].wait(15)
            done = cli(app, "import", "--from", "redbeat")
            assert "write 2 task(s): 2 create" in done, done
            switched = time.time()
            time.sleep(13)
        time.sleep(1.5)  # the last messages reach the worker
    got = deliveries(record)
    assert len({d["task_id"] for d in got}) == len(got), "a message was delivered twice"
    fires = {f.task_id: f for name in PERIODS for f in store.history(name, limit=100)}
    store.close()
    for name, period in PERIODS.items():
        at = times(got, name)
        ours = [t for t in at if t > switched]
        assert len(ours) >= 3, f"{name}: {len(ours)} fires after the switch"
        gaps = [round(b - a, 2) for a, b in itertools.pairwise(at)]
        # RedBeat wakes every 0.5 s here; ours is late by milliseconds.
        assert all(period - 1.0 <= g <= period + 1.0 for g in gaps), f"{name}: gaps {gaps}"
        mine = [d for d in got if d["args"] == [name] and d["task_id"] in fires]
        assert len(mine) == len(ours), f"{name}: a delivery after the switch is not in our ledger"
