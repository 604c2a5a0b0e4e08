"""Helpers shared by the benchmark scripts: bulk fills, scratch databases, measurements.

Nothing here is part of the package. Rows are written in bulk (one ``executemany`` per
chunk on SQLite, ``COPY`` on PostgreSQL), never through ``Store.add``, so that a million
rows take seconds rather than hours.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from celery_cronstore.store.schema import periodic_task
from celery_cronstore.timers import Timer, parse_timer
from harness.scratch import scratch_database as server_database

UTC = timezone.utc

#: (expression, zone): the mix of timers every filled row cycles through.
TIMER_MIX: tuple[tuple[str, str], ...] = (
    ("*/5 * * * *", "UTC"),
    ("*/5 * * * *", "Europe/Berlin"),
    ("0 * * * *", "America/New_York"),
    ("*/15 9-17 * * 1-5", "Europe/London"),
    ("*-*-* *:00/15:00", "UTC"),
    ("*-*-* *:00/15:00", "Asia/Kolkata"),
    ("Mon..Fri *-*-* 08:00/15:00", "Australia/Sydney"),
    ("every 1h", "UTC"),
    ("every 15m", "America/Sao_Paulo"),
    ("every 1d", "Asia/Tokyo"),
)

#: Columns written by the fills (everything else takes its server default).
FILL_COLUMNS = ("name", "task", "timer_kind", "timer", "tz", "next_run", "created_at", "updated_at")

#: Task names the filled rows send (none needs to be registered: beat sends by name).
TASK_NAMES = ("bench.noop", "bench.report", "bench.cleanup", "bench.sync")

#: Chunk size of the SQLite ``executemany`` fill.
CHUNK = 50_000


def canonical_timers() -> list[Timer]:
    """Return the parsed timers of :data:`TIMER_MIX` (canonical form, kind and zone)."""
    return [parse_timer(expression, tz=tz) for expression, tz in TIMER_MIX]


def floor_to(moment: datetime, step: timedelta) -> datetime:
    """Return ``moment`` rounded down to a multiple of ``step`` since the Unix epoch."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + ((moment - epoch) // step) * step


def background_rows(
    start: int, stop: int, now: datetime, quarters: int = 72
) -> Iterator[tuple[Any, ...]]:
    """Yield rows ``start .. stop-1`` that are far from due: next_run 6 h to 24 h ahead.

    ``next_run`` is a whole hour plus a multiple of 15 minutes (a grid point of every timer
    in the mix but the daily and business-hours ones), spread over ``quarters`` quarter
    hours (default 72: 18 hours); the values are aware UTC datetimes. None is more than a
    day ahead: a starting beat checks such rows against their timer (``store.sweep``) and
    would plan these again.
    """
    timers = canonical_timers()
    base = floor_to(now, timedelta(hours=1)) + timedelta(hours=6)
    quarter = timedelta(minutes=15)
    for i in range(start, stop):
        timer = timers[i % len(timers)]
        yield (
            f"bench-{i:08d}",
            TASK_NAMES[i % len(TASK_NAMES)],
            timer.kind,
            str(timer),
            timer.tz_name,
            base + ((i * 7919) % quarters) * quarter,
            now,
            now,
        )


def due_rows(count: int, now: datetime, prefix: str = "due") -> list[dict[str, Any]]:
    """Return ``count`` rows due right now: next_run is the last 5-minute point <= now.

    They use ``*/5 * * * *`` in several zones (all zones in the mix are whole quarter
    hours from UTC), so their misfire backlog is one grid point: each yields one publish.
    """
    zones = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Sydney")
    due = floor_to(now, timedelta(minutes=5))
    timer = parse_timer("*/5 * * * *")
    return [
        {
            "name": f"{prefix}-{i:06d}",
            "task": TASK_NAMES[i % len(TASK_NAMES)],
            "timer_kind": timer.kind,
            "timer": str(timer),
            "tz": zones[i % len(zones)],
            "kwargs": f'{{"n":{i}}}',
            "next_run": due,
            "created_at": now,
            "updated_at": now,
        }
        for i in range(count)
    ]


# -- filling -------------------------------------------------------------------------------


def fill(engine: sa.Engine, start: int, stop: int, now: datetime) -> None:
    """Insert background rows ``start .. stop-1`` as fast as the dialect allows."""
    if stop <= start:
        return
    if engine.dialect.name == "postgresql":
        _fill_copy(engine, start, stop, now)
    else:
        _fill_executemany(engine, start, stop, now)


def _fill_executemany(engine: sa.Engine, start: int, stop: int, now: datetime) -> None:
    # The column type's own bind processor turns aware datetimes into exactly the text
    # SQLAlchemy stores on SQLite, so raw SQL and the store's queries compare alike.
    to_db = periodic_task.c.next_run.type.bind_processor(engine.dialect) or (lambda v: v)
    cache: dict[datetime, Any] = {}

    def db_time(value: datetime) -> Any:
        if value not in cache:
            cache[value] = to_db(value)
        return cache[value]

    columns = ", ".join(FILL_COLUMNS)
    marks = ", ".join("?" if engine.dialect.paramstyle == "qmark" else "%s" for _ in FILL_COLUMNS)
    sql = f"INSERT INTO {periodic_task.name} ({columns}) VALUES ({marks})"
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        for chunk_start in range(start, stop, CHUNK):
            chunk_stop = min(stop, chunk_start + CHUNK)
            rows = [
                (*row[:5], db_time(row[5]), db_time(row[6]), db_time(row[7]))
                for row in background_rows(chunk_start, chunk_stop, now)
            ]
            if engine.dialect.name == "sqlite":
                cursor.execute("BEGIN")
            cursor.executemany(sql, rows)
            raw.commit()
        cursor.close()
    finally:
        raw.close()


def _fill_copy(engine: sa.Engine, start: int, stop: int, now: datetime) -> None:
    columns = ", ".join(FILL_COLUMNS)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        with cursor.copy(f"COPY {periodic_task.name} ({columns}) FROM STDIN") as copy:
            for row in background_rows(start, stop, now):
                # UTCDateTime columns hold naive UTC (timestamp without time zone).
                copy.write_row(
                    (
                        *row[:5],
                        row[5].replace(tzinfo=None),
                        row[6].replace(tzinfo=None),
                        row[7].replace(tzinfo=None),
                    )
                )
        raw.commit()
        cursor.close()
    finally:
        raw.close()


def analyze(engine: sa.Engine) -> None:
    """Refresh planner statistics (and, on PostgreSQL, the visibility map)."""
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f"VACUUM ANALYZE {periodic_task.name}")
            conn.exec_driver_sql("VACUUM ANALYZE cronstore_fire")


# -- scratch databases ---------------------------------------------------------------------


@dataclass
class Scratch:
    """A database created for one benchmark run, removed at the end."""

    backend: str
    url: str


@contextmanager
def scratch_database(backend: str, admin_url: str, keep: bool = False) -> Iterator[Scratch]:
    """Create an empty database for ``backend`` (a temp file, or a PostgreSQL database)."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="cronstore-bench-") as folder:
            path = os.path.join(folder, "bench.sqlite")
            yield Scratch(backend, f"sqlite:///{path}")
        return
    if backend != "postgresql":
        raise ValueError(f"unsupported backend {backend!r} (sqlite, postgresql)")
    with server_database(admin_url, prefix="bench_cronstore", keep=keep) as made:
        yield Scratch(backend, made.url)


# -- measurements --------------------------------------------------------------------------


def rss_mb() -> float:
    """Return this process's resident set size in MB (``VmRSS`` of /proc/self/status)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def tick_ms(scheduler: Any, count: int, *, housekeep: bool = False) -> list[float]:
    """Time ``count`` back-to-back ticks of a beat ``Scheduler``, in ms.

    ``housekeep``: each tick runs beat's housekeeping (its deadline is reset first);
    otherwise they are idle ticks, and one that finds something due means the fill is
    wrong (an error).
    """
    samples = []
    for _ in range(count):
        if housekeep and scheduler.loop is not None:
            scheduler.loop.chores.next_due = 0.0
        began = time.perf_counter()
        sleep = scheduler.tick()
        samples.append((time.perf_counter() - began) * 1e3)
        if not housekeep and sleep <= 0:
            raise SystemExit("an idle tick found something due: the fill is wrong")
    return samples


def percentile(values: Sequence[float], fraction: float) -> float:
    """Return the ``fraction`` quantile of ``values`` (nearest rank)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: Sequence[float]) -> float:
    """Return the median of ``values`` (NaN when empty)."""
    return statistics.median(values) if values else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Return a Markdown table (columns padded so it also reads well in a terminal)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for row in rows:
        cells = (c.rjust(w) for c, w in zip(row, widths, strict=True))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
