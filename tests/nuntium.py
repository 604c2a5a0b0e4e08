"""The four Nuntium timelines (seeds/000) as tables, shared by the guard's tests.

Task A has a 1 minute interval timer whose grid starts at 00:30; beat ("cron") looks every
30 seconds. Each row is one event at MM:SS after :data:`timeline.T0`, followed by the
``(nextRun, lastRun)`` pair the seed expects right after it.

Seed erratum, marked ``*``: in three "begins execution" rows the seed prints the lastRun
the run was *checked against* (the previous value), although its own rule ("last run time
is set when the task starts") and its other rows (00:35, 01:35, 02:56) show the new one.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from timeline import T0

TIMER = "every 1m from 2026-01-05T12:00:30Z"
#: The early-drop slack: the default ``cronstore_tolerance``. The tables need one of at
#: least 3 s (01:32 - 00:35 = 57 s must run) and under 32 s (02:03 - 01:35 = 28 s must
#: drop: 28 < 60 - tolerance).
TOLERANCE = 5.0

STANDARD = """
00:00 | Initial state | 00:30 | -
00:30 | Cron enqueues A1 | 01:30 | -
00:35 | A1 begins execution | 01:30 | 00:35
00:45 | A1 ends execution | 01:30 | 00:35
01:00 | Cron executes | 01:30 | 00:35
01:30 | Cron enqueues A2 | 02:30 | 00:35
01:32 | A2 begins execution | 02:30 | 00:35*
"""

CONGESTED = """
00:00 | Initial state | 00:30 | -
00:30 | Cron enqueues A1 | 01:30 | -
01:00 | Cron executes | 01:30 | -
01:30 | Cron enqueues A2 | 02:30 | -
01:35 | A1 begins execution | 02:30 | 01:35
01:38 | A1 ends execution | 02:30 | 01:35
02:00 | Cron executes | 02:30 | 01:35
02:30 | Cron enqueues A3 | 03:30 | 01:35
02:37 | A2 begins execution | 03:30 | 01:35*
"""

DROPPED = """
00:00 | Initial state | 00:30 | -
00:30 | Cron enqueues A1 | 01:30 | -
01:00 | Cron executes | 01:30 | -
01:30 | Cron enqueues A2 | 02:30 | -
01:35 | A1 begins execution | 02:30 | 01:35
01:38 | A1 ends execution | 02:30 | 01:35
02:00 | Cron executes | 02:30 | 01:35
02:03 | A2 is dropped | 02:30 | 01:35
02:30 | Cron enqueues A3 | 03:30 | 01:35
02:56 | A3 executes | 03:30 | 02:56
"""

FORCED = """
00:00 | Initial state | 00:30 | -
00:30 | Cron enqueues A1 | 01:30 | -
00:35 | A1 begins execution | 01:30 | 00:35
01:00 | Cron executes | 01:30 | 00:35
01:05 | A1 forced to end | 01:30 | 00:35
01:30 | Cron enqueues A2 | 02:30 | 00:35
01:32 | A2 begins execution | 02:30 | 00:35*
"""


def mmss(text: str) -> datetime:
    """Return the instant ``MM:SS`` after T0."""
    minutes, seconds = text.split(":")
    return T0 + timedelta(minutes=int(minutes), seconds=int(seconds))


def rows(table: str) -> list[tuple[str, str, str, str]]:
    """Return the ``(MM:SS, event, nextRun, lastRun)`` rows of ``table``."""
    parsed = []
    for line in table.strip().splitlines():
        when, event, next_run, last_run = (part.strip() for part in line.split("|"))
        parsed.append((when, event, next_run, last_run))
    return parsed
