"""Differential run: calendar timers against ``systemd-analyze calendar`` (systemd 252).

Run from the repository root::

    .venv/bin/python benchmarks/calendar_differential.py            # the large run
    .venv/bin/python benchmarks/calendar_differential.py --quick    # a few seconds

For every zone and every DST transition in 2026-2028, run many expressions (every N
hours, every N minutes, every N months, daily and hourly shorthands, fixed times next to
the change, and random expressions) from base times just before, at and after the
change, and print how many cases ran, how many disagree with systemd where systemd
answers, and how many where systemd gives up ("Infinite loop in calendar calculation")
and we answer with a later fire. The exit status is 1 when anything disagrees.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "timers")]

from systemd_reference import Tally, compare, zone_transitions  # noqa: E402

ZONES = (
    "Europe/Dublin",
    "Africa/Casablanca",
    "Africa/El_Aaiun",
    "Pacific/Chatham",
    "Australia/Lord_Howe",
    "Europe/London",
    "America/New_York",
    "America/Santiago",
    "Europe/Kyiv",
    "Europe/Berlin",
)


def step_expressions() -> list[str]:
    """Return every-N-hours, every-N-minutes and every-N-months steps and shorthands."""
    out = ["hourly", "daily", "minutely", "weekly", "monthly", "Mon..Sun 00:00", "*:*:0/20"]
    for n in range(2, 13):
        out += [f"*-*-* {s}/{n}:00" for s in range(n)]
        out.append(f"*-*-* {n % 3}/{n}:{(7 * n) % 60:02d}")
    for n in (5, 7, 10, 13, 15, 17, 20, 25, 30, 45, 50):
        out += [f"*:{s}/{n}" for s in sorted({0, 1, 5, n // 2, n - 1})]
    for n in range(2, 7):
        out += [f"*-{s}/{n}-01" for s in range(1, n + 1)]
        out += [f"*-{s}/{n}-1..3 0/6:30" for s in (1, 2)]
    out += [f"*-*-* {h:02d}:{m:02d}" for h in range(6) for m in (0, 15, 30, 45, 59)]
    out += ["*-*-* 23:30", "*-*-* 0..3:0/20", "*-*-* 1..3:*:0/30", "Sun *-*-* 01:00"]
    return list(dict.fromkeys(out))


def random_expressions(rng: random.Random, count: int) -> list[str]:
    """Return ``count`` random hour/minute/month steps and lists."""
    out = []
    for _ in range(count):
        hour = rng.choice(
            (
                "*",
                f"{rng.randint(0, 5)}/{rng.randint(1, 9)}",
                f"{rng.randint(0, 3)}..{rng.randint(1, 6)}",
                str(rng.randint(0, 4)),
            )
        )
        minute = rng.choice(
            (
                "00",
                "*",
                f"{rng.randint(0, 59)}/{rng.randint(2, 59)}",
                f"{rng.randint(0, 30)},{rng.randint(31, 59)}",
            )
        )
        second = rng.choice(("00", "00", f"0/{rng.randint(5, 30)}", "30"))
        date = rng.choice(
            (
                "",
                "",
                f"*-{rng.randint(1, 6)}/{rng.randint(1, 6)}-*",
                "*-*~01",
                f"*-*-{rng.randint(1, 28)}/{rng.randint(1, 9)}",
            )
        )
        out.append(f"{date} {hour}:{minute}:{second}".strip())
    return list(dict.fromkeys(out))  # fmt: skip


def bases(zone: str, years: range) -> list[datetime]:
    """Return base times around every transition of ``zone`` in ``years``."""
    out = []
    for moment in zone_transitions(zone, years):
        out += [moment - timedelta(hours=27), moment - timedelta(hours=3),
                moment - timedelta(minutes=50), moment - timedelta(seconds=1),
                moment + timedelta(minutes=10)]  # fmt: skip
    return out


def run(zones: tuple[str, ...], years: range, random_count: int, base_stride: int) -> Tally:
    rng = random.Random(20260329)
    expressions = step_expressions()
    total = Tally()
    for zone in zones:
        extra = random_expressions(rng, random_count)
        picked = bases(zone, years)[::base_stride]
        for base in picked:
            total.add(compare(list(dict.fromkeys(expressions + extra)), zone, base))
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a sample of a few seconds")
    parser.add_argument("--zone", action="append", help="only these zones (repeatable)")
    parser.add_argument("--show", type=int, default=20, help="disagreements to print")
    args = parser.parse_args(argv)
    zones = tuple(args.zone) if args.zone else ZONES
    started = time.monotonic()
    if args.quick:
        tally = run(zones, range(2026, 2027), random_count=10, base_stride=7)
    else:
        tally = run(zones, range(2026, 2029), random_count=150, base_stride=1)
    elapsed = time.monotonic() - started
    for line in (tally.disagreements + tally.gave_up_problems)[: args.show]:
        print("  " + line)
    print(f"zones: {', '.join(zones)}")
    print(f"cases run:                              {tally.cases}")
    print(f"elapses compared with systemd's:        {tally.elapses}")
    print(f"disagreements where systemd answers:    {len(tally.disagreements)}")
    print(f"cases where systemd gives up:           {tally.gave_up}")
    print(f"  ... and we answer with a later fire:  {tally.gave_up_we_answer}")
    print(f"  ... and we do not:                    {len(tally.gave_up_problems)}")
    print(f"time: {elapsed:.1f} s")
    return 1 if tally.disagreements or tally.gave_up_problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
