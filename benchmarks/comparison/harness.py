"""The two sides of a measurement: the child processes that fill and measure one
scheduler, and the parent that starts them, one per (scheduler, N), in a fresh process each.

A child prints its figures as one JSON line after each phase, so that a process killed at
its time limit still reports what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from typing import Any

from .base import DUE_LAST_RUN, MINUTE_GAP, TASKS, Driver, task_name

UTC = timezone.utc

# -- the child: fill or measure one scheduler ------------------------------------------------


def noop(*args: Any, **kwargs: Any) -> None:
    """Stand for the filled tasks in beat's app (beat only sends them)."""


def status_mb(field: str) -> float:
    """Return a memory figure of this process in MB: ``VmRSS`` now, ``VmHWM`` its peak.

    The peak is VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over exec(), so
    a child would report its parent's peak if that was higher.
    """
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def checkpoint(out: dict[str, Any]) -> None:
    print(json.dumps(out), flush=True)


def fill(driver: type[Driver], target: str, n: int) -> dict[str, Any]:
    """Fill the store with ``n`` tasks; return the time it took and the fill instant."""
    now = datetime.now(UTC).replace(microsecond=0)
    t = time.perf_counter()
    driver.fill(target, n, now)
    return {"fill_s": time.perf_counter() - t, "fill_time": now.isoformat()}


def make_app(broker: str, queue: str | None = None) -> Any:
    """Return the Celery app every scheduler's beat runs on (the same settings for all)."""
    from celery import Celery

    app = Celery("compare", broker=broker, set_as_current=True)
    app.conf.update(
        timezone="UTC",
        enable_utc=True,
        result_expires=None,  # no built-in celery.backend_cleanup entry for anyone
        beat_max_loop_interval=5,
        broker_connection_retry_on_startup=True,
    )
    if queue is not None:
        app.conf.task_default_queue = queue
    for task in TASKS:  # registered: every scheduler sends through Task.apply_async
        app.task(name=task)(noop)
    return app


def measure(
    driver: type[Driver], target: str, n: int, ticks: int, idle_s: float, budget: float
) -> dict[str, Any]:
    """Build the scheduler in this fresh process and measure it; return the figures."""
    started = time.perf_counter()
    from celery.signals import after_task_publish

    out: dict[str, Any] = {}
    sent = [0]

    def count(**_: Any) -> None:
        sent[0] += 1

    after_task_publish.connect(count, weak=False)
    app = make_app("memory://")
    # Beat imports the scheduler class before it builds it: not part of the startup figure.
    cls = driver.load(app, target)
    driver.block_in_tick(False)  # bare ticks are timed, not the sleeps after them
    out["rss_base_mb"] = status_mb("VmRSS")
    out["import_s"] = time.perf_counter() - started

    t0 = time.perf_counter()
    scheduler = driver.build(app, cls)
    t1 = time.perf_counter()
    first = scheduler.tick()
    t2 = time.perf_counter()
    out.update(construct_s=t1 - t0, first_tick_s=t2 - t1, startup_s=t2 - t0)
    out["rss_startup_mb"] = status_mb("VmRSS")
    checkpoint(out)
    if sent[0]:
        raise SystemExit(f"{sent[0]} task(s) sent at startup: the fill made something due")
    if t2 - t0 > budget:
        out.update(status="over budget", reason=f"startup {t2 - t0:.0f}s > {budget:.0f}s")
        scheduler.close()
        out["peak_rss_mb"] = status_mb("VmHWM")
        return out
    del first

    # Idle ticks: three of warm-up, then up to `ticks` ticks or `idle_s` seconds.
    samples: list[float] = []
    cpu: list[float] = []  # this process's CPU time: less sensitive to a busy machine
    began = time.perf_counter()
    for i in range(ticks + 3):
        t = time.perf_counter()
        c = time.process_time()
        sleep = scheduler.tick()
        if i >= 3:
            samples.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        if sleep <= 0 or sent[0]:
            raise SystemExit("an idle tick sent something: the fill is wrong")
        if i >= 8 and time.perf_counter() - began > idle_s:
            break
    ordered = sorted(samples)
    out.update(
        idle_ticks=len(samples),
        idle_median_ms=statistics.median(samples) * 1e3,
        idle_p95_ms=ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1e3,
        idle_cpu_median_ms=statistics.median(cpu) * 1e3,
        rss_idle_mb=status_mb("VmRSS"),
    )
    checkpoint(out)

    # Dispatch: move the last run of K tasks two hours back (each scheduler's own way of
    # storing it), then run beat's loop (tick, sleep what it asks) until K were sent.
    k = min(n, 1000)
    names = [task_name(i) for i in range(k)]
    driver.block_in_tick(True)
    t = time.perf_counter()
    driver.make_due(app, target, names, datetime.now(UTC) - DUE_LAST_RUN)
    out["make_due_s"] = time.perf_counter() - t
    deadline = budget - (time.perf_counter() - t0)
    rounds = 0
    slept = 0.0
    first_tick = None
    t = time.perf_counter()
    c = time.process_time()
    while sent[0] < k:
        elapsed = time.perf_counter() - t
        if elapsed > deadline:
            break
        tick_start = time.perf_counter()
        sleep = scheduler.tick()
        rounds += 1
        if first_tick is None:
            first_tick = time.perf_counter() - tick_start
        if sent[0] < k and sleep > 0:
            pause = min(sleep, max(0.0, deadline - (time.perf_counter() - t)))
            time.sleep(pause)
            slept += pause
    dispatch = time.perf_counter() - t
    out.update(
        dispatch_cpu_s=time.process_time() - c,
        due=k,
        sent=sent[0],
        dispatch_s=dispatch if sent[0] >= k else None,
        dispatch_elapsed_s=dispatch,
        dispatch_ticks=rounds,
        dispatch_first_tick_s=first_tick,
        dispatch_slept_s=slept,
        rss_after_dispatch_mb=status_mb("VmRSS"),
    )
    if sent[0] < k:
        out.update(
            status="over budget",
            reason=f"{sent[0]} of {k} sent after {dispatch:.0f}s (budget {budget:.0f}s in all)",
        )
    else:
        out["status"] = "ok"
    checkpoint(out)
    # Drop the messages from the in-memory broker, then let the scheduler save its state.
    try:
        with app.connection_for_write() as conn:
            out["queued"] = conn.default_channel.queue_purge("celery") or 0
    except Exception as exc:  # the queue may never have been declared
        out["queued"] = f"{type(exc).__name__}: {exc}"
    t = time.perf_counter()
    scheduler.close()
    out["close_s"] = time.perf_counter() - t
    out["peak_rss_mb"] = status_mb("VmHWM")
    return out


# -- the parent: one child per fill and per measurement ------------------------------------


def run(args: list[str], timeout: float) -> dict[str, Any]:
    """Run ``args`` (a script and its options) in a fresh interpreter; return its last JSON line."""
    command = [sys.executable, *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        partial = last_json(exc.stdout)
        phase = "at close" if partial.get("status") == "ok" else "before the end"
        partial.update(status="over budget", reason=f"killed {phase} after {timeout:.0f}s")
        return partial
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        return {**last_json(done.stdout), "status": "failed", "reason": tail}
    return last_json(done.stdout)


def last_json(output: str | bytes | None) -> dict[str, Any]:
    if isinstance(output, bytes):
        output = output.decode("utf-8", "replace")
    lines = [line for line in (output or "").splitlines() if line.startswith("{")]
    return dict(json.loads(lines[-1])) if lines else {}


def load() -> float:
    return os.getloadavg()[0]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def series(
    driver: type[Driver], sizes: list[int], opts: argparse.Namespace, child: list[str]
) -> list[dict[str, Any]]:
    """Fill and measure ``driver`` at each N of ``sizes``; stop at the first failure.

    ``child`` is the command line prefix of a child process (the script and the options
    every child needs); ``--fill`` or ``--measure`` and their arguments are added to it.
    """
    name = driver.key
    points: list[dict[str, Any]] = []
    with driver.target(opts) as target:
        for n in sizes:
            point: dict[str, Any] = {"scheduler": name, "n": n, "load_before": load()}
            # Nothing filled is due before MINUTE_GAP minutes after the fill starts; the
            # measurement must end (less a minute's margin) before then.
            quiet_until = time.monotonic() + (MINUTE_GAP - 1) * 60
            filled = run([*child, "--fill", name, target, str(n)], timeout=opts.budget * 4)
            if filled.get("status") == "failed":
                point.update(filled)
                points.append(point)
                log(f"{name} N={n:,}: fill failed\n{filled['reason']}")
                break
            driver.settle(target)
            point.update(filled)
            budget = min(opts.budget, quiet_until - time.monotonic() - 60)
            measured = run(
                [
                    *child,
                    *("--measure", name, target, str(n)),
                    *("--ticks", str(opts.ticks), "--idle-seconds", str(opts.idle_seconds)),
                    *("--budget", str(budget)),
                ],
                timeout=max(1.0, quiet_until - time.monotonic()),
            )
            point.update(measured)
            point["load_after"] = load()
            points.append(point)
            log(f"{name} N={n:,}: {json.dumps(point)}")
            if point.get("status") != "ok":
                log(f"{name}: series stopped at N={n:,} ({point.get('reason')})")
                break
    return points
