"""Row <-> record conversion, and the checks on values before they are written."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from celery_cronstore import fields, policy
from celery_cronstore.fields import TEXT_BYTES, FieldValueError, ForceableError, check_text
from celery_cronstore.policy import bounds_problem, option_problems
from celery_cronstore.records import Fire, PeriodicTask
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.store.types import dumps, loads
from celery_cronstore.timers import Timer

__all__ = [
    "FIRE_COLUMNS",
    "TEXT_BYTES",
    "check_bounds",
    "check_text",
    "check_values",
    "insert_entry",
    "json_problems",
    "owner_values",
    "read_task",
    "refuse_past",
    "summarize",
    "timer_key",
    "timer_values",
    "to_fire",
    "to_task",
]


def _json_or_error(text: str | None, default: Any, column: str, errors: list[str]) -> Any:
    try:
        return loads(text, default)
    except (ValueError, TypeError, RecursionError) as exc:
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        errors.append(f"{column} is not valid JSON ({detail})")
        return default


def json_problems(row: sa.Row[Any]) -> list[str]:
    """Return what is wrong with a row's JSON columns (written by raw SQL), if anything."""
    return read_task(row)[1]


def _shape_problems(column: str, value: Any, default: Any, problems: list[str]) -> None:
    """Add why a parsed JSON column's value cannot be used (wrong kind, bad options)."""
    if not isinstance(value, type(default)):
        kind = "array" if isinstance(default, list) else "object"
        problems.append(f"{column} must be a JSON {kind}, got {type(value).__name__}")
    elif column == "options":
        problems.extend(option_problems(value))


def to_task(row: sa.Row[Any]) -> PeriodicTask:
    """Build a :class:`PeriodicTask` from a ``periodic_task`` row (bad JSON -> ``error``)."""
    return read_task(row)[0]


def read_task(row: sa.Row[Any]) -> tuple[PeriodicTask, list[str]]:
    """Return the :class:`PeriodicTask` of a ``periodic_task`` row and what is wrong with
    its JSON columns (:func:`json_problems`), each column parsed once (beat reads both for
    every due row)."""
    m = row._mapping
    parsed: list[str] = []  # what does not parse: the task's error, as before
    problems: list[str] = []  # that, and the values of the wrong kind: the send refusal
    values: list[Any] = []
    for column, default in (("args", []), ("kwargs", {}), ("options", {})):
        before = len(parsed)
        value = _json_or_error(m[column], default, column, parsed)
        if len(parsed) > before:
            problems.append(parsed[-1])
        else:
            _shape_problems(column, value, default, problems)
        values.append(value)
    args, kwargs, options = values
    resume = _json_or_error(m["resume_state"], None, "resume_state", parsed)
    error = m["error"] or ("; ".join(parsed) if parsed else None)
    return _task(m, args, kwargs, options, resume, error), problems


def _task(
    m: Mapping[Any, Any], args: Any, kwargs: Any, options: Any, resume: Any, error: str | None
) -> PeriodicTask:
    return PeriodicTask(
        id=m["id"],
        name=m["name"],
        task=m["task"],
        args=args if isinstance(args, list) else [args],
        kwargs=kwargs if isinstance(kwargs, dict) else {},
        options=options if isinstance(options, dict) else {},
        timer_kind=m["timer_kind"],
        timer=m["timer"],
        tz=m["tz"],
        enabled=bool(m["enabled"]),
        owner_type=m["owner_type"],
        owner_id=m["owner_id"],
        description=m["description"],
        source=m["source"],
        next_run=m["next_run"],
        last_fire=m["last_fire"],
        last_run=m["last_run"],
        total_run_count=m["total_run_count"],
        misfire_policy=m["misfire_policy"],
        misfire_limit=m["misfire_limit"],
        start_deadline=m["start_deadline"],
        overlap_policy=m["overlap_policy"],
        tolerance=m["tolerance"],
        max_retries=m["max_retries"],
        resume_state=resume,
        error=error,
        version=m["version"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        abandon_policy=m["abandon_policy"],
        alert_after=m["alert_after"],
        max_runs=m["max_runs"],
        jitter=m["jitter"],
        start_at=m["start_at"],
        end_at=m["end_at"],
        paused_at=m["paused_at"],
        paused_by=m["paused_by"],
        paused_note=m["paused_note"],
        paused_until=m["paused_until"],
        paused_resume=m["paused_resume"],
        exclude=m["exclude"],
    )


def to_fire(row: sa.Row[Any]) -> Fire:
    """Build a :class:`Fire` from a ledger row joined with the task's name."""
    m = row._mapping
    return Fire(
        id=m["id"],
        periodic_task_id=m["periodic_task_id"],
        name=m["name"],
        fire_time=m["fire_time"],
        fire_until=m["fire_until"],
        fire_count=m["fire_count"],
        task_id=m["task_id"],
        state=m["state"],
        claimed_by=m["claimed_by"],
        lease_until=m["lease_until"],
        attempts=m["attempts"],
        claimed_at=m["claimed_at"],
        published_at=m["published_at"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        node=m["node"],
        reason=m["reason"],
        result=m["result"],
        reruns=m["reruns"],
    )


FIRE_COLUMNS = (*fire.c, periodic_task.c.name)


def check_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Validate user-supplied column values; return them ready to write.

    Each editable field is checked by its entry in :mod:`celery_cronstore.fields` (read
    now, not at import); raise ``ValueError`` (:class:`~celery_cronstore.fields.
    FieldValueError`) naming the field for anything the schema would reject or that beat
    could not use. ``source`` is the store's own; other keys pass through unchanged.
    """
    table = fields.by_name()
    out: dict[str, Any] = {}
    for key, value in values.items():
        spec = table.get(key)
        if key == "source":
            if not isinstance(value, str) or not value:
                raise fields.FieldValueError(
                    key, f"source must be a non-empty string, got {value!r}"
                )
            out[key] = check_text(key, value, max_chars=16)
        elif spec is None:
            out[key] = value
        else:
            checked = spec.check(value)
            out[spec.key] = _dump_json(key, checked) if spec.is_json else checked
    return out


def _dump_json(field: str, value: Any) -> str:
    try:
        text = dumps(value)
    except (TypeError, ValueError) as exc:
        raise fields.FieldValueError(field, f"{field} must be JSON-serializable: {exc}") from None
    except RecursionError:
        raise fields.FieldValueError(
            field, f"{field} must be JSON-serializable: nested too deeply"
        ) from None
    return check_text(field, text)


def owner_values(owner: tuple[str, Any] | None) -> dict[str, str | None]:
    """Return the owner columns for ``owner`` (``(type, id)``; ids are stored as text)."""
    if owner is None:
        return {"owner_type": None, "owner_id": None}
    owner_type, owner_id = fields.field("owner").check(owner)
    return {"owner_type": owner_type, "owner_id": str(owner_id)}


def summarize(value: Any, limit: int = 500) -> str:
    """Return a short text summary of a task result or error for the ledger."""
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def timer_key(timer: Timer | PeriodicTask) -> tuple[str, str, str]:
    """Return what identifies a timer: its kind, expression and zone (a record's too)."""
    if isinstance(timer, PeriodicTask):
        return (timer.timer_kind, timer.timer, timer.tz)
    return (timer.kind, str(timer), timer.tz_name)


def timer_values(timer: Timer) -> dict[str, str]:
    """Return the columns that store ``timer`` (checked against their widths)."""
    return {
        "timer_kind": timer.kind,
        "timer": check_text("timer", str(timer), max_chars=500),
        "tz": check_text("tz", timer.tz_name, max_chars=64),
    }


def refuse_past(timer: Timer, now: datetime, end_at: datetime | None = None) -> None:
    """Refuse a one-off instant already past at ``now`` (it would fire at once, late),
    and an ``end_at`` already past (the task would never fire)."""
    if timer.kind == "once" and timer.next_after(now) is None:
        raise ForceableError(
            "timer",
            f"the one-off instant {timer} is already past: it would fire at once, late. "
            "Give a future instant",
        )
    if end_at is not None and end_at <= now:
        raise ForceableError(
            "end_at",
            f"end_at {end_at.isoformat()} is already past: the task would never fire. "
            "Give a future end, or leave it blank",
        )


def check_bounds(start_at: datetime | None, end_at: datetime | None) -> None:
    """Refuse an ``end_at`` that is not after ``start_at``, naming both."""
    problem = bounds_problem(start_at, end_at)
    if problem is not None:
        raise FieldValueError("end_at", problem)


def insert_entry(conn: sa.Connection, entry: policy.Entry) -> None:
    """Insert a ledger entry unless its fire is in the ledger already (any state)."""
    with contextlib.suppress(IntegrityError), conn.begin_nested():
        conn.execute(sa.insert(fire).values(**entry.row()))
