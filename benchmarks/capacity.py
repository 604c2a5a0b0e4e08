"""Capacity figures for the scaling plan (issue 16, goal 5): what one PostgreSQL, one beat
process and one Redis can take, per fire, measured here and extrapolated.

    .venv/bin/python benchmarks/capacity.py [--tasks 100000] [--fires 200000] [--due 20000]
        [--target-rate 10000] [--target-tasks 10000000] [--history-days 30]

In a scratch PostgreSQL database (``bench_capacity_*``, dropped at the end) with the real
schema (``Store.upgrade()``: every index, the foreign key, the triggers):

1. **Ledger insert ceiling**: ``--fires`` fire rows (as a claim writes them) into
   ``cronstore_fire``, one transaction per 500 rows, three ways on one connection:
   SQLAlchemy's executemany (what the claim does: multi-row ``INSERT ... VALUES`` pages),
   one ``INSERT ... SELECT FROM unnest(arrays)`` per batch, and ``COPY``. Rows/s, and the
   CPU of the PostgreSQL backend (``/proc/<pid>/stat``) per row.
2. **WAL per fire**, per statement of a fire's life, from ``EXPLAIN (ANALYZE, WAL)`` on
   set-based statements over 10,000 fires (this backend's WAL only, whatever else runs on
   the server): ledger insert, ``next_run`` update, mark published, prune delete. Plus
   ``pg_current_wal_lsn()`` around the COPY (server-wide: quiet server only).
3. **Claim + mark published per fire** with the real ``Claimer`` (batches of 500) over
   ``--due`` due rows, no broker: beat's CPU and wall, and PostgreSQL's backends' CPU.
4. **Redis publish ceiling of one process**: the real ``Dispatcher`` (Celery's protocol-2
   message, kombu's Redis transport, a pipeline per 250) and, for the floor, a redis-py
   pipeline pushing the same bytes; Redis server CPU per message.
5. **Sizes**: bytes per periodic task and per ledger row (heap + indexes).

Then the extrapolation to ``--target-rate`` fires/s over ``--target-tasks`` schedules:
cores of PostgreSQL, of beat and of Redis, WAL MB/s, and the ledger's rows and size for
``--history-days``. See docs/scaling.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

UTC = timezone.utc
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS = "redis://127.0.0.1:6379/13"
QUEUE = "cronstore-bench-capacity"
BATCH = 500
FIRE_COLUMNS = (
    "periodic_task_id",
    "fire_time",
    "task_id",
    "state",
    "claimed_by",
    "lease_until",
    "attempts",
    "claimed_at",
)


def _clk() -> float:
    return float(os.sysconf("SC_CLK_TCK"))


def pid_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) used so far by these processes."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                raw = f.read()
        except OSError:
            continue
        rest = raw[raw.rindex(")") + 2 :].split()
        total += (float(rest[11]) + float(rest[12])) / _clk()
    return total


def comm_cpu(name: str) -> float:
    total = 0.0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/comm", encoding="ascii", errors="replace") as f:
                    if f.read().strip() != name:
                        continue
            except OSError:
                continue
            total += pid_cpu([int(pid)])
    return total


def backends(conn: Any) -> list[int]:
    """PIDs of every backend connected to this database."""
    rows = conn.exec_driver_sql(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
    ).all()
    return [int(r[0]) for r in rows]


def fire_rows(task_ids: list[int], count: int, start: datetime) -> Iterator[tuple[Any, ...]]:
    """``count`` claimed fires over the tasks, one per (task, minute)."""
    n = len(task_ids)
    now = start.replace(tzinfo=None)
    lease = now + timedelta(seconds=30)
    for i in range(count):
        yield (
            task_ids[i % n],
            now + timedelta(minutes=i // n),
            str(uuid.uuid4()),
            "claimed",
            "capacity:1:abcdef",
            lease,
            1,
            now,
        )


def fill_tasks(engine: Any, count: int, next_run: datetime, prefix: str) -> list[int]:
    """COPY ``count`` daily tasks with ``next_run``; return their ids."""
    from celery_cronstore.timers import parse_timer

    timer = parse_timer("0 0 * * *")
    now = datetime.now(UTC).replace(tzinfo=None)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        cols = "name, task, timer_kind, timer, tz, kwargs, next_run, created_at, updated_at"
        with cursor.copy(f"COPY cronstore_periodic_task ({cols}) FROM STDIN") as copy:
            for i in range(count):
                copy.write_row(
                    (
                        f"{prefix}-{i:08d}",
                        "bench.noop",
                        timer.kind,
                        str(timer),
                        "UTC",
                        f'{{"n":{i}}}',
                        next_run,
                        now,
                        now,
                    )
                )
        raw.commit()
        cursor.execute(
            "SELECT id FROM cronstore_periodic_task WHERE name LIKE %s ORDER BY id",
            (f"{prefix}-%",),
        )
        ids = [int(r[0]) for r in cursor.fetchall()]
        raw.commit()
        return ids
    finally:
        raw.close()


def vacuum(engine: Any) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE cronstore_periodic_task")
        conn.exec_driver_sql("VACUUM ANALYZE cronstore_fire")


def checkpoint(engine: Any) -> None:
    """A checkpoint first, so every measured statement pays its full-page images alike."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("CHECKPOINT")


def _aware(value: Any) -> Any:
    return value.replace(tzinfo=UTC) if isinstance(value, datetime) else value


# -- 1. ledger insert ceiling ------------------------------------------------------------------


def insert_ceiling(engine: Any, ids: list[int], fires: int) -> dict[str, dict[str, float]]:
    import sqlalchemy as sa

    from celery_cronstore.store.schema import fire

    out: dict[str, dict[str, float]] = {}
    start = datetime.now(UTC) + timedelta(days=1)
    for way in ("executemany", "unnest", "copy"):
        with engine.begin() as conn:
            conn.exec_driver_sql("TRUNCATE cronstore_fire")
        vacuum(engine)
        checkpoint(engine)
        rows = list(fire_rows(ids, fires, start))
        with engine.connect() as conn:
            pid = int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
            lsn0 = conn.exec_driver_sql("SELECT pg_current_wal_lsn()").scalar_one()
            conn.commit()
            cpu0, t0 = pid_cpu([pid]), time.perf_counter()
            for b in range(0, fires, BATCH):
                chunk = rows[b : b + BATCH]
                if way == "executemany":  # the column type wants aware datetimes
                    chunk = [tuple(_aware(v) for v in r) for r in chunk]
                    conn.execute(
                        sa.insert(fire), [dict(zip(FIRE_COLUMNS, r, strict=True)) for r in chunk]
                    )
                elif way == "unnest":
                    cols = list(zip(*chunk, strict=True))
                    conn.exec_driver_sql(
                        f"INSERT INTO cronstore_fire ({', '.join(FIRE_COLUMNS)}) SELECT * FROM"
                        " unnest(%s::bigint[], %s::timestamp[], %s::text[], %s::text[],"
                        " %s::text[], %s::timestamp[], %s::int[], %s::timestamp[])",
                        tuple(list(c) for c in cols),
                    )
                else:
                    dbapi = conn.connection.dbapi_connection
                    assert dbapi is not None
                    with (
                        dbapi.cursor() as cursor,
                        cursor.copy(
                            f"COPY cronstore_fire ({', '.join(FIRE_COLUMNS)}) FROM STDIN"
                        ) as copy,
                    ):
                        for r in chunk:
                            copy.write_row(r)
                conn.commit()
            wall = time.perf_counter() - t0
            cpu = pid_cpu([pid]) - cpu0
            wal = conn.exec_driver_sql(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn0,)
            ).scalar_one()
            conn.commit()
        out[way] = {
            "rows_s": fires / wall,
            "pg_cpu_us": cpu / fires * 1e6,
            "wal_bytes_server": float(wal) / fires,
        }
        print(f"  insert {way}: {json.dumps(out[way])}", file=sys.stderr, flush=True)
    return out


# -- 2. WAL per statement of a fire's life --------------------------------------------------------


def wal_per_fire(engine: Any, ids: list[int], n: int = 10_000) -> dict[str, dict[str, float]]:
    """EXPLAIN (ANALYZE, WAL) of each set-based step over ``n`` fires (after a checkpoint,
    and again without one: the first touch of a page after a checkpoint logs it whole)."""
    out: dict[str, dict[str, float]] = {}
    few = ids[:n]
    start = (datetime.now(UTC) + timedelta(days=30)).replace(tzinfo=None)
    steps = {
        "ledger insert": (
            "INSERT INTO cronstore_fire (periodic_task_id, fire_time, task_id, state,"
            " claimed_by, lease_until, attempts, claimed_at)"
            " SELECT id, %(t)s, gen_random_uuid()::text, 'claimed', 'capacity:1:abcdef',"
            " %(t)s, 1, %(t)s FROM cronstore_periodic_task WHERE id = ANY(%(ids)s)"
        ),
        "next_run update": (
            "UPDATE cronstore_periodic_task SET next_run = next_run + interval '1 day',"
            " last_fire = %(t)s, total_run_count = total_run_count + 1, version = version + 1"
            " WHERE id = ANY(%(ids)s)"
        ),
        "mark published": (
            "UPDATE cronstore_fire SET state = 'published', published_at = %(t)s"
            " WHERE periodic_task_id = ANY(%(ids)s) AND fire_time = %(t)s AND state = 'claimed'"
        ),
        "prune delete": (
            "DELETE FROM cronstore_fire WHERE periodic_task_id = ANY(%(ids)s) AND fire_time = %(t)s"
        ),
    }
    for label, after_checkpoint in (("after a checkpoint", True), ("steady", False)):
        for name, sql in steps.items():
            if after_checkpoint:
                checkpoint(engine)
            with engine.connect() as conn:
                plan = conn.exec_driver_sql(
                    f"EXPLAIN (ANALYZE, WAL, FORMAT JSON) {sql}",
                    {"t": start + timedelta(minutes=int(label == "steady")), "ids": few},
                ).scalar_one()
                conn.commit()
            top = (plan if isinstance(plan, list) else json.loads(plan))[0]
            node = top["Plan"]
            out[f"{name} ({label})"] = {
                "bytes": node.get("WAL Bytes", 0) / n,
                "fpi": node.get("WAL FPI", 0) / n,
                "records": node.get("WAL Records", 0) / n,
                "ms": top.get("Execution Time", 0.0) / n,
            }
        if label == "steady":
            break
        # Undo: the rows are planned back, the fires gone (so "steady" redoes the same).
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "DELETE FROM cronstore_fire WHERE periodic_task_id = ANY(%(ids)s)", {"ids": few}
            )
    for k, v in out.items():
        print(f"  WAL {k}: {json.dumps(v)}", file=sys.stderr, flush=True)
    return out


# -- 3. claim + mark published per fire --------------------------------------------------------


def claim_cost(store: Any, due: int) -> dict[str, float]:
    import sqlalchemy as sa

    from celery_cronstore.store import Claimer

    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    fill_tasks(store.engine, due, midnight.replace(tzinfo=None), "due")
    vacuum(store.engine)
    claimer = Claimer(store, "capacity:1:abcdef", batch_size=BATCH)
    claimer.claim_due()  # warm: pool, statement caches (claims 500)
    with store.engine.connect() as conn:
        pids = backends(conn)
    cpu0, t0, pg0 = time.process_time(), time.perf_counter(), pid_cpu(pids)
    claimed = 0
    while True:
        result = claimer.claim_due()
        if not result.claims:
            break
        claimer.mark_published(result.claims)
        claimed += len(result.claims)
    wall = time.perf_counter() - t0
    beat_cpu = time.process_time() - cpu0
    with store.engine.connect() as conn:
        pids = sorted(set(pids) | set(backends(conn)))
        published = conn.execute(
            sa.text("SELECT count(*) FROM cronstore_fire WHERE state = 'published'")
        ).scalar_one()
    pg_cpu = pid_cpu(pids) - pg0
    claimer.close()
    out = {
        "fires": float(claimed),
        "published": float(published),
        "wall_us": wall / claimed * 1e6,
        "beat_cpu_us": beat_cpu / claimed * 1e6,
        "pg_cpu_us": pg_cpu / claimed * 1e6,
    }
    print(f"  claim: {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


# -- 4. Redis publish ceiling --------------------------------------------------------------------


def publish_ceiling(redis_url: str, count: int) -> dict[str, float]:
    import redis as redis_lib
    from celery import Celery

    from celery_cronstore.beat.dispatch import Dispatcher
    from celery_cronstore.records import Claim

    app = Celery("cronstore-capacity", broker=redis_url, set_as_current=False)
    app.conf.update(task_default_queue=QUEUE, broker_connection_retry_on_startup=True)
    client = redis_lib.Redis.from_url(redis_url)
    client.delete(QUEUE)
    fire_time = datetime.now(UTC).replace(microsecond=0)
    claims = [
        Claim(
            periodic_task_id=i,
            name=f"due-{i:08d}",
            task="bench.noop",
            args=[],
            kwargs={"n": i},
            options={},
            fire_time=fire_time,
            task_id=str(uuid.uuid4()),
            attempt=1,
            interval=86_400.0,
        )
        for i in range(count)
    ]
    with app.connection_for_write() as connection:
        producer = app.amqp.Producer(connection, auto_declare=False)
        dispatcher = Dispatcher(app, producer)
        with dispatcher.batch(250):  # warm: connection, queue declared
            dispatcher.send(claims[0])
        client.delete(QUEUE)
        redis0, cpu0, t0 = comm_cpu("redis-server"), time.process_time(), time.perf_counter()
        for b in range(0, count, 250):
            with dispatcher.batch(250):
                for claim in claims[b : b + 250]:
                    dispatcher.send(claim)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        redis_cpu = comm_cpu("redis-server") - redis0
    sent = int(client.llen(QUEUE))
    payloads = client.lrange(QUEUE, 0, -1)
    client.delete(QUEUE)
    redis1, t1 = comm_cpu("redis-server"), time.perf_counter()
    for b in range(0, len(payloads), 250):
        pipe = client.pipeline(transaction=False)
        for p in payloads[b : b + 250]:
            pipe.lpush(QUEUE, p)
        pipe.execute()
    floor_wall = time.perf_counter() - t1
    floor_redis = comm_cpu("redis-server") - redis1
    client.delete(QUEUE)
    client.close()
    out = {
        "sent": float(sent),
        "bytes": float(len(payloads[0])) if payloads else 0.0,
        "dispatcher_msgs_s": count / wall,
        "dispatcher_cpu_us": cpu / count * 1e6,
        "redis_cpu_us": redis_cpu / count * 1e6,
        "pipeline_msgs_s": len(payloads) / floor_wall if payloads else 0.0,
        "pipeline_redis_cpu_us": floor_redis / max(1, len(payloads)) * 1e6,
    }
    print(f"  publish: {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


# -- 5. sizes -------------------------------------------------------------------------------------


def sizes(engine: Any) -> dict[str, float]:
    with engine.connect() as conn:
        row = conn.exec_driver_sql(
            "SELECT pg_total_relation_size('cronstore_periodic_task'),"
            " (SELECT count(*) FROM cronstore_periodic_task),"
            " pg_total_relation_size('cronstore_fire'), (SELECT count(*) FROM cronstore_fire),"
            " pg_relation_size('cronstore_fire')"
        ).one()
    return {
        "task_bytes": row[0] / max(1, row[1]),
        "fire_bytes": row[2] / max(1, row[3]),
        "fire_heap_bytes": row[4] / max(1, row[3]),
        "fire_rows": float(row[3]),
    }


# -- the plan's arithmetic ----------------------------------------------------------------


def extrapolate(f: dict[str, Any], args: argparse.Namespace) -> list[list[str]]:
    rate = args.target_rate
    claim, pub, ins = f["claim"], f["publish"], f["insert"]
    wal = f["wal"]
    wal_fire = sum(v["bytes"] for k, v in wal.items() if k.endswith("(steady)"))
    wal_fire_cp = sum(v["bytes"] for k, v in wal.items() if k.endswith("(after a checkpoint)"))
    prune_us = f["prune_us"]
    size = f["sizes"]
    ledger_rows = rate * 86_400 * args.history_days
    rows = [
        [
            "PostgreSQL CPU: claim + mark published",
            f"{claim['pg_cpu_us']:.0f} µs/fire",
            f"{rate * claim['pg_cpu_us'] / 1e6:.1f} cores",
        ],
        [
            "PostgreSQL CPU: pruning (beat's per-row rule, 1,000-row batches)",
            f"{prune_us['pg']:.0f} µs/row",
            f"{rate * prune_us['pg'] / 1e6:.1f} cores",
        ],
        [
            "beat CPU: claim + mark published",
            f"{claim['beat_cpu_us']:.0f} µs/fire",
            f"{rate * claim['beat_cpu_us'] / 1e6:.1f} cores",
        ],
        [
            "beat CPU: build + publish (Dispatcher)",
            f"{pub['dispatcher_cpu_us']:.0f} µs/fire",
            f"{rate * pub['dispatcher_cpu_us'] / 1e6:.1f} cores",
        ],
        [
            "beat CPU: pruning",
            f"{prune_us['beat']:.0f} µs/row",
            f"{rate * prune_us['beat'] / 1e6:.1f} cores",
        ],
        [
            "Redis CPU (one thread)",
            f"{pub['redis_cpu_us']:.1f} µs/message",
            f"{rate * pub['redis_cpu_us'] / 1e6:.2f} of its one core",
        ],
        [
            "WAL (insert + next_run + published + delete)",
            f"{wal_fire:,.0f} B/fire ({wal_fire_cp:,.0f} after a checkpoint)",
            f"{rate * wal_fire / 2**20:.1f} MB/s ({rate * wal_fire_cp / 2**20:.1f})",
        ],
        [
            "ledger inserts, one connection (executemany / unnest / COPY)",
            f"{ins['executemany']['rows_s']:,.0f} / {ins['unnest']['rows_s']:,.0f} / "
            f"{ins['copy']['rows_s']:,.0f} rows/s",
            f"{rate / ins['executemany']['rows_s']:.2f} / {rate / ins['unnest']['rows_s']:.2f} / "
            f"{rate / ins['copy']['rows_s']:.2f} connections busy",
        ],
        [
            f"ledger kept for {args.history_days:g} days",
            f"{size['fire_bytes']:.0f} B/row (heap + 5 indexes)",
            f"{ledger_rows / 1e9:,.1f} billion rows, "
            f"{ledger_rows * size['fire_bytes'] / 2**40:,.1f} TB",
        ],
        [
            f"{args.target_tasks:,} periodic tasks",
            f"{size['task_bytes']:.0f} B/row (heap + indexes)",
            f"{args.target_tasks * size['task_bytes'] / 2**30:,.1f} GB",
        ],
    ]
    return rows


def prune_cost(store: Any, ids: list[int], rows: int) -> dict[str, float]:
    """Beat's pruner over ``rows`` old ended fires of the tasks: CPU per row deleted."""
    from celery_cronstore.store.retention import Pruner

    with store.begin() as conn:
        conn.exec_driver_sql("TRUNCATE cronstore_fire")
    old = datetime.now(UTC) - timedelta(days=40)
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        with cursor.copy(
            "COPY cronstore_fire (periodic_task_id, fire_time, task_id, state, published_at)"
            " FROM STDIN"
        ) as copy:
            n = len(ids)
            for i in range(rows):
                at = (old + timedelta(minutes=i // n)).replace(tzinfo=None)
                copy.write_row((ids[i % n], at, f"old-{i}", "published", at))
        raw.commit()
    finally:
        raw.close()
    vacuum(store.engine)
    pruner = Pruner(store.db)
    with store.engine.connect() as conn:
        pids = backends(conn)
    pruner.step(timedelta(days=30))  # warm
    with store.engine.connect() as conn:
        pids = sorted(set(pids) | set(backends(conn)))
    cpu0, pg0, t0 = time.process_time(), pid_cpu(pids), time.perf_counter()
    deleted = 0
    for _ in range(20):
        step = pruner.step(timedelta(days=30))
        deleted += step.deleted
        if step.done:
            break
    wall = time.perf_counter() - t0
    with store.engine.connect() as conn:
        pids = sorted(set(pids) | set(backends(conn)))
    out = {
        "deleted": float(deleted),
        "wall": wall / max(1, deleted) * 1e6,
        "beat": (time.process_time() - cpu0) / max(1, deleted) * 1e6,
        "pg": (pid_cpu(pids) - pg0) / max(1, deleted) * 1e6,
    }
    print(f"  prune: {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg-admin", default=DEFAULT_PG, help="URL allowed to CREATE DATABASE")
    parser.add_argument("--redis", default=DEFAULT_REDIS)
    parser.add_argument("--tasks", type=int, default=100_000, help="tasks the fires refer to")
    parser.add_argument("--fires", type=int, default=200_000, help="rows per insert method")
    parser.add_argument("--due", type=int, default=20_000, help="fires claimed by the Claimer")
    parser.add_argument("--messages", type=int, default=20_000, help="messages published")
    parser.add_argument("--target-rate", type=int, default=10_000)
    parser.add_argument("--target-tasks", type=int, default=10_000_000)
    parser.add_argument("--history-days", type=float, default=30.0)
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args(argv)

    import celery
    import sqlalchemy as sa

    sys.path.insert(0, HERE)
    from _common import table

    from celery_cronstore.store import Store
    from harness.scratch import scratch_database

    engine = sa.create_engine(args.pg_admin)
    with engine.connect() as conn:
        version = str(conn.exec_driver_sql("SHOW server_version").scalar_one()).split()[0]
        settings = dict(
            conn.exec_driver_sql(
                "SELECT name, setting FROM pg_settings WHERE name IN ('synchronous_commit',"
                " 'wal_level', 'full_page_writes', 'wal_compression', 'shared_buffers')"
            ).all()
        )
    engine.dispose()
    print(f"# celery-cronstore capacity, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    shown = ", ".join(f"{k}={v}" for k, v in settings.items())
    print(
        f"Python {platform.python_version()}, celery {celery.__version__}, SQLAlchemy "
        f"{sa.__version__}, PostgreSQL {version} ({shown}),"
        f" {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    figures: dict[str, Any] = {}
    with scratch_database(args.pg_admin, prefix="bench_capacity") as scratch:
        store = Store(scratch.url)
        store.upgrade()
        parked = datetime(2099, 1, 1)
        ids = fill_tasks(store.engine, args.tasks, parked, "bg")
        vacuum(store.engine)
        figures["insert"] = insert_ceiling(store.engine, ids, args.fires)
        figures["sizes"] = sizes(store.engine)
        with store.begin() as conn:
            conn.exec_driver_sql("TRUNCATE cronstore_fire")
        figures["wal"] = wal_per_fire(store.engine, ids)
        # 20 old fires per task: the rule keeps each task's newest, the rest may go.
        figures["prune_us"] = prune_cost(store, ids[:1000], 20_000)
        with store.begin() as conn:
            conn.exec_driver_sql("TRUNCATE cronstore_fire")
        figures["claim"] = claim_cost(store, args.due)
        store.close()
    figures["publish"] = publish_ceiling(args.redis, args.messages)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)

    ins = figures["insert"]
    print("\n## measured here\n")
    print(
        table(
            (
                "ledger insert (500 rows a transaction)",
                "rows/s",
                "PostgreSQL CPU µs/row",
                "WAL B/row (server)",
            ),
            [
                [k, f"{v['rows_s']:,.0f}", f"{v['pg_cpu_us']:.1f}", f"{v['wal_bytes_server']:,.0f}"]
                for k, v in ins.items()
            ],
        )
    )
    print()
    print(
        table(
            (
                "statement, 10,000 fires",
                "WAL B/fire",
                "full-page images/fire",
                "records/fire",
                "µs/fire",
            ),
            [
                [
                    k,
                    f"{v['bytes']:,.0f}",
                    f"{v['fpi']:.2f}",
                    f"{v['records']:.1f}",
                    f"{v['ms'] * 1e3:.1f}",
                ]
                for k, v in figures["wal"].items()
            ],
        )
    )
    c, p, pr = figures["claim"], figures["publish"], figures["prune_us"]
    print(
        f"\nclaim + mark published (Claimer, batches of {BATCH}, {c['fires']:,.0f} fires):"
        f" {c['wall_us']:.0f} µs/fire wall, beat CPU {c['beat_cpu_us']:.0f} µs,"
        f" PostgreSQL CPU {c['pg_cpu_us']:.0f} µs"
        f"\nprune (beat's Pruner, {pr['deleted']:,.0f} rows): {pr['wall']:.0f} µs/row wall,"
        f" beat CPU {pr['beat']:.0f} µs, PostgreSQL CPU {pr['pg']:.0f} µs"
        f"\npublish, one process ({p['bytes']:,.0f}-byte messages): Dispatcher"
        f" {p['dispatcher_msgs_s']:,.0f} msgs/s ({p['dispatcher_cpu_us']:.0f} µs CPU each,"
        f" Redis {p['redis_cpu_us']:.1f} µs); redis-py pipeline {p['pipeline_msgs_s']:,.0f}"
        f" msgs/s (Redis {p['pipeline_redis_cpu_us']:.1f} µs)"
        f"\nsizes: {figures['sizes']['task_bytes']:.0f} B per periodic task,"
        f" {figures['sizes']['fire_bytes']:.0f} B per ledger row"
        f" ({figures['sizes']['fire_heap_bytes']:.0f} heap)"
    )
    print(
        f"\n## extrapolated: {args.target_rate:,} fires/s, {args.target_tasks:,} tasks,"
        f" {args.history_days:g} days of history\n"
    )
    print(table(("resource", "per unit, measured", "needed"), extrapolate(figures, args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
