"""Side-by-side benchmark: celery-cronstore, django-celery-beat, sqlalchemy-celery-beat, RedBeat.

Runs in the separate benchmark environment (``make bench-compare`` creates ``.venv-bench``;
none of the other schedulers is a dependency of this project):

    .venv-bench/bin/python benchmarks/compare.py
        [--sizes 100,1000,10000,100000] [--cronstore-sizes ...,1000000]
        [--schedulers cronstore,django,sqlalchemy,redbeat] [--budget 300]
    .venv-bench/bin/python benchmarks/compare.py --plot-only   # redraw from the JSON

For each scheduler and each number of periodic tasks N, a fill process writes N hourly
cron tasks (``<m> * * * *`` in UTC, minute m staggered so that nothing is due for at least
15 minutes), each scheduler through its own models; then a fresh measuring process builds
the scheduler's own ``celery.beat.Scheduler`` subclass on a Celery app whose broker is
``memory://`` and drives ``tick()`` the way ``celery beat`` does. It measures startup,
idle ticks, RSS, and the time to send K = min(N, 1000) tasks made due at once. The SQL
schedulers each get a scratch PostgreSQL database on the same server; RedBeat uses keys
under its own prefix in one Redis database. Results go to benchmarks/results/compare.json
and docs/img/compare-*.png; see docs/comparison.md for the method. The
schedulers' drivers, the harness and the report live in benchmarks/comparison/.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from datetime import datetime, timezone
from typing import Any

from comparison import SUBJECTS, django_beat, harness, live, report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS = "redis://127.0.0.1:6379/14"
DEFAULT_BROKER = "redis://127.0.0.1:6379/13"
SCHEDULERS = tuple(SUBJECTS)
PHASES = ("series", "dispatch", "lateness", "edit")


def parse_sizes(text: str) -> list[int]:
    return sorted({int(s.replace("_", "")) for s in text.split(",") if s.strip()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000,100000", help="N for every scheduler")
    parser.add_argument(
        "--cronstore-sizes", default="", help="N for celery-cronstore (default: --sizes)"
    )
    parser.add_argument("--schedulers", default=",".join(SCHEDULERS))
    parser.add_argument("--pg-admin", default=DEFAULT_PG, help="URL allowed to CREATE DATABASE")
    parser.add_argument("--redis", default=DEFAULT_REDIS, help="RedBeat's Redis database")
    parser.add_argument("--ticks", type=int, default=50, help="idle ticks measured (at most)")
    parser.add_argument(
        "--idle-seconds", type=float, default=30.0, help="stop idle ticks after this long"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=300.0,
        help="seconds one measurement (startup + idle + dispatch) may take; past it the "
        "scheduler's series stops",
    )
    parser.add_argument("--out", default=os.path.join(HERE, "results", "compare.json"))
    parser.add_argument("--img", default=os.path.join(ROOT, "docs", "img"))
    parser.add_argument(
        "--django-conn-max-age",
        default="0",
        help="Django CONN_MAX_AGE for django-celery-beat: seconds, or 'none' for persistent "
        "connections (default 0, Django's default)",
    )
    parser.add_argument(
        "--phases",
        default=",".join(PHASES),
        help="series (memory:// broker, every N) and the Redis-broker measurements: "
        "dispatch, lateness, edit",
    )
    parser.add_argument(
        "--broker", default=DEFAULT_BROKER, help="Redis database the live phases publish to"
    )
    parser.add_argument(
        "--dispatch-tasks", type=int, default=10_000, help="tasks due at once (dispatch)"
    )
    parser.add_argument("--late-tasks", type=int, default=1_000, help="tasks (lateness)")
    parser.add_argument(
        "--late-window", type=float, default=60.0, help="seconds their fires spread over"
    )
    parser.add_argument("--edits", type=int, default=20, help="edits made one by one (edit)")
    parser.add_argument("--edit-tasks", type=int, default=1_000, help="tasks stored (edit)")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the results in --out of what this run does not measure",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch databases")
    parser.add_argument("--plot-only", action="store_true", help="redraw from --out")
    parser.add_argument(
        "--fill", nargs=3, metavar=("SCHEDULER", "TARGET", "N"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--measure", nargs=3, metavar=("SCHEDULER", "TARGET", "N"), help=argparse.SUPPRESS
    )
    parser.add_argument("--fill-spread", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--live", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--observe", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--editor", nargs=4, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    live.SCRIPT[:] = [os.path.abspath(__file__)]
    subjects = list(SUBJECTS.values())
    age = opts.django_conn_max_age.strip().lower()
    if age != "none" and not age.isdigit():
        parser.error(f"--django-conn-max-age must be seconds or 'none', got {age!r}")
    django_beat.CONN_MAX_AGE = None if age == "none" else int(age)

    if opts.fill:
        name, target, n = opts.fill
        print(json.dumps(harness.fill(SUBJECTS[name].driver, target, int(n))))
        return 0
    if opts.fill_spread:
        name, target, t0, window, count = opts.fill_spread
        fires = live.spread(datetime.fromisoformat(t0), float(window), int(count))
        t = time.perf_counter()
        SUBJECTS[name].driver.fill_spread(target, fires, datetime.now(timezone.utc))
        print(json.dumps({"fill_s": time.perf_counter() - t}))
        return 0
    if opts.live:
        phase, name, target, *rest = opts.live
        driver = SUBJECTS[name].driver
        if phase == "dispatch":
            figures = live.dispatch(driver, target, int(rest[0]), opts.budget, opts.broker)
        elif phase == "lateness":
            t0, window, count = rest
            fires = live.spread(datetime.fromisoformat(t0), float(window), int(count))
            figures = live.lateness(driver, target, fires, opts.broker)
        else:
            figures = live.edit(driver, target, int(rest[0]), opts.broker)
        print(json.dumps(figures))
        return 0
    if opts.observe:
        broker, count, until = opts.observe
        live.observe(broker, int(count), float(until))
        return 0
    if opts.editor:
        name, target, broker, edits = opts.editor
        live.run_editor(SUBJECTS[name].driver, target, broker, int(edits))
        return 0
    if opts.measure:
        name, target, n = opts.measure
        figures = harness.measure(
            SUBJECTS[name].driver, target, int(n), opts.ticks, opts.idle_seconds, opts.budget
        )
        print(json.dumps(figures))
        return 0

    if not opts.plot_only:
        chosen = [s.strip() for s in opts.schedulers.split(",") if s.strip()]
        unknown = sorted(set(chosen) - set(SUBJECTS))
        if unknown:
            parser.error(f"unknown scheduler(s) {', '.join(unknown)}; choose from {SCHEDULERS}")
        missing = [
            SUBJECTS[key].distribution
            for key in chosen
            if importlib.util.find_spec(SUBJECTS[key].module) is None
        ]
        if missing or importlib.util.find_spec("matplotlib") is None:
            raise SystemExit(
                f"missing in {sys.executable}: {', '.join(missing) or 'matplotlib'}; "
                "run `make bench-compare` (it installs them into .venv-bench)"
            )
        phases = [p.strip() for p in opts.phases.split(",") if p.strip()]
        if set(phases) - set(PHASES):
            parser.error(f"unknown phase(s) in {opts.phases!r}; choose from {PHASES}")
        sizes = parse_sizes(opts.sizes)
        ours = parse_sizes(opts.cronstore_sizes) if opts.cronstore_sizes else sizes
        environment = report.environment(opts, subjects)
        series_settings = {
            "sizes": sizes,
            "cronstore_sizes": ours,
            "ticks": opts.ticks,
            "idle_seconds": opts.idle_seconds,
            "budget_s": opts.budget,
            "broker": "memory://",
            "django_conn_max_age": django_beat.CONN_MAX_AGE,
        }
        live_settings = {
            "broker": opts.broker,
            "queue": live.QUEUE,
            "budget_s": opts.budget,
            "dispatch_tasks": opts.dispatch_tasks,
            "late_tasks": opts.late_tasks,
            "late_window_s": opts.late_window,
            "late_lead_s": live.LEAD,
            "late_grace_s": live.GRACE,
            "edits": opts.edits,
            "edit_tasks": opts.edit_tasks,
        }
        old: dict[str, Any] = {}
        if opts.merge and os.path.exists(opts.out):
            with open(opts.out, encoding="utf-8") as handle:
                old = json.load(handle)
        ran_series = "series" in phases
        live_phases = [p for p in phases if p != "series"]
        data: dict[str, Any] = {
            "environment": environment if ran_series else old.get("environment", environment),
            "settings": series_settings if ran_series else old.get("settings", series_settings),
            "results": [
                p for p in old.get("results", []) if not (ran_series and p["scheduler"] in chosen)
            ],
            "live_environment": environment
            if live_phases
            else old.get("live_environment", environment),
            "live_settings": live_settings
            if live_phases
            else old.get("live_settings", live_settings),
            "live": [
                p
                for p in old.get("live", [])
                if not (p["scheduler"] in chosen and p["phase"] in live_phases)
            ],
        }
        started = time.perf_counter()
        # What every child process is started with, before its --fill or --measure.
        child = [os.path.abspath(__file__), "--django-conn-max-age", age]
        for name in chosen:
            driver = SUBJECTS[name].driver
            if ran_series:
                sizes_of = ours if name == "cronstore" else sizes
                data["results"] += harness.series(driver, sizes_of, opts, child)
            if live_phases:
                data["live"] += live.series(driver, live_phases, opts, child)
        order = {key: i for i, key in enumerate(SUBJECTS)}
        data["results"].sort(key=lambda p: (order.get(p["scheduler"], 99), p["n"]))
        data["live"].sort(key=lambda p: (order.get(p["scheduler"], 99), PHASES.index(p["phase"])))
        took = round(time.perf_counter() - started)
        if ran_series:
            data["environment"]["total_s"] = took
        if live_phases:
            data["live_environment"]["total_s"] = took
        os.makedirs(os.path.dirname(opts.out), exist_ok=True)
        with open(opts.out, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
            handle.write("\n")
    with open(opts.out, encoding="utf-8") as handle:
        data = json.load(handle)
    for path in report.plots(data, opts.img, subjects):
        harness.log(f"wrote {os.path.relpath(path, ROOT)}")
    env = ", ".join(f"{k} {v}" for k, v in data["environment"].items())
    if data.get("live"):
        env += "\n\nReal broker: " + ", ".join(
            f"{k} {v}" for k, v in data.get("live_environment", {}).items()
        )
    print(f"# Scheduler comparison\n\n{env}\n\n{report.tables(data, subjects)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
