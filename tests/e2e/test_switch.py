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
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
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


def cli(app: Celery, *args: str, code: int = 0) -> str:
    result = CliRunner().invoke(
        cronstore, list(args), obj=CLIContext(app=app, no_color=True, workdir=None)
    )
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == code, f"{args}: exit {result.exit_code}\n{result.output}"
    return result.output


def assert_kept_period(
    got: list[dict[str, Any]], name: str, period: float, switched: float
) -> None:
    """Old and new deliveries keep the period: a fire doubled at the switch comes a period
    early, a lost one a period late. At least three came after the switch."""
    at = times(got, name)
    assert len([t for t in at if t > switched]) >= 3, f"{name}: {at} (switched {switched})"
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(at)]
    # The old beats wake every 0.5 s here; ours is late by milliseconds.
    assert all(period - 1.0 <= g <= period + 1.0 for g in gaps), f"{name}: gaps {gaps}"


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

    @app.task(name="e2e.record")  # the operator's app knows the task (tests/e2e/e2e_app.py)
    def record_task(*args: object) -> None: ...

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
            assert all(f"create    {name}" in dry for name in PERIODS), dry
            assert store.list() == [], "a dry run wrote"
            # The switch: stop the old beat, import; ours picks the tasks up.
            old[0].terminate()
            old[0].wait(15)
            done = cli(app, "import", "--from", "redbeat")
            assert all(f"create    {name}" in done for name in PERIODS), done
            switched = time.time()
            time.sleep(13)
        time.sleep(1.5)  # the last messages reach the worker
    got = deliveries(record)
    assert len({d["task_id"] for d in got}) == len(got), "a message was delivered twice"
    fires = {f.task_id: f for name in PERIODS for f in store.history(name, limit=100)}
    store.close()
    for name, period in PERIODS.items():
        assert_kept_period(got, name, period, switched)
        ours = [d for d in got if d["args"] == [name] and d["at"] > switched]
        mine = [d for d in ours if d["task_id"] in fires]
        assert mine == ours, f"{name}: a delivery after the switch is not in our ledger"


# -- django-celery-beat, in the same database as the store ----------------------------------

PEERS = Path(__file__).resolve().parents[1] / "adopt" / "peers"
BULK = 300


def make_dcb(path: Path, tasks: list[dict[str, Any]], *extra: str) -> None:
    """Run django-celery-beat itself (its migrations, its models) on the SQLite file."""
    env = {**os.environ, "DCB_DATABASE_URL": f"sqlite:///{path}"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, str(PEERS / "make_dcb.py"), *extra],
        input=json.dumps({"tasks": tasks}),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def dcb_project() -> list[dict[str, Any]]:
    """Three tasks firing every few seconds, and a project's worth of the four kinds."""
    live = [
        {
            "name": name,
            "task": "e2e.record",
            "schedule": {"interval": {"every": period, "period": "seconds"}},
            "fields": {"args": json.dumps([name])},
        }
        for name, period in {**PERIODS, "still-on": 5}.items()
    ]
    later = (datetime.now(timezone.utc) + timedelta(days=30)).isoformat()
    bulk: list[dict[str, Any]] = []
    for i in range(BULK):
        kind = i % 4
        schedule: dict[str, Any] = [
            {"crontab": {"minute": str(i % 60), "hour": "4", "day_of_week": "mon-fri"}},
            {"interval": {"every": 1 + i % 12, "period": "hours"}},
            {"clocked": {"clocked_time": later}},
            # Too near the pole for cronstore's solar timers: refused by name.
            {"solar": {"event": "sunrise", "latitude": "89.9", "longitude": "11.6"}},
        ][kind]
        fields: dict[str, Any] = {"args": json.dumps([i]), "enabled": kind != 3}
        if kind == 2:
            fields["one_off"] = True
        bulk.append({"name": f"bulk-{i:03d}", "task": "e2e.record", "schedule": schedule,
                     "fields": fields})  # fmt: skip
    return live + bulk


def test_a_django_celery_beat_project_moves_over_with_no_fire_lost_or_doubled(
    tmp_path: Path, redis_url: str
) -> None:
    """A project of 303 rows in the store's own database: the dry run reports them, the
    import brings them over (solar rows at 89.9°N refused by name), the two tasks disabled in
    django-celery-beat keep their period across the switch, and the one it still has
    enabled is held by our beat (each fire recorded dropped, with the reason) instead of
    firing twice."""
    path = tmp_path / "project.sqlite"
    make_dcb(path, dcb_project())
    url = f"sqlite:///{path}"
    app = Celery("switch-dcb", broker=redis_url, set_as_current=False)
    # The tasks live in the workers' app (tests/e2e/e2e_app.py), not in the operator's.
    app.conf.update(cronstore_url=url, cronstore_require_registered=False)

    record = tmp_path / "record.jsonl"
    env = celery_env(redis_url, url, record, E2E_DJANGO_SQLITE=str(path))
    logs = {part: tmp_path / part for part in ("worker", "dcb", "ours")}
    for folder in logs.values():
        folder.mkdir()
    cli(app, "migrate")
    store = Store(url)
    dcb_beat = beat(scheduler="django_celery_beat.schedulers:DatabaseScheduler")
    with (
        running([worker("switch-dcb")], env, logs["worker"]),
        running([dcb_beat], env, logs["dcb"]),
    ):
        wait_for(
            lambda: all(len(times(deliveries(record), n)) >= 3 for n in PERIODS),
            60,
            "django-celery-beat's first fires",
            logs["dcb"],
        )
        with running([beat()], env, logs["ours"]):
            wait_for(lambda: bool(store.beats()), 30, "our beat", logs["ours"])
            dry = cli(app, "import", "--from", "django-celery-beat", "--url", url, "--dry-run",
                      code=1)  # fmt: skip
            lines = dry.splitlines()
            created = [line.split()[1] for line in lines if line.startswith("create ")]
            refused = [line.split()[1] for line in lines if line.startswith("refuse ")]
            # ... and Celery's own celery.backend_cleanup, which its beat stored there
            assert len(created) == BULK * 3 // 4 + 4, lines[-3:]
            assert "celery.backend_cleanup" in created
            assert len(refused) == BULK // 4, lines[-3:]
            assert "is not a cronstore solar timer (the latitude must be" in dry
            assert store.list() == [], "a dry run wrote"
            # The switch, one task at a time: import everything (django-celery-beat still
            # fires them: ours records their fires dropped), then disable two there while
            # its beat goes on with the rest.
            done = cli(app, "import", "--from", "django-celery-beat", "--url", url, code=1)
            assert "still enabled in django-celery-beat" in done, done
            make_dcb(path, [], "--disable", *PERIODS)
            switched = time.time()
            time.sleep(13)
        time.sleep(1.5)  # the last messages reach the worker
    got = deliveries(record)
    assert len({d["task_id"] for d in got}) == len(got), "a message was delivered twice"
    assert len(store.list()) == BULK * 3 // 4 + 4
    for name, period in PERIODS.items():
        assert_kept_period(got, name, period, switched)
    held = store.get("still-on")
    assert held.error is None
    withheld = store.history("still-on", limit=20)
    assert withheld, "still-on was never planned here"
    assert {f.state for f in withheld} == {"dropped"}
    assert all(
        "django-celery-beat still has this task enabled" in (f.reason or "") for f in withheld
    )
    # still-on goes on firing from django-celery-beat only: none of its deliveries is ours
    still = [d for d in got if d["args"] == ["still-on"] and d["at"] > switched]
    assert len(still) >= 2, "django-celery-beat stopped firing the task it still has"
    assert not {d["task_id"] for d in still} & {f.task_id for f in withheld}
    again = cli(app, "import", "--from", "django-celery-beat", "--url", url, code=1)
    # the rerun changes nothing of the two moved over (not even their enabled flag, the
    # switch itself); still-on's newer run in django-celery-beat becomes its last fire
    assert "unchanged every-3s" in again, again
    assert "unchanged every-4s" in again, again
    assert "update    still-on  (last_fire: " in again, again
    store.close()
