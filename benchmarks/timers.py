"""Benchmark the timers: median microseconds per parse and per next_after.

Run from the repository root::

    .venv/bin/python benchmarks/timers.py            # UTC
    .venv/bin/python benchmarks/timers.py --tz Europe/Berlin --quick

Prints two tables:

1. ``parse_timer`` and ``next_after`` for calendar, cron and interval expressions;
2. side by side, for each cron expression: croniter's
   ``croniter(expr, start).get_next(datetime)`` (what a caller of croniter pays per fire
   time), our cron ``next_after``, and our calendar ``next_after`` on the equivalent
   calendar expression. The goal is a calendar/croniter ratio of at most 1.0.

Each figure is the median over ``--samples`` batches of the per-call mean of
``--batch`` calls (``time.perf_counter_ns``); the start instants cycle through 97
points spread over two years, so no search is answered from a warm position.
If the calendar timer cannot be imported its cells read ``n/a``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

try:
    import celery_cronstore  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from croniter import croniter

from celery_cronstore.timers import parse_timer

UTC = timezone.utc

#: cron expression -> its calendar (systemd OnCalendar=) equivalent.
PAIRS: tuple[tuple[str, str], ...] = (
    ("*/5 * * * *", "*:0/5"),
    ("30 9 * * 1-5", "Mon..Fri *-*-* 09:30"),
    ("0 0 1 * *", "*-*-01 00:00"),
    ("0 12 29 2 *", "*-02-29 12:00"),
    ("0 23 * * *", "*-*-* 23:00"),
    ("15 10 * * 0", "Sun *-*-* 10:15"),
    ("0 8-18/2 * * *", "*-*-* 08..18/2:00"),
)
#: Calendar expressions without a cron twin.
CALENDAR_ONLY: tuple[str, ...] = ("*-*~1 23:00", "Mon *-*-1..7 09:00", "quarterly")
INTERVALS: tuple[str, ...] = ("every 30s", "every 1h30m", "every 1d from 2026-01-05T09:00")


def starts(count: int = 97) -> list[datetime]:
    """Return ``count`` aware start instants spread over 2026-2027 at odd offsets."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    step = timedelta(days=730) / count
    return [base + i * step + timedelta(seconds=37 * i % 60) for i in range(count)]


def measure(call: Callable[[int], Any], batch: int, samples: int) -> float:
    """Return the median over ``samples`` batches of the mean microseconds per call."""
    call(0)  # warm up (imports, caches)
    results = []
    counter = 0
    for _ in range(samples):
        begin = time.perf_counter_ns()
        for _ in range(batch):
            call(counter)
            counter += 1
        results.append((time.perf_counter_ns() - begin) / batch / 1000)
    return statistics.median(results)


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for row in rows:
        cells = [row[0].ljust(widths[0])]
        cells += [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def bench_parse_and_next(
    expression: str, tz: str, batch: int, samples: int
) -> tuple[str, float | None, float | None]:
    """Return (kind, parse µs, next_after µs); None where the timer is unavailable."""
    try:
        timer = parse_timer(expression, tz=tz)
    except Exception as exc:  # the calendar timer may still be in progress
        print(f"  ({expression!r}: {type(exc).__name__}: {exc})", file=sys.stderr)
        return "?", None, None
    points = starts()
    parse_us = measure(lambda i: parse_timer(expression, tz=tz), batch, samples)
    next_us = measure(lambda i: timer.next_after(points[i % len(points)]), batch, samples)
    return timer.kind, parse_us, next_us


def bench_croniter(expression: str, tz: str, batch: int, samples: int) -> float:
    from zoneinfo import ZoneInfo

    zone = UTC if tz == "UTC" else ZoneInfo(tz)
    points = [p.astimezone(zone) for p in starts()]
    return measure(
        lambda i: croniter(expression, points[i % len(points)]).get_next(datetime),
        batch,
        samples,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tz", default="UTC", help="zone the timers are read in (default UTC)")
    parser.add_argument("--batch", type=int, default=200, help="calls per sample")
    parser.add_argument("--samples", type=int, default=25, help="samples per figure")
    parser.add_argument("--quick", action="store_true", help="batch 50, samples 7")
    args = parser.parse_args(argv)
    batch, samples = (50, 7) if args.quick else (args.batch, args.samples)

    print(
        f"Python {sys.version.split()[0]}, zone {args.tz}, "
        f"median of {samples} x {batch} calls, microseconds per call\n"
    )
    expressions = [c for c, _ in PAIRS] + [k for _, k in PAIRS] + list(CALENDAR_ONLY)
    expressions += list(INTERVALS)
    rows = []
    results: dict[str, tuple[str, float | None, float | None]] = {}
    for expression in expressions:
        results[expression] = bench_parse_and_next(expression, args.tz, batch, samples)
        kind, parse_us, next_us = results[expression]
        rows.append([expression, kind, fmt(parse_us), fmt(next_us)])
    print(table(["expression", "kind", "parse_timer", "next_after"], rows))
    print()

    rows = []
    for cron, calendar in PAIRS:
        theirs = bench_croniter(cron, args.tz, batch, samples)
        ours_cron = results[cron][2]
        ours_calendar = results[calendar][2]
        ratio = None if ours_calendar is None else ours_calendar / theirs
        rows.append(
            [
                cron,
                fmt(theirs),
                fmt(ours_cron),
                calendar,
                fmt(ours_calendar),
                "n/a" if ratio is None else f"{ratio:.2f}",
            ]
        )
    headers = [
        "cron",
        "croniter get_next",
        "our cron",
        "calendar twin",
        "our calendar",
        "cal/croniter",
    ]
    print(table(headers, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
