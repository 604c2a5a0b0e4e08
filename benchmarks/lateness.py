"""Lateness benchmark: from each fire's time to its message in Redis, against the floor.

Beat runs as ``celery beat`` runs it: :class:`celery.beat.Service` with
``scheduler_cls=celery_cronstore.Scheduler`` (its loop: ``tick()``, then ``time.sleep``
of what it returned), in this process, against a scratch store. Two scenarios:

* **spread**: ``--tasks`` (1,000) calendar timers ``*-*-* *:*:SS.ffffff`` whose offsets
  are spread evenly over the minute (one fire every 60 ms), run for ``--seconds`` (120);
* **burst**: ``--burst`` (10,000) one-off timers whose instants fall in the same second
  (``--burst-window`` 1.0 s, evenly spaced; 0 puts them all on one instant).

Lateness is the moment the message is in Redis (a hook in this script stamps the end of
each of beat's broker batches, that is, when the pipeline's reply came back) minus the
fire time the message carries (header ``cronstore_fire_time``), which is checked against
the fire time this script computes from the timer itself. Printed: p50 / p99 / max, how
late beat woke (first ``tick()`` started after the fire time), the publish order against
fire-time order (inversions), and the same figures for the floor measured in the same
run: a plain ``time.sleep`` to each fire time followed by one redis-py ``LPUSH`` (spread)
or one pipeline of everything then due (burst) of the very messages beat sent, with
nothing in between.

    python benchmarks/lateness.py [--backends sqlite,postgresql] [--broker redis]
                                  [--scenarios spread,burst] [--tasks 1000]
                                  [--seconds 120] [--burst 10000] [--burst-window 1.0]
                                  [--task plain|crontask]

Messages go to the Redis list ``cronstore-bench-lateness`` (emptied before and after).
See docs/benchmarks.md for the figures.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import platform
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

UTC = timezone.utc
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
BROKERS = {"redis": "redis://127.0.0.1:6379/15"}
QUEUE = "cronstore-bench-lateness"
FLOOR_QUEUE = "cronstore-bench-lateness-floor"
#: Seconds between starting beat and the first fire that counts (spread: fires from 1 s
#: on warm beat up and open its broker connection; burst: beat is up, idle, connected).
WARMUP = 3.0
#: Seconds between storing the burst and its first fire: time for beat to see it coming
#: and claim it ahead (``policy.lead``: 10,000 one-off rows take it 1-2 s here). In a
#: real deployment the rows are stored long before; with 3 s the last claims ran late.
BURST_NOTICE = 6.0


# -- what beat did: stamps taken by hooks in this script only ------------------------------


@dataclass
class Recorder:
    """Wall-clock stamps of beat's ticks, housekeeping and broker batches."""

    ticks: list[float] = field(default_factory=list)
    #: (start, end) of each housekeeping pass.
    chores: list[tuple[float, float]] = field(default_factory=list)
    #: task id -> the moment its batch's pipeline reply came back.
    published: dict[str, float] = field(default_factory=dict)
    _batch: list[str] = field(default_factory=list)


@contextmanager
def hooks(recorder: Recorder) -> Iterator[None]:
    """Stamp beat's ticks, housekeeping and batches (kombu's producer batch flushes when
    the ``Dispatcher.batch`` block ends: the stamp is taken after that)."""
    from celery_cronstore.beat import chores, dispatch, scheduler

    Dispatcher, Scheduler, Chores = dispatch.Dispatcher, scheduler.Scheduler, chores.Chores
    saved = (Dispatcher.send, Dispatcher.batch, Scheduler.tick, Chores.run)
    send, batch, tick, housekeeping = saved
    clock = time.time

    def send_hook(self: Any, claim: Any) -> None:
        send(self, claim)
        recorder._batch.append(claim.task_id)

    @contextmanager
    def batch_hook(self: Any, size: int) -> Iterator[None]:
        recorder._batch = []
        with batch(self, size):
            yield
        at = clock()
        for task_id in recorder._batch:
            recorder.published[task_id] = at

    def tick_hook(self: Any, *args: Any, **kwargs: Any) -> float:
        recorder.ticks.append(clock())
        return tick(self, *args, **kwargs)  # type: ignore[no-any-return]

    def housekeeping_hook(self: Any, stalled_since: Any) -> bool:
        start = clock()
        try:
            return housekeeping(self, stalled_since)
        finally:
            recorder.chores.append((start, clock()))

    Dispatcher.send, Dispatcher.batch = send_hook, batch_hook  # type: ignore[method-assign]
    Scheduler.tick, Chores.run = tick_hook, housekeeping_hook  # type: ignore[method-assign]
    try:
        yield
    finally:
        Dispatcher.send, Dispatcher.batch, Scheduler.tick, Chores.run = saved  # type: ignore[method-assign]


# -- the store and beat --------------------------------------------------------------------


def make_app(
    store_url: str, broker_url: str, claim_ahead: float | None = None, task: str = "plain"
) -> Any:
    """Beat's app. ``task``: ``plain`` sends ``bench.noop`` by name (beat does not know
    it); ``crontask`` registers it as a CronTask (nothing runs it: beat only sends)."""
    from celery import Celery

    from celery_cronstore import CronTask

    app = Celery("cronstore-lateness-bench", broker=broker_url, set_as_current=True)
    if task == "crontask":
        app.task(base=CronTask, name="bench.noop", shared=False)(_never_run)
    if claim_ahead is not None:
        app.conf.cronstore_claim_ahead = claim_ahead
    app.conf.update(
        cronstore_url=store_url,
        cronstore_sync_beat_schedule=False,
        cronstore_require_registered=False,  # the bench tasks are sent by name
        broker_connection_retry_on_startup=True,
        task_default_queue=QUEUE,
    )
    return app


def _never_run() -> None:
    """The body of ``bench.noop``: beat only sends it."""


def insert_rows(store: Any, rows: list[tuple[str, str, datetime]]) -> None:
    """Insert (name, timer expression, next_run) rows in bulk (task ``bench.noop``)."""
    from celery_cronstore.store.schema import periodic_task
    from celery_cronstore.timers import parse_timer

    now = store.now()
    kind = {}
    values = []
    for name, expression, next_run in rows:
        if expression not in kind:
            kind[expression] = parse_timer(expression).kind
        values.append(
            {
                "name": name,
                "task": "bench.noop",
                "timer_kind": kind[expression],
                "timer": expression,
                "tz": "UTC",
                "next_run": next_run,
                "created_at": now,
                "updated_at": now,
            }
        )
    with store.begin() as conn:
        for start in range(0, len(values), 5_000):
            conn.execute(sa.insert(periodic_task), values[start : start + 5_000])


def run_beat(app: Any, recorder: Recorder, until: Callable[[], bool], limit: float) -> None:
    """Run Celery's beat loop on our Scheduler until ``until()`` or ``limit`` seconds."""
    from celery.beat import Service

    from celery_cronstore.beat.scheduler import Scheduler

    service = Service(app, scheduler_cls=Scheduler)
    deadline = time.monotonic() + limit

    def watch() -> None:
        while time.monotonic() < deadline and not until():
            time.sleep(0.05)
        service.stop()

    watcher = threading.Thread(target=watch, daemon=True)
    with hooks(recorder):
        watcher.start()
        service.start()  # returns once stopped (after its current sleep)
    watcher.join()
    service.scheduler.close()


# -- reading what arrived ------------------------------------------------------------------


@dataclass
class Message:
    task_id: str
    name: str
    fire: float  # the header's fire time, epoch seconds
    payload: bytes


def read_queue(broker: Any, queue: str) -> list[Message]:
    """Return the messages of ``queue`` in publish order (kombu LPUSHes), and empty it."""
    raw = broker.lrange(queue, 0, -1)
    broker.delete(queue)
    out = []
    for payload in reversed(raw):
        headers = json.loads(payload)["headers"]
        fire = datetime.fromisoformat(headers["cronstore_fire_time"]).timestamp()
        out.append(Message(headers["id"], headers["cronstore_name"], fire, payload))
    return out


def inversions(values: list[float]) -> int:
    """Return the number of pairs i < j with values[i] > values[j] (merge sort)."""

    def sort(items: list[float]) -> tuple[list[float], int]:
        if len(items) < 2:
            return items, 0
        middle = len(items) // 2
        left, a = sort(items[:middle])
        right, b = sort(items[middle:])
        merged, count, i, j = [], a + b, 0, 0
        while i < len(left) and j < len(right):
            if right[j] < left[i]:
                merged.append(right[j])
                count += len(left) - i
                j += 1
            else:
                merged.append(left[i])
                i += 1
        merged.extend(left[i:])
        merged.extend(right[j:])
        return merged, count

    return sort(values)[1]


def stats(values: list[float]) -> dict[str, float]:
    """p50 / p99 / max of ``values`` (seconds) in milliseconds."""
    from _common import percentile

    if not values:
        return {"n": 0, "p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    return {
        "n": len(values),
        "p50": percentile(values, 0.5) * 1e3,
        "p99": percentile(values, 0.99) * 1e3,
        "max": max(values) * 1e3,
    }


def judge(
    messages: list[Message],
    recorder: Recorder,
    expected: Callable[[Message], float | None],
    counted: Callable[[float], bool],
) -> dict[str, Any]:
    """Lateness per message, checked against the fire time the script expects."""
    late, wake, work = [], [], []
    wrong = early = unstamped = during_chores = 0
    chores = sorted(recorder.chores)
    ticks = recorder.ticks
    for message in messages:
        true_fire = expected(message)
        if true_fire is None or abs(true_fire - message.fire) > 1e-6:
            wrong += 1
            continue
        if not counted(message.fire):
            continue
        at = recorder.published.get(message.task_id)
        if at is None:
            unstamped += 1
            continue
        lateness = at - message.fire
        if lateness < 0:
            early += 1
        late.append(lateness)
        woke = ticks[min(len(ticks) - 1, bisect.bisect_left(ticks, message.fire))]
        wake.append(woke - message.fire)
        work.append(at - woke)
        i = bisect.bisect_left(chores, (message.fire, 0.0))
        if i < len(chores) and chores[i][0] <= at:
            during_chores += 1
    fires = [m.fire for m in messages if counted(m.fire)]
    return {
        "late": stats(late),
        "wake": stats(wake),
        "work": stats(work),
        "wrong_fire_time": wrong,
        "early": early,
        "unstamped": unstamped,
        "housekept_before_publish": during_chores,
        "inversions": inversions(fires),
        "messages": len(messages),
    }


# -- the floors ----------------------------------------------------------------------------


def floor_single(broker: Any, payloads: list[bytes], samples: int) -> dict[str, float]:
    """Sleep to an absolute time, then one LPUSH; return the lateness stats."""
    late = []
    rng = random.Random(16)
    for i in range(samples):
        target = time.time() + 0.01 + rng.random() * 0.05
        left = target - time.time()
        if left > 0:
            time.sleep(left)
        broker.lpush(FLOOR_QUEUE, payloads[i % len(payloads)])
        late.append(time.time() - target)
    broker.delete(FLOOR_QUEUE)
    return stats(late)


def floor_burst(broker: Any, payloads: list[bytes], offsets: list[float]) -> dict[str, Any]:
    """Fire times ``start + offsets``: sleep to the next, pipeline all then due, repeat."""
    start = float(int(time.time()) + 2)
    fires = [start + o for o in offsets]
    late = []
    i = 0
    while i < len(fires):
        left = fires[i] - time.time()
        if left > 0:
            time.sleep(left)
        j = max(i + 1, bisect.bisect_right(fires, time.time()))
        pipe = broker.pipeline(transaction=False)
        for k in range(i, j):
            pipe.lpush(FLOOR_QUEUE, payloads[k % len(payloads)])
        pipe.execute()
        at = time.time()
        late.extend(at - fires[k] for k in range(i, j))
        i = j
    broker.delete(FLOOR_QUEUE)
    return stats(late)


# -- the scenarios -------------------------------------------------------------------------


def spread(scratch_url: str, broker: Any, args: argparse.Namespace) -> dict[str, Any]:
    """``--tasks`` calendar timers one ``60 / tasks`` s apart; beat for ``--seconds``."""
    from celery_cronstore.store import Store
    from celery_cronstore.timers import parse_timer

    step_us = 60_000_000 // args.tasks
    offsets = {}
    rows = []
    # Fires start at once; they count from WARMUP on (the first ones open the broker
    # connection and warm beat up: a one-time cost, not the steady lateness).
    start = datetime.fromtimestamp(time.time() + 1.0, UTC)
    begin = datetime.fromtimestamp(time.time() + WARMUP, UTC)
    for i in range(args.tasks):
        offset = i * step_us
        expression = f"*-*-* *:*:{offset // 1_000_000:02d}.{offset % 1_000_000:06d}"
        name = f"spread-{i:05d}"
        offsets[name] = offset / 1e6
        rows.append((name, expression, parse_timer(expression).next_after(start)))
    store = Store(scratch_url)
    insert_rows(store, rows)
    store.close()
    recorder = Recorder()
    stop_at = begin.timestamp() + args.seconds
    run_beat(
        make_app(scratch_url, BROKERS[args.broker], args.claim_ahead, args.task),
        recorder,
        lambda: time.time() > stop_at + 0.5,
        args.seconds + WARMUP + 30,
    )
    messages = read_queue(broker, QUEUE)

    def expected(message: Message) -> float | None:
        offset = offsets.get(message.name)
        if offset is None:
            return None
        minute = message.fire - (message.fire % 60)
        return minute + offset  # the calendar instant of that minute

    result = judge(messages, recorder, expected, lambda f: begin.timestamp() <= f < stop_at)
    result["expected_fires"] = sum(
        math.ceil((stop_at - o) / 60) - math.ceil((begin.timestamp() - o) / 60)
        for o in offsets.values()
    )
    result["floor"] = floor_single(broker, [m.payload for m in messages[:100]], args.floor_samples)
    return result


def burst(scratch_url: str, broker: Any, args: argparse.Namespace) -> dict[str, Any]:
    """``--burst`` one-off timers inside one ``--burst-window`` s window."""
    from celery_cronstore.store import Store

    first = float(int(time.time() + BURST_NOTICE) + 1)
    step = args.burst_window / args.burst
    instants = {}
    rows = []
    for j in range(args.burst):
        at = datetime.fromtimestamp(first, UTC) + timedelta(microseconds=round(j * step * 1e6))
        name = f"burst-{j:06d}"
        instants[name] = at.timestamp()
        rows.append((name, at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), at))
    # Shuffle the insertion order: the table's physical order must not line up with time.
    random.Random(16).shuffle(rows)
    # One fire a second in, not counted: beat's broker connection is open before the burst.
    warm = datetime.fromtimestamp(time.time() + 1.0, UTC)
    rows.append(("warm-up", warm.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), warm))
    store = Store(scratch_url)
    insert_rows(store, rows)
    store.close()
    if time.time() > first - 1.0:
        raise SystemExit("filling the burst took too long: raise WARMUP")
    recorder = Recorder()
    run_beat(
        make_app(scratch_url, BROKERS[args.broker], args.claim_ahead, args.task),
        recorder,
        lambda: len(recorder.published) > args.burst,
        BURST_NOTICE + args.burst_window + 120,
    )
    messages = [m for m in read_queue(broker, QUEUE) if m.name != "warm-up"]
    result = judge(messages, recorder, lambda m: instants.get(m.name), lambda f: True)
    result["expected_fires"] = args.burst
    ordered = sorted(messages, key=lambda m: m.fire)
    result["floor"] = floor_burst(
        broker, [m.payload for m in ordered], [v - first for v in sorted(instants.values())]
    )
    return result


# -- main ----------------------------------------------------------------------------------


def fmt(s: dict[str, float]) -> str:
    return f"{s['p50']:.2f} / {s['p99']:.2f} / {s['max']:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--broker", default="redis", choices=sorted(BROKERS))
    parser.add_argument("--pg-admin", default=DEFAULT_PG, help="URL allowed to CREATE DATABASE")
    parser.add_argument("--scenarios", default="spread,burst")
    parser.add_argument("--tasks", type=int, default=1_000, help="spread: timers on a minute")
    parser.add_argument("--seconds", type=float, default=120.0, help="spread: how long")
    parser.add_argument("--burst", type=int, default=10_000, help="burst: fires in one window")
    parser.add_argument("--burst-window", type=float, default=1.0, help="burst: seconds")
    parser.add_argument("--floor-samples", type=int, default=500)
    parser.add_argument(
        "--claim-ahead", type=float, help="cronstore_claim_ahead (default: the package's)"
    )
    parser.add_argument(
        "--task",
        choices=("plain", "crontask"),
        default="plain",
        help="the fires' task: sent by name, or a registered CronTask (whose held fires"
        " beat marks together during a burst)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    args = parser.parse_args(argv)
    sys.path.insert(0, HERE)
    import celery
    import redis
    from _common import scratch_database, table

    broker = redis.Redis.from_url(BROKERS[args.broker])
    for queue in (QUEUE, FLOOR_QUEUE):
        if broker.llen(queue):
            raise SystemExit(f"Redis list {queue!r} is not empty: another run is going on")
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    print(f"# celery-cronstore lateness benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(
        f"Python {platform.python_version()}, celery {celery.__version__}, "
        f"SQLAlchemy {sa.__version__}, {os.cpu_count()} CPUs, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; spread: {args.tasks:,} timers "
        f"over a minute for {args.seconds:g} s; burst: {args.burst:,} fires in "
        f"{args.burst_window:g} s; cronstore_claim_ahead "
        f"{'default' if args.claim_ahead is None else args.claim_ahead}\n"
    )
    rows, every = [], {}
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        for scenario in scenarios:
            with scratch_database(backend, args.pg_admin) as scratch:
                from celery_cronstore.store import Store

                store = Store(scratch.url)
                store.upgrade()
                store.close()
                run = spread if scenario == "spread" else burst
                r = run(scratch.url, broker, args)
            every[f"{backend}/{scenario}"] = r
            print(f"  {backend}/{scenario}: {json.dumps(r)}", file=sys.stderr, flush=True)
            floor = r["floor"]
            checks = (
                f"{r['late']['n']:,} of {r['expected_fires']:,}; wrong fire time "
                f"{r['wrong_fire_time']}, early {r['early']}, inversions {r['inversions']}"
            )
            rows.append(
                [
                    backend,
                    scenario,
                    fmt(r["late"]),
                    fmt(r["wake"]),
                    fmt(floor),
                    f"{r['late']['p50'] / floor['p50']:.1f}x",
                    f"{r['late']['p99'] / floor['p99']:.1f}x",
                    str(r["housekept_before_publish"]),
                    checks,
                ]
            )
    headers = (
        "store",
        "scenario",
        "lateness p50/p99/max ms",
        "beat woke p50/p99/max ms",
        "floor p50/p99/max ms",
        "p50 ratio",
        "p99 ratio",
        "housekeeping in the way",
        "fires counted; checks",
    )
    print(table(headers, rows))
    print(
        "\nlateness: message in Redis minus its fire time; floor: time.sleep to the fire "
        "time, then LPUSH (spread) or one pipeline of all then due (burst)"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(every, out, indent=1)
    broker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
