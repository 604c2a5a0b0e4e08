"""Markdown pieces the generators share: table cells, tables, fire times as text."""

from __future__ import annotations

from datetime import datetime, timezone, tzinfo
from zoneinfo import ZoneInfo

from celery_cronstore.timers import Timer, fires

UTC = timezone.utc
#: Every "next fire" in the docs is computed after this instant (a Friday, two days
#: before Europe's spring-forward of 2026-03-29).
AFTER = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
BERLIN = "Europe/Berlin"


def zone_of(timer: Timer) -> tzinfo:
    return UTC if timer.tz_name == "UTC" else ZoneInfo(timer.tz_name)


def local(instant: datetime, zone: tzinfo) -> str:
    """``Mon 2026-03-30 09:30:00 CEST``: the fire as the timer's zone shows it."""
    moment = instant.astimezone(zone)
    text = moment.strftime("%a %Y-%m-%d %H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}".rstrip("0")
    return f"{text} {moment.strftime('%Z')}"


def fire_cell(timer: Timer, after: datetime, count: int) -> str:
    times = list(fires(timer, after, limit=count))
    if not times:
        return "(never: no fire after that)"
    return "<br>".join(local(t, zone_of(timer)) for t in times)


def code(text: str) -> str:
    """A table cell holding ``text`` as code (pipes escaped for the table)."""
    return "`" + text.replace("|", "\\|") + "`"


def prose(text: str) -> str:
    """A table cell holding ``text`` as prose (Markdown's ``*``, ``_`` and ``|`` escaped)."""
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("_", "\\_").replace("|", "\\|")


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def after_note(after: datetime = AFTER) -> str:
    return f"Fire times are computed after {local(after, UTC)} and shown in the timer's zone.\n"


def console(command: str, output: str) -> str:
    """A console block: ``$ command`` and what it printed."""
    return f"```console\n$ {command}\n{output}```\n"
