"""Run the demo: store four periodic tasks, then a worker with embedded beat.

    python -m examples.demo [--seconds N]

Everything lives under ``var/demo`` (SQLite store, filesystem broker); no server needed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from celery_cronstore import Store, TaskNotFoundError
from examples.demo_app import app

TASKS = [
    ("every-5s-calendar", "demo.say", "*:*:0/5", ["calendar timer *:*:0/5"], None),
    ("every-minute-cron", "demo.say", "* * * * *", ["cron timer * * * * *"], None),
    ("every-3s-interval", "demo.say", "every 3s", ["interval timer every 3s"], None),
    ("poll-mailbox-42", "demo.poll_mailbox", "every 4s", [42], ("mail_channel", "42")),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=None, help="stop after N seconds")
    options = parser.parse_args(argv)
    store = Store.from_app(app)
    store.upgrade()
    for name, task, timer, args, owner in TASKS:
        try:
            store.get(name)
        except TaskNotFoundError:
            store.add(name, task=task, timer=timer, args=args, owner=owner)
    for record in store.list():
        print(f"[demo] stored {record.name:<22} {record.timer_kind:<9} {record.timer}")
    store.close()
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "examples.demo_app",
        "worker",
        "-B",
        "-S",
        "celery_cronstore.Scheduler",
        "--pool",
        "solo",
        "--loglevel",
        "INFO",
    ]
    print("[demo] starting:", " ".join(command[2:]), flush=True)
    try:
        completed = subprocess.run(command, timeout=options.seconds, check=False)
    except subprocess.TimeoutExpired:
        print(f"[demo] stopped after {options.seconds:g}s", flush=True)
        return 0
    except KeyboardInterrupt:
        return 0
    return completed.returncode


if __name__ == "__main__":
    raise SystemExit(main())
