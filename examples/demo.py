"""Run the demo: store four periodic tasks, then a worker with embedded beat.

    python -m examples.demo [--seconds N]

Everything lives under ``var/demo`` (SQLite store, filesystem broker); no server needed.
The worker (and the beat process it forks) run in a process group of their own that the
demo stops on every way out: Ctrl-C, SIGTERM or SIGHUP to the demo, ``--seconds``, or the
worker ending by itself. A stop asked for exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from types import FrameType

from celery_cronstore import Store, TaskNotFoundError
from examples.demo_app import app

#: (name, task, timer, args, owner); each fires within seconds except the cron one, which
#: fires at the start of the next minute.
TASKS = [
    ("every-3s-interval", "demo.say", "every 3s", ["interval timer every 3s"], None),
    ("poll-mailbox-42", "demo.poll_mailbox", "every 4s", [42], ("mail_channel", "42")),
    ("every-5s-calendar", "demo.say", "*:*:0/5", ["calendar timer *:*:0/5"], None),
    ("every-minute-cron", "demo.say", "* * * * *", ["cron timer * * * * * (each minute)"], None),
]

#: Seconds the worker gets to shut down warmly before its whole group is killed.
STOP_GRACE = 10.0


class _Stop(Exception):
    """A signal asked the demo to stop."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stop(signum: int, _frame: FrameType | None) -> None:
    raise _Stop(signum)


def worker_command() -> list[str]:
    """Return the worker command the demo runs (``--scheduler``: ``-S`` is ``--statedb``)."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "examples.demo_app",
        "worker",
        "-B",
        "--scheduler",
        "celery_cronstore.Scheduler",
        "--pool",
        "solo",
        "--loglevel",
        "INFO",
    ]


def store_tasks() -> None:
    """Create the store's tables and the demo's tasks (kept across runs)."""
    store = Store.from_app(app)
    try:
        store.upgrade()
        for name, task, timer, args, owner in TASKS:
            try:
                store.get(name)
            except TaskNotFoundError:
                store.add(name, task=task, timer=timer, args=args, owner=owner)
        for record in store.list():
            print(f"[demo] stored {record.name:<22} {record.timer_kind:<9} {record.timer}")
    finally:
        store.close()
    print("[demo] beat also syncs config-heartbeat (every 7s) from beat_schedule", flush=True)


def stop_group(process: subprocess.Popen[bytes], grace: float = STOP_GRACE) -> None:
    """Stop the worker's process group: SIGTERM (warm shutdown), then SIGKILL after ``grace``.

    The whole group is signalled, so the embedded beat (a child of the worker) goes too,
    and the demo waits until no process of the group is left.
    """
    group = process.pid
    _signal_group(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        process.poll()
        if not _group_alive(group):
            break
        time.sleep(0.1)
    else:
        _signal_group(group, signal.SIGKILL)
    process.wait()
    # An orphaned beat child is reaped by init; do not hang where init never reaps.
    deadline = time.monotonic() + 5.0
    while _group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.05)


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signum)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member exists (e.g. a zombie being reaped)
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=None, help="stop after N seconds")
    options = parser.parse_args(argv)
    # Until the worker runs, a signal simply ends the demo; afterwards it stops the worker.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_stop)
    process: subprocess.Popen[bytes] | None = None
    try:
        store_tasks()
        command = worker_command()
        shown = ["python", *command[1:]]
        print(f"[demo] running: {shlex.join(shown)}", flush=True)
        # A process group of its own: Ctrl-C reaches only the demo, which stops the group.
        process = subprocess.Popen(command, start_new_session=True)
        print(f"[demo] worker and beat run in process group {process.pid}", flush=True)
        deadline = None if options.seconds is None else time.monotonic() + options.seconds
        while process.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                print(f"[demo] stopping after {options.seconds:g}s", flush=True)
                return 0
            time.sleep(0.2)
        print(f"[demo] the worker exited with {process.returncode}", flush=True)
        return 0 if process.returncode == 0 else 1
    except _Stop as stop:
        print(f"\n[demo] {stop}: stopping", flush=True)
        return 0
    finally:
        # Signals that arrive while stopping must not cut the cleanup short.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        if process is not None:
            stop_group(process)
            print("[demo] worker and beat stopped; nothing left running", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
