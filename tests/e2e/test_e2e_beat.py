"""End to end: a real `celery beat -S celery_cronstore.Scheduler` and a real worker.

Second-level timers fire at their grid times; an edit made while beat runs takes effect;
a disabled task stops. Run on Redis and RabbitMQ, with the store on SQLite, PostgreSQL and
MariaDB.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest
from processes import beat, celery_env, deliveries, running, wait_for, worker

from celery_cronstore.store import Store

pytestmark = pytest.mark.slow

COMBOS = [
    pytest.param("redis", "sqlite", marks=pytest.mark.redis, id="redis-sqlite"),
    pytest.param(
        "redis", "postgres", marks=[pytest.mark.redis, pytest.mark.postgres], id="redis-postgres"
    ),
    pytest.param(
        "rabbitmq", "mysql", marks=[pytest.mark.rabbitmq, pytest.mark.mysql], id="rabbitmq-mysql"
    ),
    pytest.param(
        "rabbitmq",
        "postgres",
        marks=[pytest.mark.rabbitmq, pytest.mark.postgres],
        id="rabbitmq-postgres",
    ),
]


def _store_url(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite'}"
    return str(request.getfixturevalue(f"{kind}_url"))


@pytest.mark.parametrize(("broker_kind", "store_kind"), COMBOS)
def test_beat_fires_on_time_sees_edits_and_stops_when_disabled(
    request: pytest.FixtureRequest, tmp_path: Path, broker_kind: str, store_kind: str
) -> None:
    broker = request.getfixturevalue(f"{broker_kind}_url")
    url = _store_url(request, store_kind, tmp_path)
    store = Store(url)
    store.upgrade()
    for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
        with store.begin() as conn:
            conn.exec_driver_sql(f"DELETE FROM {table}")
    store.add("every-2s", task="e2e.record", timer="*:*:0/2", args=["v1"])
    store.add("every-3s", task="e2e.record", timer="every 3s", args=["interval"])
    record = tmp_path / "record.jsonl"
    env = celery_env(broker, url, record, E2E_QUEUE=f"e2e-{uuid.uuid4().hex[:8]}")
    # The short alias from the celery.beat_schedulers entry point must work too.
    scheduler = "cronstore" if store_kind == "sqlite" else "celery_cronstore.Scheduler"
    with running([worker("w1"), beat(scheduler=scheduler)], env, tmp_path):

        def fired(args: str, n: int) -> bool:
            return sum(1 for d in deliveries(record) if d["args"] == [args]) >= n

        wait_for(lambda: fired("v1", 3) and fired("interval", 2), 40, "first fires", tmp_path)

        store.update("every-2s", args=["v2"])
        wait_for(lambda: fired("v2", 2), 15, "the edited args", tmp_path)

        store.disable("every-2s")
        disabled_at = store.now()
        before = len(deliveries(record))
        wait_for(
            lambda: len(deliveries(record)) >= before + 2, 15, "the interval to go on", tmp_path
        )

    got = deliveries(record)
    by_id = Counter(d["task_id"] for d in got)
    assert all(count == 1 for count in by_id.values()), f"duplicates: {by_id.most_common(3)}"
    fires = {f.task_id: f for name in ("every-2s", "every-3s") for f in store.history(name, 500)}
    for delivery in got:
        fire = fires[delivery["task_id"]]
        delivered = datetime.fromtimestamp(delivery["at"], timezone.utc)
        assert fire.fire_time.microsecond == 0
        assert fire.fire_time.second % (2 if fire.name == "every-2s" else 3) == 0
        assert delivered >= fire.fire_time, "delivered before its fire time"
        assert (delivered - fire.fire_time).total_seconds() < 5, "delivered far too late"
    late_2s = [fires[d["task_id"]] for d in got if fires[d["task_id"]].name == "every-2s"]
    assert all(f.fire_time <= disabled_at for f in late_2s), "fired after it was disabled"
    store.close()
