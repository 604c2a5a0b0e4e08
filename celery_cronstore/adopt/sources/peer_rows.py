"""What django-celery-beat's and sqlalchemy-celery-beat's rows share: one raw row
(:class:`PeerRow`) and its mapping to cronstore (:func:`map_row`).

The two peers keep the same columns (sqlalchemy-celery-beat modelled its tables on
django-celery-beat's), so one mapping serves both readers; each reader only finds and
reads its own tables. The field-by-field table is in
:mod:`celery_cronstore.adopt.sources.django_celery_beat`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from celery_cronstore.adopt import convert
from celery_cronstore.adopt.records import Incoming, Read, ReadContext, Refused
from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers import Timer, parse_timer

__all__ = ["TASK_COLUMNS", "PeerRow", "instant", "map_row"]

#: The periodic task columns both peers keep (by django-celery-beat's names).
TASK_COLUMNS = (
    "id",
    "name",
    "task",
    "enabled",
    "args",
    "kwargs",
    "queue",
    "exchange",
    "routing_key",
    "priority",
    "headers",
    "expires",
    "expire_seconds",
    "one_off",
    "start_time",
    "last_run_at",
    "total_run_count",
    "date_changed",
    "description",
)

_UTC = timezone.utc
#: Seconds in one unit of an interval's ``period`` (microseconds: see ``_interval``).
_PERIOD_SECONDS = {"days": 86_400, "hours": 3_600, "minutes": 60, "seconds": 1}
_CRON_FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
# Celery's crontab fields may carry blanks and the brackets of a stored set ("{0, 30}").
_CRON_NOISE = re.compile(r"[\s\[\]{}]")


class _Refusal(Exception):
    """Why one row cannot come over (the problem and the fix)."""


@dataclass(frozen=True)
class PeerRow:
    """One periodic task row of django-celery-beat (or sqlalchemy-celery-beat), raw.

    ``task`` holds the periodic task's columns by their django-celery-beat names;
    ``schedules`` the schedule kinds the row links, each with its schedule row's columns
    (``None`` when the linked row does not exist).
    """

    origin: str
    task: Mapping[str, Any]
    schedules: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """Return the task's name as text (an odd value still names its refusal)."""
        value = self.task.get("name")
        return value if isinstance(value, str) else str(value)


# -- mapping -----------------------------------------------------------------------------


def map_row(
    row: PeerRow, context: ReadContext, *, peer: str, crontab_zone: str | None = None
) -> Read:
    """Map one row to an :class:`Incoming` task or a :class:`Refused` line.

    ``peer`` names the scheduler in fixes ("fix it in django-celery-beat"). A
    ``crontab_zone`` of ``""`` means the peer evaluates crontabs in the app's zone (the
    context's), not in their own column. Never raises: a row that cannot be read at all is
    refused with what went wrong.
    """
    try:
        return _incoming(row, context, peer, crontab_zone)
    except _Refusal as exc:
        return Refused(row.name, row.origin, str(exc))
    except (ValueError, TypeError, ArithmeticError, LookupError) as exc:
        return Refused(
            row.name,
            row.origin,
            f"cannot read this row ({type(exc).__name__}: {exc}): fix it in {peer}",
        )


def _incoming(row: PeerRow, context: ReadContext, peer: str, crontab_zone: str | None) -> Incoming:
    task = row.task
    name = task.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _Refusal(f"it has no name ({name!r}): give it one in {peer}")
    notes: list[str] = []
    last_run_at = instant(task.get("last_run_at"), "last_run_at")
    start_at = instant(task.get("start_time"), "start_time")
    spec = _timer(row, context, peer, crontab_zone, last_run_at, start_at, notes)
    values: dict[str, Any] = {
        "task": task.get("task"),
        "timer": spec.timer,
        "kind": spec.kind,
        "tz": spec.tz,
        "enabled": _flag(task.get("enabled", True), "enabled"),
        "args": _json(task.get("args"), "args", list, "[]", peer),
        "kwargs": _json(task.get("kwargs"), "kwargs", dict, "{}", peer),
        "options": _options(task, peer, notes),
        "start_deadline": _seconds(task.get("expire_seconds")),
    }
    description = task.get("description")
    if description is not None:
        values["description"] = str(description)
    runs = task.get("total_run_count")
    return Incoming(
        name=name,
        origin=row.origin,
        values=values,
        last_run_at=last_run_at,
        total_run_count=int(runs) if runs is not None else None,
        start_at=start_at,
        notes=tuple(notes),
    )


def _timer(
    row: PeerRow,
    context: ReadContext,
    peer: str,
    crontab_zone: str | None,
    last_run_at: datetime | None,
    start_at: datetime | None,
    notes: list[str],
) -> convert.TimerSpec:
    if not row.schedules:
        raise _Refusal(
            "it has no schedule (none of crontab, interval, clocked, solar is set): "
            f"give it one in {peer}, or delete it there"
        )
    if len(row.schedules) > 1:
        raise _Refusal(
            f"it links more than one schedule ({', '.join(sorted(row.schedules))}): keep "
            f"one in {peer}"
        )
    [(kind, schedule)] = row.schedules.items()
    if schedule is None:
        raise _Refusal(
            f"its {kind} schedule row does not exist (a dangling reference): give it a "
            f"schedule in {peer}, or delete it there"
        )
    one_off = _flag(row.task.get("one_off", False), "one_off")
    if kind == "solar":
        try:
            solar = convert.solar_timer(
                schedule.get("event"), schedule.get("latitude"), schedule.get("longitude")
            )
        except (TypeError, ValueError) as exc:
            raise _Refusal(
                f"its solar schedule ({schedule.get('event')} at "
                f"{_number(schedule.get('latitude'))}, {_number(schedule.get('longitude'))}) "
                f"is not a cronstore solar timer ({exc}): fix it in {peer}"
            ) from None
        timer = _parsed(solar, peer)
        return (
            solar
            if not one_off
            else _one_off(row, solar, timer, context, last_run_at, start_at, notes)
        )
    if kind == "clocked":
        at = instant(schedule.get("clocked_time"), "clocked_time")
        if at is None:
            raise _Refusal(f"its clocked schedule has no clocked_time: set one in {peer}")
        if not one_off:
            notes.append(
                f"clocked schedule without one_off ({peer} requires it): imported as a "
                "one-off at its clocked time"
            )
        return convert.once_timer(at)
    if kind == "crontab":
        spec = _crontab(schedule, context, peer, crontab_zone)
    elif kind == "interval":
        origin = last_run_at or start_at
        spec = _interval(schedule, origin, peer)
        if origin is None and not one_off:
            notes.append(
                "never ran and has no start_time: fires on the interval grid from the "
                f"epoch ({peer} would fire one period after it first saw the row)"
            )
    else:
        raise _Refusal(f"unknown schedule kind {kind!r}: recreate it in cronstore")
    timer = _parsed(spec, peer)
    if not one_off:
        return spec
    return _one_off(row, spec, timer, context, last_run_at, start_at, notes)


def _crontab(
    schedule: Mapping[str, Any], context: ReadContext, peer: str, crontab_zone: str | None
) -> convert.TimerSpec:
    fields = [_CRON_NOISE.sub("", str(schedule.get(f) or "")) or "*" for f in _CRON_FIELDS]
    if crontab_zone == "":
        zone = context.zone
    else:
        zone = str(schedule.get("timezone") or "UTC").strip() or "UTC"
        try:
            ZoneInfo(zone)
        except (LookupError, ValueError):
            raise _Refusal(
                f"its crontab's time zone {zone!r} is not in the tz database: set the "
                f"crontab's timezone in {peer} to an IANA name (e.g. Europe/Berlin)"
            ) from None
    try:
        minute, hour, day_of_month, month_of_year, day_of_week = fields
        return convert.crontab_timer(minute, hour, day_of_month, month_of_year, day_of_week, zone)
    except ValueError as exc:
        raise _Refusal(
            f"its crontab (minute {fields[0]!r}, hour {fields[1]!r}, day_of_month "
            f"{fields[2]!r}, month_of_year {fields[3]!r}, day_of_week {fields[4]!r}) cannot "
            f"be read: {exc}; fix the crontab in {peer}"
        ) from None


def _interval(schedule: Mapping[str, Any], origin: datetime | None, peer: str) -> convert.TimerSpec:
    every, period = schedule.get("every"), str(schedule.get("period") or "")
    if isinstance(every, bool) or not isinstance(every, (int, Decimal)) or every < 1:
        raise _Refusal(
            f"its interval's every is {every!r}: set a whole number of at least 1 in {peer}"
        )
    every = int(every)
    shown = f"every {every} {period}"
    if period == "microseconds":
        seconds, rest = divmod(every, 1_000_000)
        if rest:
            raise _Refusal(
                f"its interval ({shown}) is not a whole number of seconds: cronstore "
                "intervals count whole seconds; set it to a multiple of 1000000 "
                f"microseconds (or a number of seconds) in {peer}"
            )
    elif period in _PERIOD_SECONDS:
        seconds = every * _PERIOD_SECONDS[period]
    else:
        raise _Refusal(
            f"its interval's period {period!r} is unknown: use days, hours, minutes or "
            f"seconds in {peer}"
        )
    try:
        return convert.interval_timer(seconds, origin)
    except ValueError as exc:
        raise _Refusal(f"its interval ({shown}) cannot come over: {exc}") from None


def _parsed(spec: convert.TimerSpec, peer: str) -> Timer:
    try:
        return parse_timer(spec.timer, kind=spec.kind, tz=spec.tz)
    except TimerSyntaxError as exc:
        raise _Refusal(
            f"its schedule became the {spec.kind} timer {spec.timer!r}, which cronstore "
            f"refuses ({exc}): fix the schedule in {peer}"
        ) from None


def _one_off(
    row: PeerRow,
    spec: convert.TimerSpec,
    timer: Timer,
    context: ReadContext,
    last_run_at: datetime | None,
    start_at: datetime | None,
    notes: list[str],
) -> convert.TimerSpec:
    runs = row.task.get("total_run_count") or 0
    if runs and last_run_at is not None:
        # It ran; the peer switches it off at its next look and never fires it again.
        notes.append(
            f"one-off that already ran (at {_iso(last_run_at)}): imported as done, a once "
            f"timer at that run, so it fires no more (its schedule was {spec.timer!r})"
        )
        return convert.once_timer(last_run_at)
    if last_run_at is not None:
        after, since = last_run_at, f"its last run {_iso(last_run_at)}"
    elif start_at is not None:
        after, since = start_at - timedelta(microseconds=1), f"its start_time {_iso(start_at)}"
    else:
        changed = instant(row.task.get("date_changed"), "date_changed")
        if changed is None:
            raise _Refusal(
                "one-off with neither last_run_at, start_time nor date_changed: there is "
                "no instant to place its only fire at; recreate it as a once timer"
            )
        after, since = changed, f"its last change {_iso(changed)}"
    at = timer.next_after(after)
    if at is None:
        raise _Refusal(
            f"one-off whose schedule {spec.timer!r} has no fire after {since}: recreate "
            "it as a once timer at the instant you want"
        )
    notes.append(
        f"one-off {spec.kind} timer {spec.timer!r} ({spec.tz}): imported as a once timer "
        f"at {_iso(at)}, its first fire after {since}"
    )
    return convert.once_timer(at)


# -- values ------------------------------------------------------------------------------


def instant(value: Any, column: str) -> datetime | None:
    """Return a stored date and time as aware UTC (naive means UTC; see the module doc).

    Accepts what drivers return: ``datetime`` or ISO text (SQLite). ``_Refusal`` (a
    refusal of the row) for anything else.
    """
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise _Refusal(
                f"its {column} {value!r} is not a date and time: fix or clear it"
            ) from None
    if not isinstance(value, datetime):
        raise _Refusal(f"its {column} {value!r} is not a date and time: fix or clear it")
    if value.tzinfo is None or value.utcoffset() is None:
        return value.replace(tzinfo=_UTC)
    return value.astimezone(_UTC)


def _iso(at: datetime) -> str:
    return at.astimezone(_UTC).isoformat().replace("+00:00", "Z")


def _flag(value: Any, column: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("0", "1", "t", "f", "true", "false"):
        return value.strip().lower() in ("1", "t", "true")
    raise _Refusal(f"its {column} is {value!r}, not true or false: fix it")


def _number(value: Any) -> str:
    return f"{float(value):g}" if isinstance(value, (int, float, Decimal)) else str(value)


def _json(value: Any, column: str, kind: type, empty: str, peer: str) -> Any:
    text = value if value not in (None, "") else empty
    wanted = "array" if kind is list else "object"
    example = '[1, "a"]' if kind is list else '{"key": "value"}'
    if not isinstance(text, str):
        raise _Refusal(f"its {column} is not JSON text ({text!r}): fix it in {peer}")
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise _Refusal(
            f"its {column} is not JSON ({exc}): {_clip(text)}; fix it in {peer} (a JSON "
            f"{wanted} such as {example})"
        ) from None
    if not isinstance(parsed, kind):
        raise _Refusal(
            f"its {column} is a JSON {type(parsed).__name__}, not a JSON {wanted}: "
            f"{_clip(text)}; fix it in {peer} (e.g. {example})"
        )
    return parsed


def _clip(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _seconds(value: Any) -> float | None:
    if value is None:
        return None
    return float(value)


def _options(task: Mapping[str, Any], peer: str, notes: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key in ("queue", "exchange", "routing_key"):
        value = task.get(key)
        if value not in (None, ""):
            options[key] = value
    priority = task.get("priority")
    if priority is not None:
        options["priority"] = int(priority)
    headers = _json(task.get("headers"), "headers", dict, "{}", peer)
    if headers:
        options["headers"] = headers
    expires = instant(task.get("expires"), "expires")
    if expires is not None:
        options["expires"] = _iso(expires)
        notes.append(
            f"expires {_iso(expires)}: messages sent after it expire unrun, but the task "
            "stays enabled here: disable or remove it after that date"
        )
    return options
