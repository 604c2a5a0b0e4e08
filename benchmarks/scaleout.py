"""Scale-out benchmark (issue 16, goal 5): beat replicas sharing a burst, and a sustained rate.

Two modes, each in a scratch PostgreSQL database (``bench_scaleout_*``, dropped at the end)
with Redis as the broker (only the list ``--queue`` of the given database is touched):

**burst** (default): ``--rows`` periodic tasks, ``--due`` of them falling due at the same
instant. For each replica count in ``--replicas`` (default ``1,3``), that many beat
processes are started (``--child``: each builds a real ``celery_cronstore.Scheduler`` and
runs Celery's beat loop, ``tick()`` then sleep), the due rows are made due by one UPDATE,
and the clock runs until Redis holds every message. Printed: wall seconds, fires/s, the
ratio to one replica, each replica's share, where each replica's time went (claim,
publish, mark published, CPU), the CPU of PostgreSQL and Redis, and the doubles: ledger
rows per (task, fire time), messages per task id (the messages are read back, then the
list is deleted).

**sustain**: ``--rate`` fires per second for ``--sustain-minutes`` with retention on
(``cronstore_history_days`` = ``--history-seconds``): ``--rate`` x 60 tasks with calendar
timers ``*:*:SS``, ``--rate`` of them on each second of the minute, on top of the
background rows. Every ``--report-every`` seconds it prints the fires/s Redis received,
the ledger's rows and size, publish lateness, beat's idle and due tick and its RSS; at the
end whether the ledger stayed bounded and tick and memory flat. The list is drained every
second (its task ids are kept to count doubles).

    .venv/bin/python benchmarks/scaleout.py [--rows 1000000] [--due 100000] [--replicas 1,3]
    .venv/bin/python benchmarks/scaleout.py --mode sustain [--rate 1000] [--sustain-minutes 10]

Run full-size measurements alone on the machine (``flock /tmp/heavy.lock ...`` here).
See docs/scaling.md for the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

UTC = timezone.utc
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS = "redis://127.0.0.1:6379/14"
QUEUE = "cronstore-bench-scaleout"
#: Background rows are planned 6 to 23 hours ahead: beat re-plans at start every row
#: planned more than a day beyond its timer's next fire (``store.sweep``), and that
#: work must not run inside the measurement.
BACKGROUND_QUARTERS = 68
TASK_COLUMNS = (
    "name",
    "task",
    "timer_kind",
    "timer",
    "tz",
    "kwargs",
    "next_run",
    "created_at",
    "updated_at",
)


# -- the child: one beat replica ---------------------------------------------------------------


#: Set by SIGTERM in a child: its loop ends after the current tick (at most a poll).
_stopping = threading.Event()


def _stop(signum: int, frame: Any) -> None:
    _stopping.set()


def child(args: argparse.Namespace) -> int:
    """Run one beat replica until SIGTERM; print its figures as JSON on the last line."""
    from celery import Celery

    from celery_cronstore.beat.scheduler import Scheduler

    sys.path.insert(0, HERE)
    from _common import median, percentile, rss_mb

    app = Celery("cronstore-scaleout", broker=args.redis, set_as_current=True)
    app.conf.update(
        cronstore_url=args.child,
        cronstore_sync_beat_schedule=False,
        cronstore_require_registered=False,  # the bench tasks are sent by name
        cronstore_history_days=args.history_seconds / 86_400,
        broker_connection_retry_on_startup=True,
        task_default_queue=args.queue,
    )
    scheduler = Scheduler(app, lazy=False)
    totals: Counter[str] = Counter()
    # A tick that only publishes claims held until their time (``claim_ahead``, a burst's
    # lead) is "publish", not "idle": an idle tick neither claims, publishes nor housekeeps.
    window: dict[str, list[float]] = {"idle": [], "due": [], "publish": [], "housekeeping": []}
    state = {"claimed": False, "housekept": False, "published": False}
    marks: dict[str, float] = {}
    cpu_start = [time.process_time()]

    loop = scheduler.loop
    while loop is None:  # as tick() would: a failed start is tried again
        print("beat start failed; again", file=sys.stderr)
        time.sleep(0.5)
        with contextlib.suppress(Exception):
            scheduler.setup_schedule()
        loop = scheduler.loop
    claimer = loop.claimer
    inner_tick = loop.tick
    inner_claim = claimer.claim_due
    inner_publish = loop.sender.publish
    inner_mark = claimer.mark_published
    inner_housekeeping = loop.chores.run

    def tick() -> float:
        state["claimed"] = state["housekept"] = state["published"] = False
        t = time.perf_counter()
        try:
            return float(inner_tick())
        finally:
            ms = (time.perf_counter() - t) * 1e3
            kind = (
                "housekeeping"
                if state["housekept"]
                else "due"
                if state["claimed"]
                else "publish"
                if state["published"]
                else "idle"
            )
            window[kind].append(ms)

    def claim_due(*a: Any, **kw: Any) -> Any:
        state["claimed"] = True
        t = time.perf_counter()
        result = inner_claim(*a, **kw)
        totals["claim_s"] += time.perf_counter() - t
        totals["batches"] += 1
        totals["rows"] += result.rows
        totals["claims"] += len(result.claims)
        totals["empty"] += not result.claims
        totals["conflicts"] += result.conflict
        if result.claims:
            marks.setdefault("first_claim", time.time())
            marks["last_claim"] = time.time()
        return result

    def publish(claims: Any, mark: Any = None) -> bool:
        state["published"] = state["published"] or bool(claims)
        t = time.perf_counter()
        try:
            return bool(inner_publish(claims, mark))
        finally:
            totals["publish_s"] += time.perf_counter() - t
            if claims:
                marks["last_publish"] = time.time()
                marks["cpu_to_last_publish"] = time.process_time() - cpu_start[0]

    def mark_published(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return inner_mark(*a, **kw)
        finally:
            totals["mark_s"] += time.perf_counter() - t

    def housekeeping(stalled_since: Any) -> bool:
        state["housekept"] = True
        return bool(inner_housekeeping(stalled_since))

    loop.tick = tick  # type: ignore[method-assign]
    claimer.claim_due = claim_due  # type: ignore[method-assign]
    loop.sender.publish = publish  # type: ignore[method-assign]
    claimer.mark_published = mark_published  # type: ignore[method-assign]
    loop.chores.run = housekeeping  # type: ignore[method-assign]

    scheduler.tick()  # open everything before the parent starts the clock
    for values in window.values():
        values.clear()
    signal.signal(signal.SIGTERM, _stop)
    print("ready", flush=True)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    cpu_start[0] = cpu0
    next_report = time.monotonic() + args.report_every
    reports = open(args.stats, "a", encoding="utf-8") if args.stats else None  # noqa: SIM115
    claims_at_report = 0
    while not _stopping.is_set():  # celery.beat.Service.start
        interval = scheduler.tick()
        if reports is not None and time.monotonic() >= next_report:
            next_report += args.report_every
            line = {
                "t": time.time(),
                "rss_mb": rss_mb(),
                "cpu_s": time.process_time() - cpu0,
                "claims": totals["claims"] - claims_at_report,
                "idle_n": len(window["idle"]),
                "idle_median_ms": median(window["idle"]),
                "due_n": len(window["due"]),
                "due_median_ms": median(window["due"]),
                "due_p95_ms": percentile(window["due"], 0.95),
                "housekeeping_max_ms": max(window["housekeeping"], default=float("nan")),
            }
            claims_at_report = totals["claims"]
            reports.write(json.dumps(line) + "\n")
            reports.flush()
            for values in window.values():
                values.clear()
        if interval and interval > 0.0 and not _stopping.is_set():
            time.sleep(interval)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    out = {
        **{k: 0.0 for k in ("claim_s", "publish_s", "mark_s", "batches", "rows", "claims")},
        **{k: 0.0 for k in ("empty", "conflicts")},
        **totals,
        **marks,
        "cpu_s": time.process_time() - cpu0,
        "wall_s": time.perf_counter() - wall0,
        "rss_mb": rss_mb(),
        "node": scheduler.node,
    }
    scheduler.close()
    if reports is not None:
        reports.close()
    print(json.dumps(out), flush=True)
    return 0


class Replica:
    """One beat child process, seen from the parent."""

    def __init__(self, url: str, args: argparse.Namespace, stats: str | None = None) -> None:
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            url,
            "--redis",
            args.redis,
            "--queue",
            args.queue,
            "--history-seconds",
            str(args.history_seconds),
            "--report-every",
            str(args.report_every),
        ]
        if stats:
            command += ["--stats", stats]
        self.stats = stats
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)

    def wait_ready(self, timeout: float = 60.0) -> None:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.strip() == "ready":
                return
            if not line and self.proc.poll() is not None:
                raise SystemExit(f"beat replica exited with {self.proc.returncode}")
        raise SystemExit("beat replica not ready in time")

    def stop(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        lines = [line for line in out.strip().splitlines() if line.startswith("{")]
        if not lines:
            raise SystemExit(f"beat replica said nothing (exit {self.proc.returncode})")
        return dict(json.loads(lines[-1]))

    def rss_mb(self) -> float:
        try:
            with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def last_report(self) -> dict[str, Any] | None:
        if not self.stats or not os.path.exists(self.stats):
            return None
        with open(self.stats, encoding="utf-8") as f:
            lines = f.read().strip().splitlines()
        return dict(json.loads(lines[-1])) if lines else None


# -- CPU accounting (the whole machine, PostgreSQL's and Redis's processes) ---------------------


def _ticks() -> float:
    return float(os.sysconf("SC_CLK_TCK"))


def machine_cpu() -> tuple[float, float]:
    """Return (busy seconds, total seconds) summed over every CPU since boot."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / _ticks(), sum(fields) / _ticks()


def process_cpu(names: Iterable[str]) -> float:
    """Return the CPU seconds (user + system) used so far by every process named so."""
    wanted = set(names)
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                raw = f.read()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        if comm.split(":")[0].split(" ")[0] not in wanted:
            continue
        rest = raw[raw.rindex(")") + 2 :].split()
        total += (float(rest[11]) + float(rest[12])) / _ticks()
    return total


class CpuMeter:
    """CPU used between :meth:`start` and :meth:`stop` by the machine, PostgreSQL, Redis."""

    def start(self) -> None:
        self.machine = machine_cpu()
        self.pg = process_cpu(["postgres"])
        self.redis = process_cpu(["redis-server"])
        self.t = time.perf_counter()

    def stop(self) -> dict[str, float]:
        busy, _ = machine_cpu()
        wall = time.perf_counter() - self.t
        return {
            "busy_cores": (busy - self.machine[0]) / wall,
            "pg_s": process_cpu(["postgres"]) - self.pg,
            "redis_s": process_cpu(["redis-server"]) - self.redis,
        }


# -- filling -------------------------------------------------------------------------------


def copy_rows(engine: Any, rows: Iterable[tuple[Any, ...]]) -> None:
    """COPY ``rows`` (TASK_COLUMNS, naive UTC datetimes) into the periodic tasks."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        columns = ", ".join(TASK_COLUMNS)
        with cursor.copy(f"COPY cronstore_periodic_task ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        raw.commit()
        cursor.close()
    finally:
        raw.close()


def vacuum(engine: Any) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in ("cronstore_periodic_task", "cronstore_fire", "cronstore_beat"):
            conn.exec_driver_sql(f"VACUUM ANALYZE {table}")


def parked(now: datetime) -> datetime:
    """The daily tasks' next fire: tomorrow's midnight (naive UTC), under a day ahead."""
    midnight = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return (midnight + timedelta(days=1)).replace(tzinfo=None)


def background(start: int, stop: int, now: datetime) -> Iterator[tuple[Any, ...]]:
    """``_common.background_rows`` (under a day ahead) with empty args, in naive UTC."""
    sys.path.insert(0, HERE)
    from _common import background_rows

    for row in background_rows(start, stop, now, BACKGROUND_QUARTERS):
        yield (*row[:5], "{}", *(t.replace(tzinfo=None) for t in row[5:]))


def burst_rows(count: int, now: datetime) -> Iterator[tuple[Any, ...]]:
    """Yield ``count`` daily tasks (``0 0 * * *`` UTC) planned for tomorrow's midnight."""
    from celery_cronstore.timers import parse_timer

    sys.path.insert(0, HERE)
    from _common import TASK_NAMES

    timer = parse_timer("0 0 * * *")
    stamp = now.replace(tzinfo=None)
    for i in range(count):
        yield (
            f"due-{i:07d}",
            TASK_NAMES[i % len(TASK_NAMES)],
            timer.kind,
            str(timer),
            "UTC",
            f'{{"n":{i}}}',
            parked(now),
            stamp,
            stamp,
        )


def sustain_rows(rate: int, start: datetime) -> Iterator[tuple[Any, ...]]:
    """Yield ``rate`` x 60 tasks, ``rate`` on each second of the minute (``*:*:SS``).

    ``next_run`` is each task's first grid point after ``start`` (naive UTC).
    """
    from celery_cronstore.timers import parse_timer

    sys.path.insert(0, HERE)
    from _common import TASK_NAMES

    timers = [parse_timer(f"*:*:{s:02d}") for s in range(60)]
    base = start.replace(tzinfo=None, microsecond=0)
    stamp = start.replace(tzinfo=None)
    for i in range(rate * 60):
        second = i % 60
        first = base.replace(second=second)
        if first <= base:
            first += timedelta(minutes=1)
        timer = timers[second]
        yield (
            f"tick-{i:07d}",
            TASK_NAMES[i % len(TASK_NAMES)],
            timer.kind,
            str(timer),
            "UTC",
            f'{{"n":{i}}}',
            first,
            stamp,
            stamp,
        )


def prepare(url: str, args: argparse.Namespace, count: int) -> Any:
    """Create the schema and the background rows; return the Store."""
    from celery_cronstore.store import Store

    store = Store(url)
    store.upgrade()
    t = time.perf_counter()
    copy_rows(store.engine, background(0, count, store.now()))
    print(
        f"  filled {count:,} background rows in {time.perf_counter() - t:.1f}s",
        file=sys.stderr,
        flush=True,
    )
    return store


# -- burst ----------------------------------------------------------------------------------


def task_ids(redis: Any, queue: str) -> Counter[str]:
    """Read every message of ``queue`` (in chunks) and count them per task id."""
    ids: Counter[str] = Counter()
    length = int(redis.llen(queue))
    for start in range(0, length, 10_000):
        for raw in redis.lrange(queue, start, start + 9_999):
            ids[json.loads(raw)["headers"]["id"]] += 1
    return ids


def burst_round(store: Any, url: str, replicas: int, args: argparse.Namespace) -> dict[str, Any]:
    import redis as redis_lib
    import sqlalchemy as sa

    broker = redis_lib.Redis.from_url(args.redis)
    broker.delete(args.queue)
    with store.begin() as conn:  # the due rows parked again, the ledger empty
        conn.exec_driver_sql("DELETE FROM cronstore_fire")
        conn.exec_driver_sql("DELETE FROM cronstore_beat")
        conn.execute(
            sa.text(
                "UPDATE cronstore_periodic_task SET next_run = :parked, last_fire = NULL,"
                " total_run_count = 0 WHERE name LIKE 'due-%'"
            ),
            {"parked": parked(store.now())},
        )
    vacuum(store.engine)
    beats = [Replica(url, args) for _ in range(replicas)]
    for beat in beats:
        beat.wait_ready()
    meter = CpuMeter()
    # Today's midnight (UTC): each due row's one fire, hours late (misfire policy run_once).
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    t_update = time.time()
    with store.begin() as conn:
        conn.execute(
            sa.text("UPDATE cronstore_periodic_task SET next_run = :due WHERE name LIKE 'due-%'"),
            {"due": midnight.replace(tzinfo=None)},
        )
    t0 = time.time()  # committed: every replica is woken by the NOTIFY
    meter.start()
    count = 0
    while count < args.due and time.time() - t0 < args.timeout:
        time.sleep(0.01)
        count = int(broker.llen(args.queue))
    t_end = time.time()
    cpu = meter.stop()
    wall = t_end - t0
    deadline = time.time() + 30
    published = 0
    while time.time() < deadline:  # mark_published follows the last publish
        with store.engine.connect() as conn:
            published = conn.execute(
                sa.text("SELECT count(*) FROM cronstore_fire WHERE state = 'published'")
            ).scalar_one()
        if published >= args.due:
            break
        time.sleep(0.1)
    figures = [beat.stop() for beat in beats]
    with store.engine.connect() as conn:
        ledger = conn.execute(
            sa.text(
                "SELECT count(*), count(DISTINCT (f.periodic_task_id, f.fire_time)),"
                " count(DISTINCT f.periodic_task_id), count(DISTINCT f.task_id)"
                " FROM cronstore_fire f JOIN cronstore_periodic_task t"
                " ON t.id = f.periodic_task_id WHERE t.name LIKE 'due-%'"
            )
        ).one()
        by_state = dict(
            conn.execute(sa.text("SELECT state, count(*) FROM cronstore_fire GROUP BY state")).all()
        )
        by_beat = dict(
            conn.execute(
                sa.text("SELECT claimed_by, count(*) FROM cronstore_fire GROUP BY claimed_by")
            ).all()
        )
    ids = task_ids(broker, args.queue)
    broker.delete(args.queue)
    broker.close()
    messages = sum(ids.values())
    return {
        "replicas": replicas,
        "update_s": t0 - t_update,
        "wall_s": wall,
        "sent": count,
        "rate": count / wall,
        "messages": messages,
        "unique_ids": len(ids),
        "doubled_redis": messages - len(ids),
        "ledger_rows": ledger[0],
        "ledger_doubled": ledger[0] - ledger[2],  # one fire per due task expected
        "ledger_task_ids": ledger[3],
        "by_state": by_state,
        "by_beat": sorted(by_beat.values(), reverse=True),
        "published": published,
        "beats": figures,
        "cpu": cpu,
        "t0": t0,
    }


def burst(args: argparse.Namespace) -> int:
    sys.path.insert(0, HERE)
    from _common import table

    from harness.scratch import scratch_database

    counts = [int(x) for x in args.replicas.split(",") if x.strip()]
    results: list[dict[str, Any]] = []
    with scratch_database(args.pg_admin, prefix="bench_scaleout", keep=args.keep) as scratch:
        store = prepare(scratch.url, args, args.rows - args.due)
        t = time.perf_counter()
        copy_rows(store.engine, burst_rows(args.due, store.now()))
        vacuum(store.engine)
        print(
            f"  {args.due:,} due rows + VACUUM ANALYZE in {time.perf_counter() - t:.1f}s",
            file=sys.stderr,
            flush=True,
        )
        for round_ in range(args.rounds):
            for replicas in counts:
                r = burst_round(store, scratch.url, replicas, args)
                results.append(r)
                print(
                    f"  round {round_ + 1}, {replicas} replica(s): {json.dumps(r, default=str)}",
                    file=sys.stderr,
                    flush=True,
                )
        store.close()

    base = [r["rate"] for r in results if r["replicas"] == 1]
    one = sum(base) / len(base) if base else float("nan")
    rows = []
    for r in results:
        beats = r["beats"]
        n = r["replicas"]
        share = " / ".join(f"{b['claims']:,}" for b in sorted(beats, key=lambda b: -b["claims"]))
        rows.append(
            [
                str(n),
                f"{r['wall_s']:.2f}",
                f"{r['rate']:,.0f}",
                f"{r['rate'] / one:.2f}x",
                f"{r['doubled_redis']} / {r['ledger_doubled']}",
                share,
                f"{sum(b['claim_s'] for b in beats):.1f} / "
                f"{sum(b['publish_s'] - b['mark_s'] for b in beats):.1f} / "
                f"{sum(b['mark_s'] for b in beats):.1f}",
                f"{sum(b['cpu_s'] for b in beats):.1f}",
                f"{r['cpu']['pg_s']:.1f}",
                f"{r['cpu']['redis_s']:.1f}",
                f"{r['cpu']['busy_cores']:.2f}",
                f"{sum(b['batches'] for b in beats):,} ({sum(b['empty'] for b in beats):,})",
            ]
        )
    headers = (
        "replicas",
        "wall s",
        "fires/s",
        "vs 1",
        "doubled redis/ledger",
        "claims per replica",
        "claim / publish / mark s (sum)",
        "beat CPU s",
        "PostgreSQL CPU s",
        "Redis CPU s",
        "busy cores",
        "claim txns (empty)",
    )
    print(f"\n## burst: {args.rows:,} rows, {args.due:,} due at once\n")
    print(table(headers, rows), flush=True)
    # Where the time went: CPU per fire (beat + PostgreSQL + Redis) and what the machine's
    # CPUs allow at that cost; CPU used by anything else during the round; how much of
    # its active time each replica spent on a CPU.
    print()
    for r in results:
        beats = r["beats"]
        beat_cpu = sum(b.get("cpu_to_last_publish", 0.0) for b in beats)
        own = beat_cpu + r["cpu"]["pg_s"] + r["cpu"]["redis_s"]
        per_fire = own / max(1, r["sent"])
        ceiling = (os.cpu_count() or 1) / per_fire
        other = r["cpu"]["busy_cores"] * r["wall_s"] - own
        active = [
            b["cpu_to_last_publish"] / max(1e-9, b["last_publish"] - r["t0"])
            for b in beats
            if "last_publish" in b
        ]
        print(
            f"{r['replicas']} replica(s): {per_fire * 1e3:.2f} ms CPU per fire (beat"
            f" {beat_cpu / max(1, r['sent']) * 1e3:.2f}, PostgreSQL"
            f" {r['cpu']['pg_s'] / max(1, r['sent']) * 1e3:.2f}): {os.cpu_count()} CPUs allow"
            f" {ceiling:,.0f} fires/s ({ceiling / one:.2f}x one replica's rate); other"
            f" processes used {other:.1f} CPU s; each publishing replica on a CPU"
            f" {', '.join(f'{a:.0%}' for a in active)} of its active time"
        )
    doubled = sum(r["doubled_redis"] + r["ledger_doubled"] for r in results)
    short = [r for r in results if r["sent"] < args.due or r["messages"] != args.due]
    print(f"\ndoubled: {doubled}; rounds short of {args.due:,} messages: {len(short)}")
    return 1 if doubled or short else 0


# -- sustain --------------------------------------------------------------------------------


class Drain(threading.Thread):
    """Empty the queue every second; count messages per task id."""

    def __init__(self, url: str, queue: str) -> None:
        import redis as redis_lib

        super().__init__(daemon=True)
        self.redis = redis_lib.Redis.from_url(url)
        self.queue = queue
        self.ids: Counter[str] = Counter()
        self.messages = 0
        self.halt = threading.Event()
        self.lock = threading.Lock()

    def drain(self) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.lrange(self.queue, 0, -1)
        pipe.delete(self.queue)
        raw, _ = pipe.execute()
        with self.lock:
            for payload in raw:
                self.ids[json.loads(payload)["headers"]["id"]] += 1
            self.messages += len(raw)

    def run(self) -> None:
        while not self.halt.wait(1.0):
            self.drain()


def sustain(args: argparse.Namespace) -> int:
    import sqlalchemy as sa

    sys.path.insert(0, HERE)
    from _common import table

    from harness.scratch import scratch_database

    tasks = args.rate * 60
    reports: list[dict[str, Any]] = []
    with scratch_database(args.pg_admin, prefix="bench_scaleout", keep=args.keep) as scratch:
        store = prepare(scratch.url, args, max(0, args.rows - tasks))
        start = store.now() + timedelta(seconds=args.lead)
        copy_rows(store.engine, sustain_rows(args.rate, start))
        vacuum(store.engine)
        drain = Drain(args.redis, args.queue)
        drain.redis.delete(args.queue)
        stats_dir = os.path.join("/tmp", f"cronstore-scaleout-{os.getpid()}")
        os.makedirs(stats_dir, exist_ok=True)
        beats = [
            Replica(scratch.url, args, os.path.join(stats_dir, f"beat{i}.jsonl"))
            for i in range(args.replicas_sustain)
        ]
        for beat in beats:
            beat.wait_ready()
        drain.start()
        wait = (start - store.now()).total_seconds()
        time.sleep(max(0.0, wait))
        t0 = time.time()
        end = t0 + args.sustain_minutes * 60
        print(
            f"  {tasks:,} tasks firing {args.rate:,}/s from {start:%H:%M:%S} UTC for "
            f"{args.sustain_minutes:g} min; history kept {args.history_seconds:g}s",
            file=sys.stderr,
            flush=True,
        )
        last_t, last_messages, last_fire = t0, 0, start
        while time.time() < end:
            time.sleep(min(args.report_every, max(0.0, end - time.time())))
            now = time.time()
            with drain.lock:
                messages = drain.messages
            with store.engine.connect() as conn:
                rows, size, p50, p99 = conn.execute(
                    sa.text(
                        "SELECT (SELECT count(*) FROM cronstore_fire),"
                        " pg_total_relation_size('cronstore_fire'),"
                        " percentile_cont(0.5) WITHIN GROUP (ORDER BY lag),"
                        " percentile_cont(0.99) WITHIN GROUP (ORDER BY lag)"
                        " FROM (SELECT extract(epoch FROM published_at - fire_time) AS lag"
                        " FROM cronstore_fire WHERE fire_time >= :since"
                        " AND published_at IS NOT NULL) l"
                    ),
                    {"since": last_fire.replace(tzinfo=None)},
                ).one()
                # Whether vacuum keeps up: dead rows, vacuum runs (autovacuum's and beat's
                # own, policy/vacuum.py), and the oldest snapshot any session holds (it
                # stops vacuum from removing newer rows).
                dead, vacuums, xmin_age = conn.execute(
                    sa.text(
                        "SELECT n_dead_tup, autovacuum_count + vacuum_count,"
                        " (SELECT max(age(backend_xmin)) FROM pg_stat_activity)"
                        " FROM pg_stat_user_tables WHERE relname = 'cronstore_fire'"
                    )
                ).one()
                last_fire = store.now(conn) - timedelta(seconds=2)
            child = [b.last_report() or {} for b in beats]
            reports.append(
                {
                    "t": now - t0,
                    "rate": (messages - last_messages) / (now - last_t),
                    "ledger": int(rows),
                    "ledger_mb": size / 2**20,
                    "vacuum": f"{int(dead):,} / {int(vacuums)} / {int(xmin_age or 0):,}",
                    "lag_p50_ms": (p50 or float("nan")) * 1e3,
                    "lag_p99_ms": (p99 or float("nan")) * 1e3,
                    "idle_ms": max(c.get("idle_median_ms", float("nan")) for c in child),
                    "due_ms": max(c.get("due_median_ms", float("nan")) for c in child),
                    "due_p95_ms": max(c.get("due_p95_ms", float("nan")) for c in child),
                    "hk_max_ms": max(c.get("housekeeping_max_ms", float("nan")) for c in child),
                    "rss_mb": max(b.rss_mb() for b in beats),
                }
            )
            r = reports[-1]
            print(
                f"  t={r['t']:5.0f}s {r['rate']:7.0f} fires/s  ledger {r['ledger']:>9,} rows"
                f" ({r['ledger_mb']:.0f} MB; dead/vacuums/xmin age {r['vacuum']})"
                f"  lag p50/p99 {r['lag_p50_ms']:.0f}/"
                f"{r['lag_p99_ms']:.0f} ms  idle {r['idle_ms']:.2f} ms  due {r['due_ms']:.1f}/"
                f"{r['due_p95_ms']:.1f} ms  housekeeping max {r['hk_max_ms']:.0f} ms"
                f"  RSS {r['rss_mb']:.0f} MB",
                file=sys.stderr,
                flush=True,
            )
            last_t, last_messages = now, messages
        figures = [b.stop() for b in beats]
        drain.halt.set()
        drain.join()
        drain.drain()
        drain.redis.delete(args.queue)
        with store.engine.connect() as conn:
            ledger_doubled = conn.execute(
                sa.text(
                    "SELECT count(*) - count(DISTINCT (periodic_task_id, fire_time))"
                    " FROM cronstore_fire"
                )
            ).scalar_one()
        store.close()

    rows = [
        [
            f"{r['t']:.0f}",
            f"{r['rate']:,.0f}",
            f"{r['ledger']:,}",
            f"{r['ledger_mb']:.0f}",
            r["vacuum"],
            f"{r['lag_p50_ms']:.0f} / {r['lag_p99_ms']:.0f}",
            f"{r['idle_ms']:.2f}",
            f"{r['due_ms']:.1f} / {r['due_p95_ms']:.1f}",
            f"{r['hk_max_ms']:.0f}",
            f"{r['rss_mb']:.0f}",
        ]
        for r in reports
    ]
    headers = (
        "t s",
        "fires/s",
        "ledger rows",
        "ledger MB",
        "dead rows / vacuums / oldest xmin age",
        "lateness p50/p99 ms",
        "idle tick ms",
        "due tick median/p95 ms",
        "housekeeping max ms",
        "beat RSS MB",
    )
    print(
        f"\n## sustain: {args.rate:,} fires/s ({tasks:,} tasks) for {args.sustain_minutes:g} min,"
        f" {args.rows:,} rows, history {args.history_seconds:g}s, {args.replicas_sustain}"
        " replica(s)\n"
    )
    print(table(headers, rows))
    half = [r for r in reports if r["t"] >= reports[-1]["t"] / 2] or reports
    first = [r for r in reports if r["t"] < reports[-1]["t"] / 2] or reports
    grow = (half[-1]["ledger"] - half[0]["ledger"]) / max(1.0, half[-1]["t"] - half[0]["t"])
    # What retention keeps: the history (at least each task's newest fire), plus what one
    # minute's pause between passes and a report's lag add.
    kept = max(tasks, args.rate * args.history_seconds)
    steady = int(kept + args.rate * (60 + 2 * args.report_every))
    # Bounded: the second half stays near the steady state, and its last quarter rises no
    # higher than the quarter before (pruning comes in waves: a pass, then a minute's pause).
    quarter = [r for r in reports if r["t"] >= reports[-1]["t"] * 3 / 4] or reports
    third = [r for r in half if r not in quarter] or half
    top = max(r["ledger"] for r in quarter)
    bounded = max(r["ledger"] for r in half) <= 1.25 * steady and top <= 1.1 * max(
        r["ledger"] for r in third
    )
    tick_first = _mid([r["due_ms"] for r in first])
    tick_last = _mid([r["due_ms"] for r in half])
    rss_growth = half[-1]["rss_mb"] - half[0]["rss_mb"]
    total = sum(drain.ids.values())
    rate = sum(r["rate"] for r in reports[1:]) / max(1, len(reports) - 1)
    cpu_text = ", ".join(f"{b['cpu_s']:.0f}s" for b in figures)
    print(
        f"\nfires/s after the first report: {rate:,.0f} (target {args.rate:,})"
        f"\nmessages {total:,}, task ids {len(drain.ids):,}, doubled {total - len(drain.ids)};"
        f" ledger doubled {ledger_doubled}"
        f"\nledger: {'BOUNDED' if bounded else 'NOT BOUNDED'}"
        f" (second half {grow:+.0f} rows/s end to end,"
        f" max {max(r['ledger'] for r in half):,}; steady state expected ~{steady:,})"
        f"\ndue tick median: first half {tick_first:.1f} ms, second half {tick_last:.1f} ms"
        f" ({'flat' if tick_last <= 1.5 * tick_first else 'GROWS'})"
        f"\nbeat RSS: {half[0]['rss_mb']:.0f} -> {half[-1]['rss_mb']:.0f} MB over the second half"
        f" ({'flat' if rss_growth < 10 else 'GROWS'})"
        f"\nbeat CPU: {cpu_text} over {figures[0]['wall_s']:.0f}s"
    )
    return 0


def _mid(values: list[float]) -> float:
    clean = sorted(v for v in values if v == v)
    return clean[len(clean) // 2] if clean else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("burst", "sustain"), default="burst")
    parser.add_argument("--pg-admin", default=DEFAULT_PG, help="URL allowed to CREATE DATABASE")
    parser.add_argument("--redis", default=DEFAULT_REDIS, help="broker (its list --queue)")
    parser.add_argument("--queue", default=QUEUE)
    parser.add_argument("--rows", type=int, default=1_000_000, help="periodic tasks in all")
    parser.add_argument("--due", type=int, default=100_000, help="burst: due at once")
    parser.add_argument("--replicas", default="1,3", help="burst: replica counts to run")
    parser.add_argument("--rounds", type=int, default=1, help="burst: times each count runs")
    parser.add_argument("--timeout", type=float, default=300.0, help="burst: limit per round")
    parser.add_argument("--rate", type=int, default=1000, help="sustain: fires per second")
    parser.add_argument("--sustain-minutes", type=float, default=10.0)
    parser.add_argument("--replicas-sustain", type=int, default=1, help="sustain: beats")
    parser.add_argument(
        "--history-seconds",
        type=float,
        default=180.0,
        help="sustain: cronstore_history_days in seconds (burst: kept forever)",
    )
    parser.add_argument("--report-every", type=float, default=30.0)
    parser.add_argument("--lead", type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--stats", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    if args.mode == "burst":
        args.history_seconds = 0.0  # no pruning in the burst: every fire stays to be counted
    import celery
    import sqlalchemy as sa

    when = f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    print(f"# celery-cronstore scale-out benchmark ({args.mode}), {when}")
    engine = sa.create_engine(args.pg_admin)
    with engine.connect() as conn:
        version = str(conn.exec_driver_sql("SHOW server_version").scalar_one()).split()[0]
    engine.dispose()
    import celery_cronstore

    print(f"package: {os.path.dirname(celery_cronstore.__file__)}")
    print(
        f"Python {platform.python_version()}, celery {celery.__version__}, SQLAlchemy "
        f"{sa.__version__}, PostgreSQL {version}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    return burst(args) if args.mode == "burst" else sustain(args)


if __name__ == "__main__":
    sys.exit(main())
