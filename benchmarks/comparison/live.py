"""The measurements against a real Redis broker: dispatch of 10,000 due tasks, lateness of
tasks spread over a window, and how long an edit takes to reach the broker.

Every scheduler is driven as ``celery beat`` drives it (``interval = tick()``, sleep
``interval``, sync when the scheduler asks), in a fresh process per measurement, on the
same Celery app as the other measurements except for the broker: ``--broker`` (a Redis
database of its own) and one queue, :data:`QUEUE`, emptied before and deleted after.

Times that compare a publish with a fire time or a commit are wall-clock times
(``time.time()``) taken on this machine. The moment a message is *published* is when a
separate observer process takes it off the Redis list (``BLPOP``, then whatever else is
already queued in one ``MULTI``): the same for every scheduler, whether it publishes
each message at once or in a pipeline. Celery's ``after_task_publish`` signal, taken in
the beat process, is recorded as well (celery-cronstore sends it when a message joins its
pipeline, before the pipeline is flushed).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from .base import DUE_LAST_RUN, Driver, task_name
from .harness import checkpoint, load, log, make_app, run, status_mb

UTC = timezone.utc
#: The queue (a Redis list of this name in ``--broker``'s database) every beat sends to.
QUEUE = "cronstore-compare"
#: Seconds between the start of the lateness fill and its first fire.
LEAD = 15.0
#: Seconds after the last fire that a late publish is still waited for.
GRACE = 15.0
#: Seconds an edit's message is waited for before the edit counts as not seen.
EDIT_WAIT = 20.0
#: The script a child process runs (compare.py), set by compare.py.
SCRIPT: list[str] = []


# -- what every phase shares ---------------------------------------------------------------


def redis_client(broker: str) -> Any:
    import redis

    # No socket timeout shorter than the longest BLPOP (redis-py's default may be one).
    return redis.Redis.from_url(broker, socket_timeout=EDIT_WAIT + 30)


def forget_queue(broker: str) -> None:
    """Delete :data:`QUEUE` and kombu's binding key of it (nothing else: others may share
    the database)."""
    client = redis_client(broker)
    keys = [QUEUE, *client.scan_iter(match=f"_kombu.binding*{QUEUE}")]
    client.delete(*keys)
    client.close()


def argument(raw: bytes) -> int:
    """Return the first positional argument of a Celery message as kombu put it in Redis."""
    message = json.loads(raw)
    body = message["body"]
    if message.get("properties", {}).get("body_encoding") == "base64":
        body = base64.b64decode(body)
    args = json.loads(body)[0]
    return int(args[0]) if args else -1


def percentiles(values: list[float], prefix: str) -> dict[str, float | None]:
    """Return p50, p99 and max of ``values`` (seconds) in milliseconds, under ``prefix``."""
    if not values:
        return {f"{prefix}_p50_ms": None, f"{prefix}_p99_ms": None, f"{prefix}_max_ms": None}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3

    return {
        f"{prefix}_p50_ms": statistics.median(ordered) * 1e3,
        f"{prefix}_p99_ms": at(0.99),
        f"{prefix}_max_ms": ordered[-1] * 1e3,
    }


def beat_loop(scheduler: Any, done: Callable[[], bool], until: float) -> dict[str, Any]:
    """Run celery beat's service loop until ``done()`` or the monotonic instant ``until``."""
    ticks = 0
    slept = 0.0
    while not done():
        left = until - time.monotonic()
        if left <= 0:
            break
        interval = scheduler.tick()
        ticks += 1
        if interval and interval > 0.0 and not done():
            pause = min(interval, max(0.0, until - time.monotonic()))
            time.sleep(pause)
            slept += pause
            if scheduler.should_sync():
                scheduler._do_sync()
    return {"ticks": ticks, "slept_s": slept}


def start_beat(driver: type[Driver], target: str, broker: str) -> tuple[Any, list[Any]]:
    """Build ``driver``'s scheduler on a Redis-broker app and tick it once (nothing due).

    Return the scheduler and the list of publishes seen by ``after_task_publish``:
    ``(time.time(), first argument)`` each.
    """
    from celery.signals import after_task_publish

    published: list[Any] = []

    def record(body: Any = None, **_: Any) -> None:
        args = body[0] if isinstance(body, (list, tuple)) and body else ()
        published.append((time.time(), int(args[0]) if args else -1))

    after_task_publish.connect(record, weak=False)
    forget_queue(broker)
    app = make_app(broker, QUEUE)
    cls = driver.load(app, target)
    driver.block_in_tick(False)  # the first tick must return, not wait for a change
    scheduler = driver.build(app, cls)
    scheduler.tick()
    driver.block_in_tick(True)
    if published:
        raise SystemExit(f"{len(published)} task(s) sent at startup: the fill made something due")
    return scheduler, published


def finish(scheduler: Any, out: dict[str, Any], broker: str) -> dict[str, Any]:
    forget_queue(broker)
    checkpoint(out)
    t = time.perf_counter()
    scheduler.close()
    out["close_s"] = time.perf_counter() - t
    out["peak_rss_mb"] = status_mb("VmHWM")
    return out


# -- the three measurements (each in a child process) ---------------------------------------


def dispatch(
    driver: type[Driver], target: str, n: int, budget: float, broker: str
) -> dict[str, Any]:
    """Make all ``n`` stored tasks due at once; time beat's loop until ``n`` were sent."""
    scheduler, published = start_beat(driver, target, broker)
    out: dict[str, Any] = {"due": n}
    app = scheduler.app
    names = [task_name(i) for i in range(n)]
    t = time.perf_counter()
    driver.make_due(app, target, names, datetime.now(UTC) - DUE_LAST_RUN)
    out["make_due_s"] = time.perf_counter() - t
    t = time.perf_counter()
    c = time.process_time()
    loop = beat_loop(scheduler, lambda: len(published) >= n, time.monotonic() + budget)
    elapsed = time.perf_counter() - t
    sent = len(published)
    client = redis_client(broker)
    queued = int(client.llen(QUEUE))
    client.close()
    out.update(
        sent=sent,
        queued=queued,
        dispatch_s=elapsed if sent >= n else None,
        dispatch_elapsed_s=elapsed,
        dispatch_cpu_s=time.process_time() - c,
        dispatch_ticks=loop["ticks"],
        rss_after_dispatch_mb=status_mb("VmRSS"),
    )
    if sent < n:
        out.update(
            status="over budget",
            reason=f"{sent:,} of {n:,} sent in {elapsed:.0f} s (budget {budget:.0f} s)",
        )
        forget_queue(broker)
        checkpoint(out)
        # Closing would write the deferred last runs of what was sent (minutes for the ORM
        # schedulers): not part of the figure, and the series ends here anyway.
        os._exit(0)
    elif queued != sent:
        out.update(status="failed", reason=f"{sent:,} sent but {queued:,} in the queue")
    else:
        out["status"] = "ok"
    return finish(scheduler, out, broker)


def spread(t0: datetime, window: float, count: int) -> list[datetime]:
    """Return ``count`` fire instants spread evenly over ``window`` seconds from ``t0``."""
    step = window / count
    return [t0 + timedelta(seconds=(i + 0.5) * step) for i in range(count)]


def lateness(
    driver: type[Driver], target: str, fires: list[datetime], broker: str
) -> dict[str, Any]:
    """Run beat while the spread tasks fall due; lateness = published - fire time."""
    count = len(fires)
    last = fires[-1].timestamp() + GRACE
    observer = subprocess.Popen(
        [sys.executable, *SCRIPT, "--observe", broker, str(count), str(last)],
        stdout=subprocess.PIPE,
        text=True,
    )
    scheduler, published = start_beat(driver, target, broker)
    ready = time.time()
    out: dict[str, Any] = {"tasks": count, "first_fire_in_s": fires[0].timestamp() - ready}
    if ready > fires[0].timestamp():
        out.update(status="failed", reason="beat started after the first fire")
        observer.kill()
        return out
    c = time.process_time()
    loop = beat_loop(
        scheduler, lambda: len(published) >= count, time.monotonic() + (last - time.time())
    )
    out.update(cpu_s=time.process_time() - c, ticks=loop["ticks"])
    try:
        arrived, _ = observer.communicate(timeout=max(5.0, last - time.time() + 5.0))
    except subprocess.TimeoutExpired:
        observer.kill()
        arrived, _ = observer.communicate()
    seen: dict[int, float] = {}
    for line in arrived.splitlines():
        i, at = line.split()
        seen.setdefault(int(i), float(at))
    signalled: dict[int, float] = {}
    for at, i in published:
        signalled.setdefault(i, at)
    broker_late = [seen[i] - fires[i].timestamp() for i in seen if 0 <= i < count]
    signal_late = [signalled[i] - fires[i].timestamp() for i in signalled if 0 <= i < count]
    out.update(
        sent=len(signalled),
        published=len(broker_late),
        early=sum(1 for v in broker_late if v < 0),
        **percentiles(broker_late, "late"),
        **percentiles(signal_late, "late_signal"),
    )
    if len(broker_late) < count:
        out.update(
            status="incomplete",
            reason=f"{len(broker_late)} of {count} published by {GRACE:.0f} s after the last fire",
        )
    else:
        out["status"] = "ok"
    return finish(scheduler, out, broker)


def edit(driver: type[Driver], target: str, edits: int, broker: str) -> dict[str, Any]:
    """Run beat while an editor process makes one task due ``edits`` times, one by one."""
    scheduler, published = start_beat(driver, target, broker)
    editor = subprocess.Popen(
        [sys.executable, *SCRIPT, "--editor", driver.key, target, broker, str(edits)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    c = time.process_time()
    loop = beat_loop(scheduler, lambda: editor.poll() is not None, time.monotonic() + edits * 30.0)
    try:
        output, errors = editor.communicate(timeout=EDIT_WAIT + 5)
    except subprocess.TimeoutExpired:
        editor.kill()
        output, errors = editor.communicate()
    lines = [line for line in output.splitlines() if line.startswith("[")]
    results = json.loads(lines[-1]) if lines else []
    seen = [r["published"] - r["committed"] for r in results if r["published"] is not None]
    whole = [r["published"] - r["began"] for r in results if r["published"] is not None]
    out: dict[str, Any] = {
        "edits": edits,
        "seen": len(seen),
        "sent": len(published),
        "cpu_s": time.process_time() - c,
        "ticks": loop["ticks"],
        "edit_call_ms": statistics.median(r["committed"] - r["began"] for r in results) * 1e3
        if results
        else None,
        **percentiles(seen, "edit"),
        **percentiles(whole, "edit_call_and_seen"),
    }
    if editor.returncode:
        out.update(status="failed", reason="editor: " + "\n".join(errors.splitlines()[-8:]))
    elif len(seen) < edits:
        out.update(
            status="incomplete", reason=f"{edits - len(seen)} of {edits} edits not seen in time"
        )
    else:
        out["status"] = "ok"
    return finish(scheduler, out, broker)


# -- the helper processes ------------------------------------------------------------------


def observe(broker: str, count: int, until: float) -> None:
    """Print ``<first argument> <time.time()>`` for each message taken off :data:`QUEUE`."""
    client = redis_client(broker)
    got = 0
    lines = []
    while got < count and time.time() < until:
        item = client.blpop([QUEUE], timeout=0.5)
        if item is None:
            continue
        at = time.time()
        with client.pipeline(transaction=True) as pipe:
            pipe.lrange(QUEUE, 0, -1)
            pipe.delete(QUEUE)
            rest, _ = pipe.execute()
        later = time.time()
        lines.append(f"{argument(item[1])} {at:.6f}")
        lines += [f"{argument(raw)} {later:.6f}" for raw in rest]
        got += 1 + len(rest)
    print("\n".join(lines), flush=True)


def run_editor(driver: type[Driver], target: str, broker: str, edits: int) -> None:
    """Edit task i (0, 1, ...) to fall due now, then wait until its message is published;
    print the times as one JSON list. Each edit starts 0.2-5.2 s (uniform, seeded) after
    the previous one was published: with beat's longest sleep 5 s, the edits land at
    evenly spread points of it."""
    client = redis_client(broker)
    rng = random.Random(16)
    results = []
    for i in range(edits):
        time.sleep(rng.uniform(0.2, 5.2))
        began, committed = driver.edit_due(target, task_name(i), datetime.now(UTC))
        try:
            item = client.blpop([QUEUE], timeout=EDIT_WAIT)
        except Exception:  # redis-py may time the blocking read out itself: not seen
            item = None
        at = time.time() if item is not None else None
        results.append(
            {
                "task": i,
                "began": began,
                "committed": committed,
                "published": at,
                "argument": None if item is None else argument(item[1]),
            }
        )
    print(json.dumps(results), flush=True)


# -- the parent: one child per fill and per measurement ------------------------------------


def series(
    driver: type[Driver], phases: list[str], opts: argparse.Namespace, child: list[str]
) -> list[dict[str, Any]]:
    """Run the chosen live ``phases`` for ``driver``, each on a store filled for it."""
    name = driver.key
    points: list[dict[str, Any]] = []
    with driver.target(opts) as target:
        for phase in phases:
            point: dict[str, Any] = {
                "scheduler": name,
                "phase": phase,
                "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                "load_before": load(),
            }
            common = ["--broker", opts.broker, "--budget", str(opts.budget)]
            if phase == "lateness":
                t0 = datetime.now(UTC) + timedelta(seconds=LEAD)
                spec = [t0.isoformat(), str(opts.late_window), str(opts.late_tasks)]
                filled = run([*child, "--fill-spread", name, target, *spec], timeout=300)
                timeout = LEAD + opts.late_window + GRACE + 120
                args = ["--live", "lateness", name, target, *spec]
            else:
                n = opts.dispatch_tasks if phase == "dispatch" else opts.edit_tasks
                filled = run([*child, "--fill", name, target, str(n)], timeout=opts.budget * 4)
                if phase == "dispatch":
                    timeout = opts.budget + 300  # the close after a finished dispatch
                    args = ["--live", "dispatch", name, target, str(n)]
                else:
                    timeout = opts.edits * (30 + EDIT_WAIT) + 120
                    args = ["--live", "edit", name, target, str(opts.edits)]
                point["n"] = n
            if filled.get("status") == "failed":
                point.update(filled)
                points.append(point)
                log(f"{name} {phase}: fill failed\n{filled['reason']}")
                continue
            point["fill_s"] = filled.get("fill_s")
            driver.settle(target)
            point.update(run([*child, *args, *common], timeout=timeout))
            point["load_after"] = load()
            points.append(point)
            log(f"{name} {phase}: {json.dumps(point)}")
    return points
