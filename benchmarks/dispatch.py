"""Dispatch benchmark: 10,000 fires due at once, published by beat, against the floor.

For each backend it prints, measured in the same run:

* **claim SQL**: the statements a claim needs for ``--due`` fires, done set-based in
  one transaction (lock the due rows, insert their ledger rows, move their ``next_run``,
  mark the fires published), then undone;
* **broker floor**: the very messages beat sent, pushed again by a redis-py pipeline
  (RabbitMQ: published again through one py-amqp channel in confirm mode, then every
  confirm awaited);
* **floor**: the sum of the two;
* **dispatch**: a warm ``celery_cronstore.Scheduler`` ticking until the broker holds
  every message (and the ledger says published);
* **ratio**: dispatch / floor.

    python benchmarks/dispatch.py [--backends sqlite,postgresql] [--due 10000]
                                  [--rounds 3] [--broker redis|amqp|redis,amqp]
                                  [--background 1000]
                                  [--profile out.prof] [--phases]

``--phases``: also print where the last round's dispatch spent its time, phase by phase
(``benchmarks/_phases.py``: wall time inside beat's claim, plan, ledger, send and mark
functions, per fire).

Messages go to the queue ``cronstore-bench-dispatch`` (a Redis list of that name, or a
RabbitMQ queue), emptied before and after. See docs/benchmarks.md for the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

UTC = timezone.utc
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
BROKERS = {
    "redis": "redis://127.0.0.1:6379/15",
    "amqp": "amqp://guest:guest@127.0.0.1:5672//",
}
QUEUE = "cronstore-bench-dispatch"
#: Rows not due (their tasks fall due in hours), besides the due ones.
BACKGROUND = 1_000


class Broker:
    """The benchmark's view of one broker: count, read, empty and re-push its queue."""

    def __init__(self, kind: str, url: str) -> None:
        self.kind = kind
        self.url = url
        if kind == "redis":
            import redis

            self.redis = redis.Redis.from_url(url)
        else:
            import amqp  # type: ignore[import-untyped]

            host = url.split("@", 1)[1].split("/", 1)[0]
            self.amqp = amqp.Connection(host=host, userid="guest", password="guest")
            self.amqp.connect()
            self.channel = self.amqp.channel()
            self.channel.queue_declare(QUEUE, durable=True, auto_delete=False)

    def count(self) -> int:
        if self.kind == "redis":
            return int(self.redis.llen(QUEUE))
        return int(self.channel.queue_declare(QUEUE, passive=True).message_count)

    def take(self) -> list[Any]:
        """Remove and return every message (raw Redis payloads, or py-amqp messages)."""
        if self.kind == "redis":
            raw = self.redis.lrange(QUEUE, 0, -1)
            self.redis.delete(QUEUE)
            return list(raw)
        out = []
        while (message := self.channel.basic_get(QUEUE, no_ack=True)) is not None:
            out.append(message)
        return out

    def empty(self) -> None:
        if self.kind == "redis":
            self.redis.delete(QUEUE)
        else:
            self.channel.queue_purge(QUEUE)

    def push(self, messages: list[Any]) -> float:
        """Send ``messages`` again the cheapest way the broker allows; return seconds."""
        if self.kind == "redis":
            t = time.perf_counter()
            pipe = self.redis.pipeline(transaction=False)
            for payload in messages:
                pipe.lpush(QUEUE, payload)
            pipe.execute()
            return time.perf_counter() - t
        import amqp  # type: ignore[import-untyped]

        channel = self.amqp.channel()
        channel.confirm_select()
        acked = [0]

        def on_ack(tag: int, multiple: bool) -> None:
            acked[0] = max(acked[0], tag)

        channel.events["basic_ack"].add(on_ack)
        t = time.perf_counter()
        for message in messages:
            again = amqp.Message(message.body, **message.properties)
            channel.basic_publish(again, exchange="", routing_key=QUEUE)
        while acked[0] < len(messages):  # every publish confirmed (acks come in order)
            self.amqp.drain_events(timeout=30)
        elapsed = time.perf_counter() - t
        channel.close()
        return elapsed

    def close(self) -> None:
        self.empty()
        if self.kind == "redis":
            self.redis.close()
        else:
            self.channel.queue_delete(QUEUE)
            self.amqp.close()


def claim_sql(engine: sa.Engine, due: int) -> float:
    """Time the claim's SQL for ``due`` fires done set-based; undo it; return seconds."""
    from celery_cronstore.store import bulk
    from celery_cronstore.store.schema import fire, periodic_task

    pt, f = periodic_task.c, fire.c
    postgres = engine.dialect.name == "postgresql"
    with engine.connect() as conn:
        t = time.perf_counter()
        with conn.begin():
            now = datetime.now(UTC)
            query = sa.select(pt.id, pt.version, pt.next_run).where(
                pt.enabled == sa.true(), pt.next_run <= now
            )
            if postgres:
                query = query.with_for_update(skip_locked=True)
            rows = conn.execute(query.order_by(pt.next_run).limit(due)).all()
            ledger = [
                {
                    "periodic_task_id": r.id,
                    "fire_time": r.next_run,
                    "task_id": f"bench-floor-{r.id}",
                    "state": "claimed",
                    "claimed_by": "floor",
                    "claimed_at": now,
                    "lease_until": now + timedelta(seconds=30),
                    "attempts": 1,
                }
                for r in rows
            ]
            bulk.insert(conn, fire, ledger)  # PostgreSQL: one COPY, as beat's claim
            moves = [(r.id, r.next_run + timedelta(minutes=5), r.next_run) for r in rows]
            if postgres:  # one statement: the moves as arrays, unnested by the server
                conn.execute(
                    sa.text(
                        "UPDATE cronstore_periodic_task AS t SET next_run = v.next,"
                        " last_fire = v.last, total_run_count = t.total_run_count + 1,"
                        " version = t.version + 1"
                        " FROM unnest(CAST(:ids AS BIGINT[]), CAST(:nexts AS TIMESTAMP[]),"
                        " CAST(:lasts AS TIMESTAMP[])) AS v(id, next, last) WHERE t.id = v.id"
                    ),
                    {
                        "ids": [m[0] for m in moves],
                        "nexts": [m[1].replace(tzinfo=None) for m in moves],
                        "lasts": [m[2].replace(tzinfo=None) for m in moves],
                    },
                )
            else:  # the driver's executemany (sqlite3 loops in C)
                conn.execute(
                    sa.update(periodic_task)
                    .where(pt.id == sa.bindparam("b_id"))
                    .values(
                        next_run=sa.bindparam("b_next"),
                        last_fire=sa.bindparam("b_last"),
                        total_run_count=pt.total_run_count + 1,
                        version=pt.version + 1,
                    ),
                    [{"b_id": i, "b_next": n, "b_last": last} for i, n, last in moves],
                )
            conn.execute(
                sa.update(fire)
                .where(f.claimed_by == "floor", f.state == "claimed")
                .values(state="published", published_at=now)
            )
        elapsed = time.perf_counter() - t
        with conn.begin():  # undo: the rows are due again, the ledger is empty
            conn.execute(sa.delete(fire).where(f.claimed_by == "floor"))
            conn.execute(
                sa.update(periodic_task)
                .where(pt.name.like("due-%"))
                .values(next_run=sa.bindparam("b_next"), last_fire=None, total_run_count=0),
                [{"b_next": r.next_run} for r in rows[:1]],
            )
    if len(rows) != due:
        raise SystemExit(f"claim floor saw {len(rows)} due rows, not {due}")
    return elapsed


def make_app(store_url: str, broker: Broker, fast: bool = True) -> Any:
    from celery import Celery

    app = Celery("cronstore-dispatch-bench", broker=broker.url, set_as_current=True)
    app.conf.update(
        cronstore_url=store_url,
        cronstore_sync_beat_schedule=False,
        cronstore_require_registered=False,  # the bench tasks are sent by name
        cronstore_fast_path=fast,
        broker_connection_retry_on_startup=True,
        task_default_queue=QUEUE,
        # As the fault harness (harness/app.py): RabbitMQ waits for each publish's ack.
        broker_transport_options={"confirm_publish": True},
    )
    return app


def dispatch_once(
    store: Any,
    scheduler: Any,
    broker: Broker,
    args: argparse.Namespace,
    profile: str | None,
    phases: list[list[str]] | None = None,
) -> tuple[float, list[Any]]:
    """Make ``--due`` rows due, tick ``scheduler`` until the broker holds every message;
    return the seconds and the messages (taken off the broker), the ledger checked."""
    from _common import due_rows

    from celery_cronstore.store.schema import fire, periodic_task

    with store.begin() as conn:
        conn.execute(sa.insert(periodic_task), due_rows(args.due, store.now(conn)))
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    from _phases import rows, timed

    with timed() if phases is not None else contextlib.nullcontext() as spent:
        t = time.perf_counter()
        count = 0
        while count < args.due and time.perf_counter() - t < args.timeout:
            scheduler.tick()
            count = broker.count()
        elapsed = time.perf_counter() - t
    if phases is not None and spent is not None:
        phases.extend(rows(*spent, args.due, elapsed))
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    if count < args.due:
        raise SystemExit(f"timeout: {count} of {args.due} messages sent")
    with store.engine.connect() as conn:
        published = conn.execute(
            sa.select(sa.func.count()).select_from(fire).where(fire.c.state == "published")
        ).scalar_one()
    if published != args.due:
        raise SystemExit(f"ledger: {published} of {args.due} fires published")
    messages = broker.take()
    broker.empty()
    with store.begin() as conn:
        conn.execute(sa.delete(fire))
        conn.execute(sa.delete(periodic_task).where(periodic_task.c.name.like("due-%")))
    return elapsed, messages


def bench(backend: str, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    from _common import due_rows, fill, scratch_database

    from celery_cronstore.beat.scheduler import Scheduler
    from celery_cronstore.store import Store
    from celery_cronstore.store.schema import periodic_task

    broker = Broker(kind, BROKERS[kind])
    broker.empty()
    figures: dict[str, list[float]] = {"sql": [], "broker": [], "dispatch": [], "kombu": []}
    phases: list[list[str]] = []
    size = 0
    with scratch_database(backend, args.pg_admin) as scratch:
        store = Store(scratch.url)
        store.upgrade()
        now = store.now()
        fill(store.engine, 0, args.background, now)
        # Beat as shipped (the fast path on) and with every fire through kombu's producer,
        # interleaved round by round.
        schedulers = {
            "dispatch": Scheduler(make_app(scratch.url, broker, fast=True), lazy=False),
            "kombu": Scheduler(make_app(scratch.url, broker, fast=False), lazy=False),
        }
        for scheduler in schedulers.values():
            scheduler.tick()  # open the store and the broker connection
        for round_ in range(args.rounds):
            with store.begin() as conn:
                conn.execute(sa.insert(periodic_task), due_rows(args.due, store.now(conn)))
            figures["sql"].append(claim_sql(store.engine, args.due))
            with store.begin() as conn:
                conn.execute(sa.delete(periodic_task).where(periodic_task.c.name.like("due-%")))
            for which, scheduler in schedulers.items():
                last = round_ == args.rounds - 1 and which == "dispatch"
                elapsed, messages = dispatch_once(
                    store,
                    scheduler,
                    broker,
                    args,
                    args.profile if last else None,
                    phases if last and args.phases else None,
                )
                figures[which].append(elapsed)
                if which == "dispatch":
                    size = len(messages[0]) if kind == "redis" else len(messages[0].body)
                    figures["broker"].append(broker.push(messages))
                    broker.empty()
        for scheduler in schedulers.values():
            scheduler.close()
        store.close()
    broker.close()
    out: dict[str, Any] = {k: statistics.median(v) for k, v in figures.items()}
    out["size"] = size
    out["all"] = figures
    out["phases"] = phases
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--broker", default="redis", help="redis, amqp or both (comma)")
    parser.add_argument("--pg-admin", default=DEFAULT_PG, help="URL allowed to CREATE DATABASE")
    parser.add_argument("--due", type=int, default=10_000, help="fires due at once")
    parser.add_argument("--rounds", type=int, default=3, help="measurements (median shown)")
    parser.add_argument(
        "--background", type=int, default=BACKGROUND, help="stored rows that are not due"
    )
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--profile", metavar="FILE", help="cProfile the last dispatch")
    parser.add_argument(
        "--phases", action="store_true", help="print where the last dispatch spent its time"
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, HERE)
    import celery
    from _common import table

    print(f"# celery-cronstore dispatch benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(
        f"Python {platform.python_version()}, celery {celery.__version__}, "
        f"SQLAlchemy {sa.__version__}, {os.cpu_count()} CPUs; {args.due:,} due fires among "
        f"{args.background:,} rows not due, "
        f"median of {args.rounds} rounds\n"
    )
    rows = []
    phase_tables = []
    for kind in [k.strip() for k in args.broker.split(",") if k.strip()]:
        for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
            r = bench(backend, kind, args)
            if r["phases"]:
                phase_tables.append((f"{backend}/{kind}", r["phases"]))
            print(f"  {backend}/{kind}: {r['all']}", file=sys.stderr, flush=True)
            floor = r["sql"] + r["broker"]
            rows.append(
                [
                    backend,
                    "redis" if kind == "redis" else "rabbitmq (confirms)",
                    f"{r['size']:,}",
                    f"{r['sql']:.3f}",
                    f"{r['broker']:.3f}",
                    f"{floor:.3f}",
                    f"{r['kombu']:.3f}",
                    f"{r['dispatch']:.3f}",
                    f"{r['kombu'] / floor:.2f}x",
                    f"{r['dispatch'] / floor:.2f}x",
                ]
            )
    headers = (
        "store",
        "broker",
        "message bytes",
        "claim SQL s",
        "broker floor s",
        "floor s",
        "dispatch s, kombu path",
        "dispatch s",
        "ratio, kombu path",
        "ratio",
    )
    print(table(headers, rows))
    for name, phases in phase_tables:
        print(f"\nWhere the last dispatch's time went, {name} ({args.due:,} fires):\n")
        print(table(("phase", "ms", "µs per fire", "calls"), phases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
