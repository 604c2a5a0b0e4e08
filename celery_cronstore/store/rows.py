"""Turn result rows into records and validate values before they are written."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from celery_cronstore.store.records import (
    MISFIRE_POLICIES,
    OVERLAP_POLICIES,
    Fire,
    PeriodicTask,
)
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.store.types import dumps, loads
from celery_cronstore.timers import Timer
from celery_cronstore.timers.once import OnceTimer

__all__ = [
    "MESSAGE_SERIALIZER",
    "RESERVED_HEADERS",
    "check_text",
    "check_values",
    "json_problems",
    "option_problems",
    "to_fire",
    "to_task",
]

_OPTION_KEYS = frozenset(
    {
        "queue",
        "routing_key",
        "exchange",
        "priority",
        "expires",
        "headers",
        "soft_time_limit",
        "time_limit",
        "serializer",
        "retry",
        "retry_policy",
    }
)


#: Celery protocol-2 message headers (and ours): a row's ``headers`` option may not set
#: them. Celery merges option headers *over* the message's own, so ``{"task": ...}`` there
#: would run another task than the row names (and bypass the allowlist).
RESERVED_HEADERS = frozenset(
    {
        "lang",
        "task",
        "id",
        "shadow",
        "eta",
        "expires",
        "group",
        "group_index",
        "retries",
        "timelimit",
        "root_id",
        "parent_id",
        "argsrepr",
        "kwargsrepr",
        "origin",
        "ignore_result",
        "replaced_task_nesting",
        "stamped_headers",
        "stamps",
        "chord",
        "callbacks",
        "errbacks",
        "chain",
        "reply_to",
        "correlation_id",
        "content_type",
        "content_encoding",
        "celery_beat_task",
    }
)
#: The only serializer a message beat sends may use (see docs/security.md).
MESSAGE_SERIALIZER = "json"
#: Longest text a ``Text`` column holds on every backend (MySQL/MariaDB ``TEXT``: bytes).
TEXT_BYTES = 65_535
_NUL = chr(0)
_RETRY_POLICY_KEYS = frozenset({"max_retries", "interval_start", "interval_step", "interval_max"})


def _json_or_error(text: str | None, default: Any, column: str, errors: list[str]) -> Any:
    try:
        return loads(text, default)
    except (ValueError, TypeError, RecursionError) as exc:
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        errors.append(f"{column} is not valid JSON ({detail})")
        return default


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def option_problems(options: Mapping[str, Any]) -> list[str]:
    """Return what makes Celery message options unusable or unsafe (empty: all fine).

    Used for options given to the store API and, at every claim, for options a row holds
    (raw SQL may have written anything): a bad value must put that one task in error,
    never fail a publish (which would hold back every other fire behind it).
    """
    problems: list[str] = []
    unknown = sorted(str(k) for k in options if k not in _OPTION_KEYS)
    if unknown:
        problems.append(
            f"unknown Celery option(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(_OPTION_KEYS))})"
        )
    for key in ("queue", "routing_key", "exchange"):
        value = options.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            problems.append(f"option {key} must be a non-empty string, got {value!r}")
    priority = options.get("priority")
    if priority is not None and (
        not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 255
    ):
        problems.append(f"option priority must be an integer 0..255, got {priority!r}")
    for key in ("soft_time_limit", "time_limit"):
        value = options.get(key)
        if value is not None and (not _number(value) or value <= 0 or value == float("inf")):
            problems.append(f"option {key} must be a positive number of seconds, got {value!r}")
    expires = options.get("expires")
    if expires is not None and not (
        (_number(expires) and 0 <= expires < float("inf")) or _iso_instant(expires)
    ):
        problems.append(
            f"option expires must be seconds or an ISO-8601 instant with offset, got {expires!r}"
        )
    serializer = options.get("serializer")
    if serializer is not None and serializer != MESSAGE_SERIALIZER:
        problems.append(
            f"option serializer {serializer!r} is refused: beat sends JSON messages only "
            "(remove the option)"
        )
    retry = options.get("retry")
    if retry is not None and not isinstance(retry, bool):
        problems.append(f"option retry must be true or false, got {retry!r}")
    policy = options.get("retry_policy")
    if policy is not None:
        if not isinstance(policy, Mapping) or set(policy) - _RETRY_POLICY_KEYS:
            problems.append(
                f"option retry_policy must be an object with keys among "
                f"{', '.join(sorted(_RETRY_POLICY_KEYS))}, got {policy!r}"
            )
        elif not all(v is None or (_number(v) and v >= 0) for v in policy.values()):
            problems.append(f"option retry_policy values must be non-negative numbers: {policy!r}")
    headers = options.get("headers")
    if headers is not None:
        if not isinstance(headers, Mapping):
            problems.append(f"option headers must be an object, got {type(headers).__name__}")
        else:
            taken = sorted(
                str(k)
                for k in headers
                if not isinstance(k, str) or k in RESERVED_HEADERS or k.startswith("cronstore_")
            )
            if taken:
                problems.append(
                    f"option headers may not set Celery's or cronstore's own header(s) "
                    f"{', '.join(taken)}"
                )
    return problems


def _iso_instant(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return parsed.utcoffset() is not None


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


def first_fire(timer: Timer, now: datetime, last_fire: datetime | None = None) -> datetime | None:
    """Return the fire to plan for a task added, edited or enabled at ``now``.

    The first fire after ``now``, except for a one-off instant that has already passed and
    never fired: it is planned as is, so the misfire policy decides (``run_once`` sends it
    late, ``skip`` records it missed, a starting deadline expires it) instead of the task
    silently never firing.
    """
    if isinstance(timer, OnceTimer) and (last_fire is None or last_fire < timer.at):
        return timer.at
    return timer.next_after(now)
