"""Wake on change (PostgreSQL): how long from an edit's COMMIT until beat is awake.

    .venv/bin/python benchmarks/wake.py [--edits 200] [--pg-admin URL]

A real :class:`celery_cronstore.Scheduler` (``cronstore_poll_interval`` 30 s, nothing
due) ticks in a thread of its own against a scratch database; it sleeps inside ``tick()``
on its LISTEN connection. The main thread edits one row from another connection, as an
admin process would (``UPDATE ... SET next_run`` one second sooner each time, so the
trigger notifies), and takes the time just before ``COMMIT``; the figure is from there to
the moment that ``tick()`` returns. Printed: p50 / p99 / max over ``--edits`` edits, and
the same for the bare floor (a second connection LISTENing directly with psycopg).
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import threading
import time
from datetime import timedelta

import psycopg
import sqlalchemy as sa

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from celery import Celery  # noqa: E402

from celery_cronstore.beat.scheduler import Scheduler  # noqa: E402
from celery_cronstore.store import Store  # noqa: E402
from harness.scratch import scratch_database  # noqa: E402

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values: list[float]) -> str:
    return (
        f"p50 {percentile(values, 0.5):.2f} ms, p99 {percentile(values, 0.99):.2f} ms, "
        f"max {max(values):.2f} ms"
    )


def measure(url: str, edits: int) -> tuple[list[float], list[float]]:
    store = Store(url)
    store.upgrade()
    store.add("edited", task="bench.noop", timer="2099-01-01T00:00:00Z")
    app = Celery("wake-bench", broker="memory://", set_as_current=False)
    app.conf.update(
        cronstore_url=url,
        cronstore_poll_interval=30.0,
        cronstore_sync_beat_schedule=False,
        cronstore_require_registered=False,
    )
    scheduler = Scheduler(app, lazy=True)
    woke = threading.Event()
    woke_at = [0.0]
    stop = threading.Event()

    def beat_loop() -> None:
        while not stop.is_set():
            left = scheduler.tick()
            woke_at[0] = time.perf_counter()
            woke.set()
            if left > 0:  # not listening (yet): Celery would sleep this
                time.sleep(min(left, 0.05))

    thread = threading.Thread(target=beat_loop, daemon=True)
    thread.start()
    time.sleep(0.5)  # connected, listening, asleep

    raw_url = sa.make_url(url).set(drivername="postgresql")
    floor_conn = psycopg.connect(raw_url.render_as_string(hide_password=False), autocommit=True)
    floor_conn.execute("LISTEN cronstore_changed")
    editor = store.engine.connect()
    beat_ms: list[float] = []
    floor_ms: list[float] = []
    next_run = store.now().replace(year=2098)
    for i in range(edits):
        next_run -= timedelta(seconds=1)  # sooner each time: the trigger notifies
        editor.execute(
            sa.text("UPDATE cronstore_periodic_task SET next_run = :n WHERE name = 'edited'"),
            {"n": next_run.replace(tzinfo=None)},
        )
        time.sleep(0.02 if i else 0.2)  # beat is back asleep on its socket
        woke.clear()
        t0 = time.perf_counter()
        editor.commit()
        select.select([floor_conn.fileno()], [], [], 5)  # the floor, timed in this thread
        floor_at = time.perf_counter()
        if not woke.wait(5):
            raise SystemExit(f"edit {i}: beat did not wake within 5 s")
        beat_ms.append((woke_at[0] - t0) * 1e3)
        list(floor_conn.notifies(timeout=0, stop_after=1))
        floor_ms.append((floor_at - t0) * 1e3)
    stop.set()
    editor.close()
    floor_conn.close()
    # Wake the thread's last wait, then close.
    with store.begin() as conn:
        conn.execute(sa.text("UPDATE cronstore_periodic_task SET next_run = next_run"))
        conn.execute(
            sa.text("UPDATE cronstore_periodic_task SET next_run = next_run - interval '1s'")
        )
    thread.join(35)
    scheduler.close()
    store.close()
    return beat_ms, floor_ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edits", type=int, default=200)
    parser.add_argument("--pg-admin", default=DEFAULT_PG)
    args = parser.parse_args(argv)
    with scratch_database(args.pg_admin, prefix="bench_wake") as scratch:
        beat_ms, floor_ms = measure(scratch.url, args.edits)
    print(f"# {args.edits} edits, commit -> beat awake (tick() returns), PostgreSQL")
    print(f"beat : {summary(beat_ms)}")
    print(f"floor: {summary(floor_ms)} (a bare LISTEN connection, same commits)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
