"""A managed database role: an owner migrates, beat and workers run with DML only.

Production databases give the application a role that owns nothing (issue 26). Here a
fresh database belongs to an owner role, which runs the migrations; an application role
gets exactly the row privileges of docs/security.md (the union of beat's and the
worker's, with the sequences on PostgreSQL). On PostgreSQL that role is no superuser,
owns no table, may not ``CREATE`` in the schema, and carries a provider's ``ALTER ROLE
... SET statement_timeout`` and ``idle_in_transaction_session_timeout``; on MariaDB (no
ownership: the owner account has the migration's DDL privileges on the database, the
admin grants the application account its tables) it has a ``MAX_STATEMENT_TIME``.

Two real beats and a worker run with it for CRONSTORE_E2E_MANAGED_SECONDS (default 15)
on 1-second timers, a CronTask among them. Every fire of the window is delivered exactly
once, no task goes to ``error``, no log says ERROR or shows a traceback, beat prunes old
ledger rows with the role (its retention), and ``cronstore health`` says (PostgreSQL)
that beat cannot VACUUM the tables, while the owner's health says nothing of the kind.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from processes import beat, celery_env, deliveries, running, wait_for, window_delivered, worker

from celery_cronstore.store import Store
from celery_cronstore.store.schema import fire

sys.path.insert(0, str(Path(__file__).parents[1] / "store"))
from test_role_health import (
    MYSQL_STATEMENT_TIME,
    PG_ROLE_SETTINGS,
    Managed,
    managed_database,
    role_lines,
)

# serial: two beats and a worker must keep an unbroken 1-second grid.
pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.serial]

SECONDS = float(os.environ.get("CRONSTORE_E2E_MANAGED_SECONDS", "15"))
#: name: (task, timer, step in seconds).
TIMERS = {
    "plain-1s": ("e2e.record", "*:*:*", 1),
    "guarded-1s": ("e2e.guarded", "every 1s", 1),
    "plain-2s": ("e2e.record", "*:*:0/2", 2),
}
#: Log lines that would mean the role lacked something (or anything else went wrong).
BAD = ("Traceback", "ERROR", "CRITICAL", "permission denied", "InsufficientPrivilege", "failed")
#: MariaDB only, and not the role's doing (root's beats do it too): two beats claiming two
#: tasks due at one second move both ``next_run`` into the same gap of the due index, and
#: REPEATABLE READ's gap locks make InnoDB kill one of the claims (1213). Beat takes it as
#: a race lost (an info line, ``store.claims.deadlock``) and claims again at once.
DEADLOCK_LOST = "lost a deadlock with another beat's"


@pytest.mark.parametrize(
    "store_kind",
    [
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ],
)
def test_two_beats_and_a_worker_run_with_a_dml_only_role(
    request: pytest.FixtureRequest, redis_url: str, tmp_path: Path, store_kind: str
) -> None:
    admin_url = str(request.getfixturevalue(f"{store_kind}_url"))
    with managed_database(admin_url) as managed:
        if store_kind == "postgres":
            _check_the_pg_role(managed)
        else:
            _check_the_mysql_account(managed)
        store = Store(managed.app_url)  # the application role adds its tasks itself
        try:
            _run(store, managed, redis_url, tmp_path)
        finally:
            store.close()


def _check_the_pg_role(managed: Managed) -> None:
    """The application role is what a provider hands out: no superuser, no owner, no
    CREATE on the schema, the provider's timeouts."""
    engine = sa.create_engine(managed.app_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                sa.text(
                    "SELECT r.rolsuper, has_schema_privilege('public', 'CREATE') AS can_create,"
                    " (SELECT bool_or(pg_has_role(c.relowner, 'USAGE')) FROM pg_class c"
                    "   WHERE c.relname LIKE 'cronstore%') AS owns,"
                    " current_setting('statement_timeout') AS statement,"
                    " current_setting('idle_in_transaction_session_timeout') AS idle"
                    " FROM pg_roles r WHERE r.rolname = current_user"
                )
            ).one()
    finally:
        engine.dispose()
    assert (row.rolsuper, row.can_create, row.owns) == (False, False, False)
    assert (row.statement, row.idle) == tuple(PG_ROLE_SETTINGS.values())


def _check_the_mysql_account(managed: Managed) -> None:
    """The application account may only read and write rows, with the provider's limit."""
    engine = sa.create_engine(managed.app_url)
    try:
        with engine.connect() as conn:
            limit = conn.exec_driver_sql("SELECT @@max_statement_time").scalar_one()
            grants = " ".join(str(r[0]) for r in conn.exec_driver_sql("SHOW GRANTS"))
    finally:
        engine.dispose()
    assert float(limit) == MYSQL_STATEMENT_TIME
    assert "CREATE" not in grants
    assert "ALTER" not in grants
    assert "ALL PRIVILEGES" not in grants


def _run(store: Store, managed: Managed, redis_url: str, tmp_path: Path) -> None:
    for name, (task, timer, _) in TIMERS.items():
        store.add(name, task=task, timer=timer, args=[name])
    old = _old_history(store, managed)
    record = tmp_path / "record.jsonl"
    env = celery_env(
        redis_url, managed.app_url, record, E2E_QUEUE=f"managed-{uuid.uuid4().hex[:8]}"
    )
    began = time.monotonic()
    with running([worker("w1", pool="threads"), beat(), beat()], env, tmp_path):
        wait_for(lambda: len(deliveries(record)) >= 3, 40, "the first fires", tmp_path)
        start = store.now()
        time.sleep(SECONDS)
        end = store.now()
        wait_for(
            lambda: window_delivered(store, TIMERS, record, start, end),
            30,
            "the window's fires to be delivered",
            tmp_path,
        )
        wait_for(lambda: len(store.history(old)) == 1, 30, "beat's prune", tmp_path)
        app_health = _health(env, tmp_path)
        app_json = _health(env, tmp_path, "--json")
        owner_health = _health({**env, "E2E_STORE": managed.owner_url}, tmp_path)
        for name in TIMERS:
            store.disable(name)
        time.sleep(3)  # let anything published meanwhile arrive
    ran = time.monotonic() - began

    got = deliveries(record)
    per_id = Counter(d["task_id"] for d in got)
    assert {k: v for k, v in per_id.items() if v > 1} == {}, "delivered more than once"
    postgres = managed.app_url.startswith("postgresql")
    fires = {f.task_id: f for name in TIMERS for f in store.history(name, 10_000)}
    assert set(per_id) <= set(fires), "a delivery has no ledger row"
    in_window = 0
    for name, (_, _, step) in TIMERS.items():
        times = sorted(f.fire_time for f in fires.values() if f.name == name)
        assert len(times) == len(set(times))
        window = [t for t in times if start <= t <= end]
        expected = int((end - start).total_seconds() // step) - 1
        assert len(window) >= expected, f"{name}: {len(window)} fires, expected ~{expected}"
        gaps = [b - a for a, b in itertools.pairwise(window)]
        assert all(g == timedelta(seconds=step) for g in gaps), f"{name} lost fires: {gaps}"
        delivered = {fires[i].fire_time for i in per_id if fires[i].name == name}
        assert set(window) <= delivered, f"{name}: fires published but never delivered"
        in_window += len(window)
    # The CronTask guard started and finished its fires through the role.
    guarded = [f for f in fires.values() if f.name == "guarded-1s" and start <= f.fire_time <= end]
    assert {f.state for f in guarded} == {"succeeded"}
    assert [t.name for t in store.list() if t.error is not None] == []
    assert len({f.claimed_by for f in fires.values()}) >= 1
    lines = [
        f"{log.name}: {line}"
        for log in sorted(tmp_path.glob("*.log"))
        for line in log.read_text(errors="replace").splitlines()
    ]
    deadlocks = [line for line in lines if DEADLOCK_LOST in line]
    assert [line for line in lines if any(w in line for w in BAD)] == []
    # Health: the role may not VACUUM (informational, exit 0); the owner may.
    code, out = app_health
    assert code == 0, out
    if postgres:  # MariaDB: no ownership, and every grant is there: nothing to say
        (line,) = role_lines(out)
        assert line.startswith(f"vacuum: role {managed.app} is not the owner of cronstore_")
    else:
        assert role_lines(out) == []
    code, out = app_json
    assert code == 0, out
    role = json.loads(out)["role"]
    hot = ["cronstore_periodic_task", "cronstore_fire"] if postgres else []
    assert role["not_owned"] == hot
    assert (role["missing"], role["breaks_scheduling"]) == ([], False)
    code, out = owner_health
    assert code == 0, out
    assert out.startswith("healthy: ")
    assert role_lines(out) == []
    print(
        f"\nmanaged role ({'PostgreSQL' if postgres else 'MariaDB'}): {in_window} fires "
        f"in a {(end - start).total_seconds():.1f}s window "
        f"({len(got)} deliveries in all), each once; {ran:.1f}s with the processes running; "
        f"{len(deadlocks)} deadlock(s) lost and claimed again"
    )


def _old_history(store: Store, managed: Managed) -> str:
    """Add a disabled task with three fires 40 days old, before any other fire (the prune
    pass starts from the oldest row): beat's retention (30 days) deletes all but the
    newest, with the application role's DELETE. Return the task's name."""
    name = "old-history"
    store.add(name, task="e2e.record", timer="hourly", enabled=False)
    task_id = store.get(name).id
    base = store.now().replace(microsecond=0) - timedelta(days=40)
    rows = [
        {
            "periodic_task_id": task_id,
            "fire_time": base + timedelta(hours=n),
            "task_id": f"old-{n}",
            "state": "succeeded",
        }
        for n in range(3)
    ]
    owner = Store(managed.owner_url)
    try:
        with owner.begin() as conn:
            conn.execute(sa.insert(fire), rows)
    finally:
        owner.close()
    assert len(store.history(name)) == 3
    return name


def _health(env: dict[str, str], cwd: Path, *extra: str) -> tuple[int, str]:
    """Run ``cronstore health`` as a process; return its exit status and its output."""
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "e2e_app", "cronstore", *extra, "health"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr
