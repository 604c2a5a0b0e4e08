"""Five ``celery -A app cronstore migrate`` at once (one per replica, as Kubernetes init
containers start them) all exit 0 and leave the schema at head (issue 30).

Before the migration lock, two migrators created the same table at the same instant and
one failed: PostgreSQL "duplicate key value violates unique constraint
pg_type_typname_nsp_index", MariaDB "Table ... already exists"; the pods crash-looped.
Each test starts real processes of the real command against a database of its own (a
fresh scratch database per round), holds them at a start line until all five have
imported the app, then lets them go together.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import MYSQL_URL, POSTGRES_URL, SCRATCH_PREFIX, need_service

from celery_cronstore.errors import StoreError
from celery_cronstore.store import Store, migrate
from celery_cronstore.store.migrate import _PG_LOCK_KEY as PG_KEY
from celery_cronstore.store.schema import VERSION_TABLE
from harness.scratch import scratch_database

REPO = Path(__file__).resolve().parents[2]
MIGRATORS = 5
ROUNDS = 3
#: The upgrade case starts from the first schema: every later migration then runs at once.
EARLIER = "0001"

#: The app each migrator imports; it waits at the start line (file ``go``) once imported.
APP = """\
import os
import time
from pathlib import Path

from celery import Celery

app = Celery("mig_app", broker="memory://")
app.conf.cronstore_url = os.environ["MIG_STORE"]

line = Path(os.environ["MIG_LINE"])
(line / f"ready-{os.getpid()}").touch()
while not (line / "go").exists():
    time.sleep(0.005)
"""


@contextmanager
def database(backend: str, tmp_path: Path, round_: int) -> Iterator[str]:
    """Yield the URL of an empty database of this round's own."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / f'round{round_}.sqlite'}"
        return
    admin, port, name = {
        "postgres": (POSTGRES_URL, 5432, "PostgreSQL"),
        "mysql": (MYSQL_URL, 3306, "MariaDB"),
    }[backend]
    need_service(name, admin, port)
    with scratch_database(admin, prefix=SCRATCH_PREFIX) as scratch:
        yield scratch.url


def migrate_at_once(url: str, line: Path) -> list[subprocess.CompletedProcess[str]]:
    """Run MIGRATORS ``celery -A mig_app cronstore migrate`` released at one instant."""
    line.mkdir()
    (line / "mig_app.py").write_text(APP)
    path = os.pathsep.join([str(line), str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "MIG_STORE": url, "MIG_LINE": str(line)}
    command = [sys.executable, "-m", "celery", "-A", "mig_app", "cronstore", "migrate"]
    procs = [
        subprocess.Popen(
            command, cwd=line, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(MIGRATORS)
    ]
    try:
        deadline = time.monotonic() + 120
        while len(list(line.glob("ready-*"))) < MIGRATORS:
            assert time.monotonic() < deadline, "the migrators did not reach the start line"
            assert all(p.poll() is None for p in procs), "a migrator ended before the start"
            time.sleep(0.02)
        (line / "go").touch()
        done = []
        for proc in procs:
            out, err = proc.communicate(timeout=180)
            done.append(subprocess.CompletedProcess(command, proc.returncode, out, err))
        return done
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def assert_at_head(url: str, runs: list[subprocess.CompletedProcess[str]]) -> None:
    head = migrate.head_revision()
    for run in runs:
        assert run.returncode == 0, f"a migrator exited {run.returncode}:\n{run.stderr}"
        assert "Traceback" not in run.stderr
        assert f"schema at revision {head}" in run.stdout
    store = Store(url)
    try:
        store.check_schema()  # raises unless the schema is at head
        with store.engine.connect() as conn:
            versions = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).all()
            tables = set(sa.inspect(conn).get_table_names())
        assert versions == [(head,)]
        assert {"cronstore_periodic_task", "cronstore_fire", "cronstore_beat"} <= tables
        store.add("works", task="t.x", timer="every 1h")  # the schema takes a task
        assert [t.name for t in store.list()] == ["works"]
    finally:
        store.close()


BACKENDS = [
    pytest.param("sqlite"),
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_five_migrators_at_once_on_a_fresh_database_all_succeed(
    backend: str, tmp_path: Path
) -> None:
    for round_ in range(ROUNDS):
        with database(backend, tmp_path, round_) as url:
            runs = migrate_at_once(url, tmp_path / f"line{round_}")
            assert_at_head(url, runs)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_five_migrators_at_once_upgrading_an_old_schema_all_succeed(
    backend: str, tmp_path: Path
) -> None:
    for round_ in range(ROUNDS):
        with database(backend, tmp_path, round_) as url:
            old = Store(url)
            try:
                migrate.upgrade(old.engine, EARLIER)
                with old.engine.connect() as conn:
                    assert migrate.current_revision(conn) == EARLIER
            finally:
                old.close()
            runs = migrate_at_once(url, tmp_path / f"line{round_}")
            assert_at_head(url, runs)


@contextmanager
def migration_lock_held(backend: str, store: Store) -> Iterator[None]:
    """Hold the lock a migration in progress holds, on a connection of ``store``'s."""
    if backend == "sqlite":
        with store.begin():  # BEGIN IMMEDIATE: the file's write lock
            yield
        return
    with store.engine.connect() as conn:
        if backend == "postgres":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_KEY})
        else:
            name = f"cronstore-migrate:{store.engine.url.database}"
            assert conn.execute(sa.text("SELECT GET_LOCK(:n, 0)"), {"n": name}).scalar() == 1
        yield
        conn.rollback()  # ends the PostgreSQL lock; the session's end frees GET_LOCK


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_migrator_that_cannot_get_the_lock_in_time_says_so(backend: str, tmp_path: Path) -> None:
    """A lock held longer than the migrator's timeout is one clear error, after the wait."""
    with database(backend, tmp_path, 0) as url:
        holder = Store(url)
        waiter = Store(url)
        try:
            holder.upgrade()
            with migration_lock_held(backend, holder):
                started = time.monotonic()
                with pytest.raises(StoreError) as caught:
                    migrate.upgrade(waiter.engine, lock_timeout=0.5)
                waited = time.monotonic() - started
            assert 0.4 < waited < 10
            message = str(caught.value)
            assert "held the migration lock for more than 0.5 s" in message
            assert "\n" not in message
            holder.close()  # the lock is free again: the next migrator finds nothing to do
            migrate.upgrade(waiter.engine, lock_timeout=5)
            waiter.check_schema()
        finally:
            holder.close()
            waiter.close()
