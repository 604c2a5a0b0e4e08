"""Row <-> record conversion, and the checks on values before they are written."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from celery_cronstore.policy import option_problems
from celery_cronstore.records import (
    ABANDON_POLICIES,
    MISFIRE_POLICIES,
    OVERLAP_POLICIES,
    Fire,
    PeriodicTask,
)
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.store.types import dumps, loads

__all__ = [
    "FIRE_COLUMNS",
    "check_text",
    "check_values",
    "json_problems",
    "owner_values",
    "summarize",
    "to_fire",
    "to_task",
]

#: Longest text a ``Text`` column holds on every backend (MySQL/MariaDB ``TEXT``: bytes).
TEXT_BYTES = 65_535
_NUL = chr(0)


def _json_or_error(text: str | None, default: Any, column: str, errors: list[str]) -> Any:
    try:
        return loads(text, default)
    except (ValueError, TypeError, RecursionError) as exc:
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        errors.append(f"{column} is not valid JSON ({detail})")
        return default


def check_text(field: str, value: str, *, max_chars: int | None = None) -> str:
    """Return ``value`` if every backend can store it verbatim; else raise ``ValueError``.

    PostgreSQL refuses NUL characters in text, no driver can encode a lone surrogate, and
    columns have lengths (``Text`` holds 65,535 bytes of UTF-8 on MySQL/MariaDB).
    """
    nul = value.find(_NUL)
    if nul >= 0:
        raise ValueError(
            f"{field} contains a NUL character (position {nul}); PostgreSQL cannot store it"
        )
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{field} is not valid Unicode (lone surrogate at position {exc.start})"
        ) from None
    if max_chars is not None and len(value) > max_chars:
        raise ValueError(f"{field} is longer than {max_chars} characters ({len(value)})")
    if size > TEXT_BYTES:
        raise ValueError(
            f"{field} is {size} bytes of UTF-8, more than the {TEXT_BYTES} it may hold"
        )
    return value


def json_problems(row: sa.Row[Any]) -> list[str]:
    """Return what is wrong with a row's JSON columns (written by raw SQL), if anything."""
    problems: list[str] = []
    m = row._mapping
    for column, default in (("args", []), ("kwargs", {}), ("options", {})):
        before = len(problems)
        value = _json_or_error(m[column], default, column, problems)
        if len(problems) == before and not isinstance(value, type(default)):
            kind = "array" if isinstance(default, list) else "object"
            problems.append(f"{column} must be a JSON {kind}, got {type(value).__name__}")
        elif column == "options" and isinstance(value, dict):
            problems.extend(option_problems(value))
    return problems


def to_task(row: sa.Row[Any]) -> PeriodicTask:
    """Build a :class:`PeriodicTask` from a ``periodic_task`` row (bad JSON -> ``error``)."""
    m = row._mapping
    problems: list[str] = []
    args = _json_or_error(m["args"], [], "args", problems)
    kwargs = _json_or_error(m["kwargs"], {}, "kwargs", problems)
    options = _json_or_error(m["options"], {}, "options", problems)
    resume = _json_or_error(m["resume_state"], None, "resume_state", problems)
    error = m["error"] or ("; ".join(problems) if problems else None)
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

    Raise ``ValueError`` naming the field for anything the schema would reject or that
    beat could not use.
    """
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in ("name", "task"):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{key} must be a non-empty string, got {value!r}")
            out[key] = check_text(key, value, max_chars=200)
        elif key == "args":
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
                raise ValueError(f"args must be a list, got {type(value).__name__}")
            out[key] = _dump_json("args", list(value))
        elif key in ("kwargs", "options"):
            if not isinstance(value, Mapping):
                raise ValueError(f"{key} must be a mapping, got {type(value).__name__}")
            if key == "options":
                problems = option_problems(value)
                if problems:
                    raise ValueError("; ".join(problems))
            out[key] = _dump_json(key, dict(value))
        elif key == "misfire_policy" and value not in MISFIRE_POLICIES:
            raise ValueError(f"misfire_policy must be one of {MISFIRE_POLICIES}, got {value!r}")
        elif key == "overlap_policy" and value not in OVERLAP_POLICIES:
            raise ValueError(f"overlap_policy must be one of {OVERLAP_POLICIES}, got {value!r}")
        elif key == "abandon_policy" and value not in ABANDON_POLICIES:
            raise ValueError(f"abandon_policy must be one of {ABANDON_POLICIES}, got {value!r}")
        elif (
            key in ("start_deadline", "tolerance")
            and value is not None
            and (not isinstance(value, (int, float)) or value < 0)
        ):
            raise ValueError(f"{key} must be a non-negative number of seconds, got {value!r}")
        elif key in ("misfire_limit", "max_retries") and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            raise ValueError(f"{key} must be a non-negative integer, got {value!r}")
        elif key == "source":
            if not isinstance(value, str) or not value:
                raise ValueError(f"source must be a non-empty string, got {value!r}")
            out[key] = check_text(key, value, max_chars=16)
        elif key == "description":
            if not isinstance(value, str):
                raise ValueError(f"description must be a string, got {type(value).__name__}")
            out[key] = check_text(key, value)
        else:
            out[key] = value
        out.setdefault(key, value)
    return out


def _dump_json(field: str, value: Any) -> str:
    try:
        # NaN and infinities are not JSON: other readers (and kombu's peers) refuse them.
        json.dumps(value, allow_nan=False)
        text = dumps(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{field} must be JSON-serializable: {exc}") from None
    except RecursionError:
        raise ValueError(f"{field} must be JSON-serializable: nested too deeply") from None
    return check_text(field, text)


def owner_values(owner: tuple[str, Any] | None) -> dict[str, str | None]:
    """Return the owner columns for ``owner`` (``(type, id)``; ids are stored as text)."""
    if owner is None:
        return {"owner_type": None, "owner_id": None}
    if not isinstance(owner, tuple) or len(owner) != 2:
        raise ValueError(f"owner must be a (type, id) pair, got {owner!r}")
    owner_type, owner_id = owner
    if not isinstance(owner_type, str) or not owner_type:
        raise ValueError(f"owner type must be a non-empty string, got {owner_type!r}")
    text = str(owner_id)
    check_text("owner type", owner_type, max_chars=100)
    check_text("owner id", text, max_chars=200)
    return {"owner_type": owner_type, "owner_id": text}


def summarize(value: Any, limit: int = 500) -> str:
    """Return a short text summary of a task result or error for the ledger."""
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
