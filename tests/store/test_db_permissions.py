"""Beat and the CronTask guard work with exactly the grants docs/security.md lists.

On PostgreSQL and MariaDB, an admin connection migrates the schema; then a beat role and
a worker role get only the privileges the document names, and a real beat tick (sync of
``beat_schedule`` with an insert and a removal, claim, publish, heartbeat, reclaim) and
the worker guard (start, checkpoint, finish) run through them. Each role is also shown
to lack what it was not given.
"""

from __future__ import annotations

import queue
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa
from celery import Celery
from sqlalchemy.exc import DBAPIError

from celery_cronstore.beat.scheduler import Scheduler
from celery_cronstore.errors import StoreUnavailableError
from celery_cronstore.store import Store, runs
from celery_cronstore.testing import FrozenClock

TABLES = ("cronstore_periodic_task", "cronstore_fire", "cronstore_beat")
#: The grants of docs/security.md ("Database permissions").
BEAT_GRANTS = {
    "cronstore_periodic_task": "SELECT, INSERT, UPDATE, DELETE",
    "cronstore_fire": "SELECT, INSERT, UPDATE, DELETE",
    "cronstore_beat": "SELECT, INSERT, UPDATE",
    "cronstore_alembic_version": "SELECT",
    "cronstore_alert": "SELECT, INSERT, UPDATE, DELETE",
    "cronstore_audit": "SELECT, INSERT, DELETE",
}
WORKER_GRANTS = {
    "cronstore_periodic_task": "SELECT, UPDATE",
    "cronstore_fire": "SELECT, UPDATE",
}
PG_SEQUENCES = (
    "cronstore_periodic_task_id_seq",
    "cronstore_fire_id_seq",
    "cronstore_alert_id_seq",
    "cronstore_audit_id_seq",
)


def _noop(*args: object) -> None:
    """Body of the test task (beat only sends it here)."""


@pytest.fixture(params=["postgres", "mysql"])
def admin_url(request: pytest.FixtureRequest) -> str:
    return _emptied(request.getfixturevalue(f"{request.param}_url"))


def _emptied(url: str) -> str:
    store = Store(url)
    store.upgrade()
    with store.begin() as conn:
        for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    store.close()
    return url


def _role(admin_url: str, grants: dict[str, str]) -> Iterator[str]:
    """Create a login role with exactly ``grants``; yield its URL; drop it afterwards."""
    url = sa.engine.make_url(admin_url)
    name = f"cs_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    postgres = url.get_backend_name() == "postgresql"
    hosts = ("%", "localhost", "127.0.0.1")
    with admin.connect() as conn:
        if postgres:
            conn.exec_driver_sql(f"CREATE ROLE {name} LOGIN")
            conn.exec_driver_sql(f"GRANT CONNECT ON DATABASE {url.database} TO {name}")
            conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA public TO {name}")
            for table, privileges in grants.items():
                conn.exec_driver_sql(f"GRANT {privileges} ON {table} TO {name}")
            if "INSERT" in grants["cronstore_fire"]:
                for sequence in PG_SEQUENCES:
                    conn.exec_driver_sql(f"GRANT USAGE ON SEQUENCE {sequence} TO {name}")
        else:
            for host in hosts:
                conn.exec_driver_sql("CREATE USER %s@%s", (name, host))
                for table, privileges in grants.items():
                    conn.exec_driver_sql(
                        f"GRANT {privileges} ON {url.database}.{table} TO %s@%s", (name, host)
                    )
    try:
        yield url.set(username=name, password=None).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            if postgres:
                conn.exec_driver_sql(
                    f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    f"WHERE usename = '{name}'"
                )
                conn.exec_driver_sql(f"DROP OWNED BY {name}")
                conn.exec_driver_sql(f"DROP ROLE {name}")
            else:
                for host in hosts:
                    conn.exec_driver_sql("DROP USER IF EXISTS %s@%s", (name, host))
        admin.dispose()


@pytest.fixture
def beat_url(admin_url: str) -> Iterator[str]:
    yield from _role(admin_url, BEAT_GRANTS)


@pytest.fixture
def worker_url(admin_url: str) -> Iterator[str]:
    yield from _role(admin_url, WORKER_GRANTS)


@pytest.fixture
def pg_admin_url(postgres_url: str) -> str:
    return _emptied(postgres_url)


@pytest.fixture
def pg_beat_url(pg_admin_url: str) -> Iterator[str]:
    yield from _role(pg_admin_url, BEAT_GRANTS)


def test_beat_and_worker_run_with_exactly_the_documented_grants(
    admin_url: str, beat_url: str, worker_url: str
) -> None:
    admin = Store(admin_url)
    clock = FrozenClock(admin.now().replace(microsecond=0))
    admin.add("api-made", task="x.run", timer="*:*:0/10")
    admin.add("stale", task="x.run", timer="hourly", source="config")  # sync removes it

    app = Celery("perm", broker="memory://", set_as_current=False)
    app.conf.update(
        cronstore_url=beat_url,
        task_default_queue="q",
        beat_schedule={"from-config": {"task": "x.run", "schedule": 10.0}},
    )
    app.task(name="x.run", shared=False)(_noop)
    beat_store = Store(beat_url, clock=clock)
    scheduler = Scheduler(app, lazy=True)
    scheduler.store = beat_store
    scheduler.tick()  # schema check, sync (insert + delete), heartbeat, reclaim, peek
    assert sorted(t.name for t in admin.list()) == ["api-made", "from-config"]

    clock.set(clock() + timedelta(seconds=60))
    scheduler.tick()  # claim + publish + mark published
    fire = admin.history("api-made")[0]
    assert fire.state == "published"
    assert [node for node, *_ in admin.beats()] == [scheduler.node]
    with app.connection_for_read() as conn:
        q = conn.SimpleQueue("q")
        ids = set()
        while True:
            try:
                message = q.get(timeout=0.05)
            except queue.Empty:
                break
            ids.add(message.headers["id"])
            message.ack()
        q.close()
    assert fire.task_id in ids

    worker_store = Store(worker_url, clock=clock)
    decision = runs.start_fire(worker_store.db, fire.task_id, node="w1", tolerance=1.0)
    assert decision.started, decision.reason
    assert runs.checkpoint(worker_store.db, fire.task_id, {"cursor": 7})
    assert runs.finish_fire(worker_store.db, fire.task_id, "succeeded", result="ok")
    assert admin.history("api-made")[0].state == "succeeded"
    assert admin.get("api-made").resume_state == {"cursor": 7}

    # Nothing more than that: neither role can change the schema, the worker cannot add.
    for url in (beat_url, worker_url):
        engine = sa.create_engine(url)
        with pytest.raises(DBAPIError), engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE cronstore_beat")
        engine.dispose()
    with pytest.raises(StoreUnavailableError, match="denied"):  # the store's own error
        worker_store.add("intruder", task="x.run", timer="hourly")
    scheduler.close()
    worker_store.close()
    admin.close()


def test_a_beat_role_that_cannot_vacuum_says_so_at_a_bounded_rate(
    pg_admin_url: str,
    pg_beat_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """PostgreSQL with autovacuum off (this project's CI server) and a beat role that does
    not own the tables: nobody removes the dead rows, and beat cannot. It names the table
    and the fix in a warning, once per WARN_EVERY, instead of slowing down in silence."""
    from celery_cronstore.beat.threads import Vacuumer
    from celery_cronstore.policy import vacuum as rule
    from celery_cronstore.store.vacuum import table_stats

    monkeypatch.setattr(rule, "DEAD_MIN", 100)
    monkeypatch.setattr(rule, "QUIET", 0.0)
    admin = Store(pg_admin_url)
    for n in range(20):
        admin.add(f"v{n}", task="x.do", timer="every 1h")
    for _ in range(10):  # 200 dead versions of the task rows
        with admin.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE cronstore_periodic_task SET next_run = next_run + interval '1 second'"
            )
    beat = Store(pg_beat_url)
    tasks_table = "cronstore_periodic_task"  # (the ledger may have dead rows of its own)
    try:
        deadline = time.monotonic() + 10
        while not [t for t in table_stats(beat.db) if t.name == tasks_table and t.dead >= 100]:
            assert time.monotonic() < deadline, "the statistics never counted the dead rows"
            time.sleep(0.1)
        (tasks,) = [t for t in table_stats(beat.db) if t.name == tasks_table]
        assert not tasks.allowed  # the role was granted rows, not ownership
        vacuumer = Vacuumer(beat.db, str)

        def warnings() -> list[str]:
            return [r.getMessage() for r in caplog.records if "cannot vacuum" in r.getMessage()]

        with caplog.at_level("WARNING", logger="celery.beat"):
            assert vacuumer.look(1000.0)
            assert vacuumer.wait(30)
            first = warnings()
            assert vacuumer.look(1000.0 + rule.LOOK_EVERY)  # a look later: no second warning
            assert vacuumer.wait(30)
        # (the ledger may qualify too: the tests before left dead rows in it)
        (tasks_warning,) = [w for w in first if "table cronstore_periodic_task " in w]
        assert "turn autovacuum on" in tasks_warning
        assert "VACUUM cronstore_periodic_task" in tasks_warning
        assert warnings() == first
        assert vacuumer.vacuumed == []
    finally:
        beat.close()
        admin.close()
