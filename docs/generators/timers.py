"""The timer tables: detection, each grammar's examples, the DST cases, the timer CLI.

Every fire time is computed after one fixed instant (:data:`~generators.markdown.AFTER`),
so the output does not depend on the day it is generated. ``check_systemd`` compares the
calendar examples with ``systemd-analyze calendar``, the reference implementation.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
from datetime import datetime
from zoneinfo import ZoneInfo

from celery_cronstore.timers import __main__ as timer_cli
from celery_cronstore.timers import detect_kind, fires, parse_timer
from celery_cronstore.timers.cron import MACROS

from .markdown import (
    AFTER,
    BERLIN,
    UTC,
    after_note,
    code,
    console,
    fire_cell,
    local,
    prose,
    table,
)

DETECT = [
    "every 90m",
    "every 1 hour 30 minutes",
    "@daily",
    "2026-12-01T09:00:00Z",
    "2026-12-01T09:00",
    "*/5 * * * *",
    "0 9 * * mon-fri 30",
    "*:0/5",
    "Mon..Fri *-*-* 09:30",
    "daily",
    "2026-12-01 09:00",
]

CALENDAR: list[tuple[str, str | None]] = [
    ("*:0/5", None),
    ("minutely", None),
    ("hourly", None),
    ("daily", None),
    ("weekly", None),
    ("monthly", None),
    ("quarterly", None),
    ("yearly", None),
    ("Mon..Fri *-*-* 09:30", None),
    ("Mon..Fri *-*-* 09:30 Europe/Berlin", None),
    ("mon..fri 9:0/15", None),
    ("Sat,Sun 10:00", BERLIN),
    ("*-*-* 9..17:00", None),
    ("00/2:00", None),
    ("*-*-* *:*:0/15", None),
    ("*-*-01 06:00", None),
    ("*-*~01", None),
    ("*-*~01..03 18:00", None),
    ("Fri *-*~07/1 17:00", None),
    ("Mon *-*-1..7 10:00", None),
    ("*-02-29 12:00", None),
    ("*-1/3-1", None),
    ("2026-12-24 18:00 UTC", None),
    ("12:00:00.5", None),
    ("Mon,Wed,Fri 08:00,20:00", None),
    ("Mon,Wed,Fri 08,20:00", None),
    ("Wed..Sat,Tue 12-10-15 1:2:3", None),
]
#: ``@EPOCH`` starts with ``@`` and would be detected as a cron macro: kind is explicit.
CALENDAR_EXPLICIT: list[tuple[str, str | None]] = [("@1800000000", None)]

CRON = [
    "*/5 * * * *",
    "0 * * * *",
    "30 9 * * mon-fri",
    "30 9 * * 1-5",
    "0 9,18 * * *",
    "0 0 1 * *",
    "0 0 1,15 * 5",
    "*/15 9-17 * * 1-5",
    "0 22-2 * * *",
    "5/15 * * * *",
    "0 12 * jan,jul sun",
    "0 9 * * * 30",
    "* * * * * */10",
    "*/10 * * * * *",
]

INTERVAL: list[tuple[str, str | None]] = [
    ("every 30s", None),
    ("every 5m", None),
    ("every 90m", None),
    ("every 1 hour 30 minutes", None),
    ("every 14d", None),
    ("every 1d", BERLIN),
    ("every 1d from 2026-03-27T09:00", BERLIN),
    ("every 2h from 2026-01-01T00:30:00Z", None),
]

ONCE: list[tuple[str, str | None]] = [
    ("2026-12-01T09:00:00Z", None),
    ("2026-12-01T09:00", BERLIN),
    ("2026-12-01T09:00:00+05:30", None),
    ("2026-03-27T12:00:00.250Z", None),
    ("2026-01-01T00:00Z", None),
]

CRON_DST = [
    ("30 2 * * *", datetime(2026, 3, 27, 12, tzinfo=UTC), 3, "spring: 02:30 does not exist"),
    ("*/15 2 * * *", datetime(2026, 3, 28, 12, tzinfo=UTC), 3, "spring: all of 02:xx missing"),
    ("30 * * * *", datetime(2026, 3, 29, 0, tzinfo=UTC), 3, "spring: hour field is `*`"),
    ("30 2 * * *", datetime(2026, 10, 24, 12, tzinfo=UTC), 3, "autumn: 02:30 happens twice"),
    ("0,30 2 * * *", datetime(2026, 10, 24, 12, tzinfo=UTC), 3, "autumn: restricted hour"),
    ("*/30 * * * *", datetime(2026, 10, 24, 23, 45, tzinfo=UTC), 5, "autumn: hour field is `*`"),
]

CALENDAR_DST = [
    ("*-*-* 02:30", datetime(2026, 3, 27, 12, tzinfo=UTC), 3, "spring: 02:30 does not exist"),
    ("*:0/30", datetime(2026, 3, 29, 0, 15, tzinfo=UTC), 3, "spring: 02:xx does not exist"),
    ("*-*-* 02:30", datetime(2026, 10, 24, 12, tzinfo=UTC), 3, "autumn: 02:30 happens twice"),
    ("*:0/30", datetime(2026, 10, 24, 23, 45, tzinfo=UTC), 5, "autumn: 02:xx happens twice"),
]


def gen_detect() -> str:
    rows = []
    for expression in DETECT:
        timer = parse_timer(expression)
        rows.append([code(expression), detect_kind(expression), code(str(timer))])
    return table(["expression", "detected kind", "canonical form"], rows)


def _calendar_rows(items: list[tuple[str, str | None]], kind: str | None) -> list[list[str]]:
    rows = []
    for expression, tz in items:
        timer = parse_timer(expression, kind=kind, tz=tz)
        shown = code(expression) + (f" (tz {tz})" if tz else "")
        rows.append([shown, code(str(timer)), prose(timer.describe()), fire_cell(timer, AFTER, 2)])
    return rows


def gen_calendar() -> str:
    rows = _calendar_rows(CALENDAR, None) + _calendar_rows(CALENDAR_EXPLICIT, "calendar")
    rows[-1][0] += ' (`kind="calendar"`)'
    headers = ["expression", "normalized form", "description", "next two fires"]
    return after_note() + "\n" + table(headers, rows)


def gen_cron() -> str:
    rows = []
    for expression in CRON:
        timer = parse_timer(expression, kind="cron")
        rows.append(
            [
                code(expression),
                code(str(timer)),
                prose(timer.describe()),
                fire_cell(timer, AFTER, 2),
            ]
        )
    headers = ["expression", "canonical form", "description", "next two fires"]
    return after_note() + "\n" + table(headers, rows)


def gen_macros() -> str:
    rows = []
    for macro, expansion in MACROS.items():
        timer = parse_timer(macro)
        rows.append([code(macro), code(expansion), prose(timer.describe())])
    rows.append([code("@reboot"), "refused", "no meaning for a periodic scheduler"])
    return table(["macro", "same as", "description"], rows)


def _dst_rows(items: list[tuple[str, datetime, int, str]], kind: str) -> list[list[str]]:
    zone = ZoneInfo(BERLIN)
    rows = []
    for expression, after, count, case in items:
        timer = parse_timer(expression, kind=kind, tz=BERLIN)
        times = ", ".join(
            t.astimezone(zone).strftime("%m-%d %H:%M %Z") for t in fires(timer, after, limit=count)
        )
        rows.append([code(expression), case, local(after, zone), times])
    return rows


def gen_cron_dst() -> str:
    headers = ["expression (Europe/Berlin)", "case", "after", "fires (local)"]
    return table(headers, _dst_rows(CRON_DST, "cron"))


def gen_calendar_dst() -> str:
    headers = ["expression (Europe/Berlin)", "case", "after", "fires (local)"]
    return table(headers, _dst_rows(CALENDAR_DST, "calendar"))


def _simple_rows(items: list[tuple[str, str | None]], kind: str) -> list[list[str]]:
    rows = []
    for expression, tz in items:
        timer = parse_timer(expression, kind=kind, tz=tz)
        rows.append(
            [
                code(expression),
                tz or "UTC",
                code(str(timer)),
                prose(timer.describe()),
                fire_cell(timer, AFTER, 2),
            ]
        )
    return rows


def gen_interval() -> str:
    headers = ["expression", "tz", "canonical form", "description", "next two fires"]
    return after_note() + "\n" + table(headers, _simple_rows(INTERVAL, "interval"))


def gen_once() -> str:
    headers = ["expression", "tz", "canonical form", "description", "next fire"]
    rows = _simple_rows(ONCE, "once")
    return after_note() + "\n" + table(headers, rows)


def gen_timer_cli() -> str:
    """``python -m celery_cronstore.timers`` on one expression, run in this process."""
    argv = [
        "Mon..Fri *-*-* 09:30",
        "--tz",
        BERLIN,
        "-n",
        "3",
        "--after",
        AFTER.strftime("%Y-%m-%dT%H:%MZ"),
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = timer_cli.main(argv)
    if status:
        raise SystemExit(f"python -m celery_cronstore.timers {argv} exited {status}")
    shown = " ".join(f"'{a}'" if " " in a else a for a in argv)
    return console(f"python -m celery_cronstore.timers {shown}", out.getvalue())


# -- systemd cross-check --------------------------------------------------------------------


def check_systemd() -> list[str]:
    """Compare the calendar examples with ``systemd-analyze calendar``; return mismatches."""
    problems: list[str] = []
    for expression, tz in CALENDAR + CALENDAR_EXPLICIT:
        timer = parse_timer(expression, kind="calendar", tz=tz)
        zone = "UTC" if tz is None else tz
        result = subprocess.run(
            [
                "systemd-analyze",
                "calendar",
                "--iterations=2",
                f"--base-time=@{int(AFTER.timestamp())}",
                expression,
            ],
            capture_output=True,
            text=True,
            env=dict(os.environ, TZ=zone),
            check=False,
        )
        if result.returncode != 0:
            problems.append(f"{expression!r}: systemd refuses it: {result.stderr.strip()}")
            continue
        normalized = re.search(r"Normalized form: (.*)", result.stdout)
        if normalized is None or normalized.group(1) != str(timer):
            problems.append(f"{expression!r}: systemd normalizes to {normalized}, we {timer}")
        theirs = re.findall(r"(?:Next elapse|Iter\. #\d+): \w+ (\S+ \S+) (\S+)", result.stdout)
        # systemd prints whole seconds in the TZ it runs under.
        host = UTC if zone == "UTC" else ZoneInfo(zone)
        want = [
            t.astimezone(host).strftime("%Y-%m-%d %H:%M:%S") for t in fires(timer, AFTER, limit=2)
        ]
        if want != [t[0] for t in theirs]:
            problems.append(f"{expression!r}: systemd fires at {theirs}, we at {want}")
    return problems
