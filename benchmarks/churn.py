"""Beat's idle tick before and after ten million fires (issue 16, goal 2), PostgreSQL.

    .venv/bin/python benchmarks/churn.py [--rows 1000000] [--fires 10000000]
        [--tasks 10000] [--every 2000000] [--history 20]

Every fire moves its row's ``next_run`` (an indexed column, so the update is never HOT)
and writes a ledger row that changes state three times before it is pruned: dead index
entries pile up at the left edge of the due index, exactly where the idle query looks.
This script makes those writes without a broker, set-based, in a scratch database built
by the migrations (so migration 0005's autovacuum and index-cleanup settings apply):

* ``--rows`` background tasks (``_common.fill``, COPY) and ``--tasks`` churn tasks whose
  ``next_run`` lies an hour ahead, a millisecond apart (nothing is ever due);
* one *round* is ``--tasks`` fires: every churn task's ``next_run`` moves forward by the
  group's span (each keeps its place, the left edge moves right), its ``last_fire``,
  ``last_run`` and run count change, and one ledger row per fire is inserted ``claimed``
  and updated ``published``, ``started``, ``succeeded``; ledger rows older than
  ``--history`` rounds are deleted (the pruner's work);
* autovacuum runs as the server and the migration set it (nothing is vacuumed by hand
  after the fill).

One real ``celery_cronstore.Scheduler`` (in this process, ``cronstore_listen`` off) runs
through the churn, ticking after every round (so its housekeeping, pruning and, with
autovacuum off or behind, its own vacuum run as in a live beat). Before the first round
and every ``--every`` fires it is timed: 200 idle ticks (median, p95), 20
housekeeping ticks (median), and the idle query's own cost from ``EXPLAIN (ANALYZE,
BUFFERS)`` (index pages read), with the due index's size, the dead rows and the
autovacuum count of both tables. Figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from _common import fill, median, percentile, scratch_database, table, tick_ms  # noqa: E402
from celery import Celery  # noqa: E402

from celery_cronstore.beat.scheduler import Scheduler  # noqa: E402
from celery_cronstore.store import Store  # noqa: E402

UTC = timezone.utc
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
#: Churn tasks are named ``churn-<n>``; their ids are a contiguous range after the fill.
PREFIX = "churn-"

# One round, set-based (:lo, :hi: the churn tasks' id range; :round: the round number;
# :span: how far each next_run moves; :keep: rounds of history kept).
_MOVE = """
UPDATE cronstore_periodic_task
   SET next_run = next_run + make_interval(secs => :span),
       last_fire = next_run, last_run = now() AT TIME ZONE 'UTC',
       total_run_count = total_run_count + 1
 WHERE id BETWEEN :lo AND :hi
"""
_INSERT = """
INSERT INTO cronstore_fire (periodic_task_id, fire_time, task_id, state, claimed_by,
                            claimed_at, attempts)
SELECT id, last_fire, 'churn-' || :round || '-' || id, 'claimed', 'churn',
       now() AT TIME ZONE 'UTC', 1
  FROM cronstore_periodic_task WHERE id BETWEEN :lo AND :hi
"""
_STATE = "UPDATE cronstore_fire SET state = :to WHERE task_id LIKE :like AND state = :was"
_PRUNE = "DELETE FROM cronstore_fire WHERE task_id LIKE :like"

_IDLE_QUERY = """
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT next_run FROM cronstore_periodic_task
 WHERE enabled AND next_run IS NOT NULL ORDER BY next_run LIMIT 1
"""
_STATS = """
SELECT relname, n_dead_tup, autovacuum_count, vacuum_count
  FROM pg_stat_user_tables WHERE relname IN ('cronstore_periodic_task', 'cronstore_fire')
"""


def measure(scheduler: Scheduler, engine: sa.Engine) -> dict[str, Any]:
    """Time beat's idle and housekeeping ticks; read the index's state."""
    idle = tick_ms(scheduler, 200)  # the first may housekeep: left out below
    housekeeping = tick_ms(scheduler, 20, housekeep=True)
    with engine.connect() as conn:
        plan = conn.exec_driver_sql(_IDLE_QUERY).scalar_one()[0]
        size = conn.exec_driver_sql(
            "SELECT pg_relation_size('ix_cronstore_periodic_task_due')"
        ).scalar_one()
        stats = {r.relname: r for r in conn.exec_driver_sql(_STATS)}
    buffers = plan["Plan"].get("Shared Hit Blocks", 0) + plan["Plan"].get("Shared Read Blocks", 0)
    task, ledger = stats["cronstore_periodic_task"], stats["cronstore_fire"]
    return {
        "idle_ms": median(idle[1:]),
        "idle_p95_ms": percentile(idle[1:], 0.95),
        "housekeeping_ms": median(housekeeping),
        "query_ms": plan["Execution Time"],
        "query_pages": buffers,
        "due_index_mb": size / 1e6,
        "dead": f"{task.n_dead_tup:,} / {ledger.n_dead_tup:,}",
        "autovacuums": f"{task.autovacuum_count} + {task.vacuum_count} / "
        f"{ledger.autovacuum_count} + {ledger.vacuum_count}",
    }


def row(fires: int, m: dict[str, Any]) -> list[str]:
    return [
        f"{fires:,}",
        f"{m['idle_ms']:.3f} ({m['idle_p95_ms']:.3f})",
        f"{m['housekeeping_ms']:.2f}",
        f"{m['query_ms']:.3f} / {m['query_pages']}",
        f"{m['due_index_mb']:.1f}",
        m["dead"],
        m["autovacuums"],
    ]


def churn(args: argparse.Namespace) -> int:
    print(f"# celery-cronstore churn benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    with scratch_database("postgresql", args.pg_admin) as scratch:
        store = Store(scratch.url)
        store.upgrade()
        engine = store.engine
        with engine.connect() as conn:
            version = conn.exec_driver_sql("SHOW server_version").scalar_one()
        print(
            f"Python {platform.python_version()}, PostgreSQL {version}, {os.cpu_count()} CPUs; "
            f"{args.rows:,} background rows, {args.tasks:,} churn tasks, "
            f"{args.fires:,} fires, history {args.history} rounds"
        )
        now = store.now()
        began = time.perf_counter()
        fill(engine, 0, args.rows, now)
        start = now + timedelta(hours=1)
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO cronstore_periodic_task (name, task, timer_kind, timer, tz,"
                    " next_run, created_at, updated_at)"
                    " SELECT :prefix || g, 'bench.noop', 'interval', 'every 1h', 'UTC',"
                    " :start + make_interval(secs => g / 1000.0), :now, :now"
                    " FROM generate_series(1, :n) AS g"
                ),
                {
                    "prefix": PREFIX,
                    "start": start.replace(tzinfo=None),
                    "now": now.replace(tzinfo=None),
                    "n": args.tasks,
                },
            )
            lo, hi = conn.execute(
                sa.text("SELECT min(id), max(id) FROM cronstore_periodic_task WHERE name LIKE :p"),
                {"p": PREFIX + "%"},
            ).one()
            conn.exec_driver_sql("ANALYZE cronstore_periodic_task")
        print(f"  filled in {time.perf_counter() - began:.1f}s")

        app = Celery("cronstore-churn", broker="memory://", set_as_current=False)
        app.conf.update(
            cronstore_url=scratch.url,
            cronstore_sync_beat_schedule=False,
            cronstore_require_registered=False,
            cronstore_listen=False,
        )
        headers = [
            "fires so far",
            "idle tick median (p95), ms",
            "housekeeping tick, ms",
            "idle query ms / index pages",
            "due index MB",
            "dead rows (tasks / ledger)",
            "autovacuums + beat's vacuums (tasks / ledger)",
        ]
        # One beat runs through the whole churn (a tick after every round), as it would.
        scheduler = Scheduler(app, lazy=False)
        with engine.connect() as conn:
            autovacuum = conn.exec_driver_sql("SHOW autovacuum").scalar_one()
        print(f"  server autovacuum = {autovacuum}")
        rows = [row(0, measure(scheduler, engine))]
        print("  " + " | ".join(rows[-1]), flush=True)
        span = args.tasks / 1000.0
        rounds = args.fires // args.tasks
        every = max(1, args.every // args.tasks)
        began = time.perf_counter()
        for n in range(1, rounds + 1):
            with engine.begin() as conn:
                conn.execute(sa.text(_MOVE), {"lo": lo, "hi": hi, "span": span})
                conn.execute(sa.text(_INSERT), {"lo": lo, "hi": hi, "round": n})
            like = f"churn-{n}-%"
            for was, to in (
                ("claimed", "published"),
                ("published", "started"),
                ("started", "succeeded"),
            ):
                with engine.begin() as conn:
                    conn.execute(sa.text(_STATE), {"like": like, "was": was, "to": to})
            if n > args.history:
                with engine.begin() as conn:
                    conn.execute(sa.text(_PRUNE), {"like": f"churn-{n - args.history}-%"})
            scheduler.tick()
            if n % every == 0 or n == rounds:
                rate = n * args.tasks / (time.perf_counter() - began)
                rows.append(row(n * args.tasks, measure(scheduler, engine)))
                print("  " + " | ".join(rows[-1]) + f"   ({rate:,.0f} fires/s)", flush=True)
        vacuumer = scheduler.loop.chores.vacuumer if scheduler.loop else None
        vacuumed = vacuumer.vacuumed if vacuumer else []
        scheduler.close()
        store.close()
    print(f"  beat's own vacuums: {len(vacuumed)} ({', '.join(sorted(set(vacuumed))) or '-'})")
    print()
    print(table(headers, rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="background tasks")
    parser.add_argument("--fires", type=int, default=10_000_000)
    parser.add_argument("--tasks", type=int, default=10_000, help="churn tasks (fires/round)")
    parser.add_argument("--every", type=int, default=2_000_000, help="fires between looks")
    parser.add_argument("--history", type=int, default=20, help="rounds of ledger kept")
    parser.add_argument("--pg-admin", default=DEFAULT_PG, help="URL allowed to CREATE DATABASE")
    return churn(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
