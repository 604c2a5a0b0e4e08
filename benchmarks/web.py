"""Dashboard response times with 1,000,000 periodic tasks and a large ledger (a script).

    python benchmarks/web.py [--tasks 1000000] [--fires 2000000]
                             [--backends sqlite,postgresql] [--runs 7] [--with-indexes]

Rows are generated inside the database (a recursive CTE on SQLite, generate_series on
PostgreSQL), then each page is requested through the WSGI app (Werkzeug's test client,
so the figure includes routing, the queries and rendering, not the network) ``--runs``
times; the median and the slowest are printed. ``--with-indexes`` adds the two indexes
docs/web.md proposes and measures again. PostgreSQL runs in a scratch database dropped
at the end; SQLite in a temporary file.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import sqlalchemy as sa
from werkzeug.test import Client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from celery_cronstore.store import Store
from celery_cronstore.web import create_app
from harness.scratch import scratch_database

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
PAGES = [
    ("task list, first page (by name)", "/"),
    ("task list, sorted by next fire", "/?sort=next"),
    ("task list, sorted by task, descending", "/?sort=task&desc=1"),
    ("task list, page 200 (offset 9,950)", "/?page=200"),
    ("task list, disabled only", "/?enabled=no"),
    ("task list, owner type filter", "/?owner_type=tenant"),
    ("task list, owner TYPE:ID search", "/?q=tenant:4242"),
    ("task list, substring search (1 match)", "/?q=task-0777777"),
    ("task list, in error", "/?error=yes"),
    ("task page (history, chart)", "/task?name=task-0000042"),
    ("problems page", "/problems"),
]
INDEXES = [
    "CREATE INDEX ix_cronstore_periodic_task_error ON cronstore_periodic_task (id) "
    "WHERE error IS NOT NULL",
    "CREATE INDEX ix_cronstore_fire_state_time ON cronstore_fire (state, fire_time)",
]


def fill(store: Store, tasks: int, fires: int) -> None:
    pg = store.engine.dialect.name == "postgresql"
    base = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    if pg:
        series = "generate_series(1, {n}) AS s(i)"
        ts = "(timestamp '{base}' + ({x}) * interval '1 second')"
        prefix, true, false = "", "true", "false"
        pad = "lpad(i::text, 7, '0')"
    else:
        series = "s"
        ts = "datetime('{base}', ({x}) || ' seconds')"
        prefix = "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n}) "
        true, false = "1", "0"
        pad = "substr('0000000' || i, -7, 7)"

    def t(x: str) -> str:
        return ts.format(base=base, x=x)

    task_sql = (
        prefix.format(n=tasks)
        + "INSERT INTO cronstore_periodic_task (name, task, args, kwargs, options, timer_kind, "
        "timer, tz, enabled, owner_type, owner_id, description, source, next_run, "
        "total_run_count, misfire_policy, misfire_limit, overlap_policy, max_retries, error, "
        "version, created_at, updated_at) "
        f"SELECT 'task-' || {pad}, 'app.job' || (i % 1000), '[]', '{{}}', '{{}}', "
        "CASE WHEN i % 2 = 0 THEN 'cron' ELSE 'interval' END, "
        "CASE WHEN i % 2 = 0 THEN '*/5 * * * *' ELSE 'every 5m' END, "
        "CASE WHEN i % 3 = 0 THEN 'Europe/Berlin' ELSE 'UTC' END, "
        f"CASE WHEN i % 10 = 0 THEN {false} ELSE {true} END, "
        "CASE WHEN i % 10 = 1 THEN 'tenant' ELSE NULL END, "
        "CASE WHEN i % 10 = 1 THEN (i / 10)::text ELSE NULL END, '', 'api', ".replace(
            "::text", "" if not pg else "::text"
        )
        + f"CASE WHEN i % 10 = 0 THEN NULL ELSE {t('i % 86400')} END, "
        "0, 'run_once', 100, 'allow', 0, "
        "CASE WHEN i % 10000 = 5 THEN 'task not registered' ELSE NULL END, 1, "
        f"{t('0')}, {t('0')} FROM {series.format(n=tasks)}"
    )
    fire_sql = (
        prefix.format(n=fires)
        + "INSERT INTO cronstore_fire (periodic_task_id, fire_time, fire_count, task_id, state, "
        "attempts, claimed_by, claimed_at, published_at, node) "
        f"SELECT (i % {tasks}) + 1, {t(f'-300 * (i / {tasks})')}, 1, 'f-' || i, "
        "CASE WHEN i % 50 = 0 THEN 'missed' ELSE 'succeeded' END, "
        "CASE WHEN i % 50 = 0 THEN 0 WHEN i % 997 = 0 THEN 2 ELSE 1 END, 'beat@a', "
        f"{t(f'-300 * (i / {tasks})')}, {t(f'-300 * (i / {tasks}) + 1')}, "
        f"'worker@b' FROM {series.format(n=fires)}"
    )
    if pg:  # psycopg reads % as a placeholder
        task_sql, fire_sql = task_sql.replace("%", "%%"), fire_sql.replace("%", "%%")
    with store.begin() as conn:
        conn.exec_driver_sql(task_sql)
        conn.exec_driver_sql(fire_sql)
        if pg:
            conn.exec_driver_sql("ANALYZE cronstore_periodic_task")
            conn.exec_driver_sql("ANALYZE cronstore_fire")
        else:
            conn.exec_driver_sql("ANALYZE")


def measure(client: Client, runs: int) -> None:
    for label, path in PAGES:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            response = client.get(path)
            times.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200, (path, response.status_code)
        print(f"  {label:42s} median {statistics.median(times):7.1f} ms   max {max(times):7.1f} ms")


def run(url: str, tasks: int, fires: int, runs: int, with_indexes: bool) -> None:
    store = Store(url)
    store.upgrade()
    start = time.perf_counter()
    fill(store, tasks, fires)
    print(f"{store.engine.dialect.name}: {tasks:,} tasks, {fires:,} ledger rows "
          f"written in {time.perf_counter() - start:.0f} s")  # fmt: skip
    client = Client(create_app(store))
    client.get("/")  # warm up: templates, the connection pool
    measure(client, runs)
    if with_indexes:
        with store.begin() as conn:
            for ddl in INDEXES:
                conn.exec_driver_sql(ddl)
        print("  with the proposed indexes:")
        measure(client, runs)
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--fires", type=int, default=2_000_000)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--with-indexes", action="store_true")
    parser.add_argument("--postgres-url", default=DEFAULT_PG)
    args = parser.parse_args()
    for backend in args.backends.split(","):
        if backend == "sqlite":
            with tempfile.TemporaryDirectory() as tmp:
                url = f"sqlite:///{tmp}/bench.sqlite"
                run(url, args.tasks, args.fires, args.runs, args.with_indexes)
        elif backend == "postgresql":
            database = contextlib.ExitStack()
            try:
                scratch = database.enter_context(
                    scratch_database(args.postgres_url, prefix="bench_web")
                )
            except sa.exc.OperationalError as exc:
                print(f"postgresql: skipped, not reachable ({type(exc).__name__})")
                continue
            with database:
                run(scratch.url, args.tasks, args.fires, args.runs, args.with_indexes)
        else:
            raise SystemExit(f"unknown backend {backend!r}")


if __name__ == "__main__":
    main()
