"""Form and query-string handling: text in, typed values (or per-field errors) out.

Only shape is checked here (JSON that parses, numbers that are numbers); everything the
store knows how to refuse (timers, policies, option keys, lengths) is left to the
:class:`~celery_cronstore.store.Store` API, whose message is shown next to the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from celery_cronstore.errors import TimerError, TimerSyntaxError
from celery_cronstore.records import ABANDON_POLICIES, MISFIRE_POLICIES, OVERLAP_POLICIES
from celery_cronstore.store import PeriodicTask
from celery_cronstore.store.read import TaskQuery
from celery_cronstore.timers import parse_timer
from celery_cronstore.web.render import fmt_local, fmt_utc

__all__ = ["POLICIES", "blank", "changes", "preview", "store_error", "submitted", "task_query"]

#: The policy choices the form offers (the store validates them again).
POLICIES = {
    "misfire_policy": MISFIRE_POLICIES,
    "overlap_policy": OVERLAP_POLICIES,
    "abandon_policy": ABANDON_POLICIES,
}
FIELDS = (
    "name",
    "task",
    "timer",
    "kind",
    "tz",
    "args",
    "kwargs",
    "options",
    "description",
    "misfire_policy",
    "overlap_policy",
    "abandon_policy",
    "start_deadline",
    "tolerance",
    "version",
    "enabled",
)
PREVIEW_COUNT = 10


def _tristate(value: str | None) -> bool | None:
    return {"yes": True, "no": False}.get(value or "")


def task_query(args: Mapping[str, str]) -> TaskQuery:
    """Build the task-list query from the query string (``ValueError`` if malformed)."""
    try:
        page = int(args.get("page", "1"))
        per_page = int(args.get("per_page", "50"))
    except ValueError:
        raise ValueError("page and per_page must be whole numbers") from None
    return TaskQuery(
        search=args.get("q", ""),
        enabled=_tristate(args.get("enabled")),
        in_error=_tristate(args.get("error")),
        owner_type=args.get("owner_type") or None,
        kind=args.get("kind") or None,
        sort=args.get("sort", "name"),
        descending=args.get("desc") == "1",
        page=page,
        per_page=per_page,
    )


def preview(expression: str, kind: str | None, tz: str | None, now: datetime) -> dict[str, Any]:
    """Return the live-validation answer for a timer: its canonical form and next fires."""
    try:
        timer = parse_timer(expression, kind=kind, tz=tz)
        times: list[datetime] = []
        moment: datetime | None = now
        while len(times) < PREVIEW_COUNT and moment is not None:
            moment = timer.next_after(moment)
            if moment is not None:
                times.append(moment)
    except TimerSyntaxError as exc:
        return {"ok": False, "error": str(exc), "position": exc.position}
    except (TimerError, ValueError) as exc:
        return {"ok": False, "error": str(exc), "position": None}
    return {
        "ok": True,
        "kind": timer.kind,
        "canonical": str(timer),
        "zone": timer.tz_name,
        "description": timer.describe(),
        "next": [{"utc": fmt_utc(t), "local": fmt_local(t, timer.tz_name)} for t in times],
    }


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def values_of(task: PeriodicTask) -> dict[str, str]:
    """Return the edit form's text values for a stored task."""
    return {
        "name": task.name,
        "task": task.task,
        "timer": task.timer,
        "kind": task.timer_kind,
        "tz": task.tz,
        "args": _json_text(task.args),
        "kwargs": _json_text(task.kwargs),
        "options": _json_text(task.options),
        "description": task.description,
        "misfire_policy": task.misfire_policy,
        "overlap_policy": task.overlap_policy,
        "abandon_policy": task.abandon_policy,
        "start_deadline": "" if task.start_deadline is None else f"{task.start_deadline:g}",
        "tolerance": "" if task.tolerance is None else f"{task.tolerance:g}",
        "version": str(task.version),
        "enabled": "on" if task.enabled else "",
    }


def blank() -> dict[str, str]:
    """Return the values of an empty "new task" form."""
    values = dict.fromkeys(FIELDS, "")
    values.update(
        tz="UTC",
        args="[]",
        kwargs="{}",
        options="{}",
        misfire_policy="run_once",
        overlap_policy="allow",
        abandon_policy="leave",
        enabled="on",
    )
    return values


def submitted(form: Mapping[str, str]) -> dict[str, str]:
    """Return the posted form's text values (missing fields are empty)."""
    return {key: form.get(key, "") for key in FIELDS}


def changes(values: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Return the store keywords a form asks for, and per-field errors of shape."""
    errors: dict[str, str] = {}
    out: dict[str, Any] = {
        "task": values["task"].strip(),
        "timer": values["timer"],
        "kind": values["kind"] or None,
        "tz": values["tz"].strip() or "UTC",
        "description": values["description"],
        "misfire_policy": values["misfire_policy"],
        "overlap_policy": values["overlap_policy"],
    }
    if values["abandon_policy"]:  # a form without the field keeps the stored policy
        out["abandon_policy"] = values["abandon_policy"]
    if not out["task"]:
        errors["task"] = "the Celery task name is required"
    for key, want in (("args", list), ("kwargs", dict), ("options", dict)):
        try:
            parsed = json.loads(values[key] or ("[]" if want is list else "{}"))
        except ValueError as exc:
            errors[key] = f"not valid JSON: {exc}"
            continue
        if not isinstance(parsed, want):
            errors[key] = f"must be a JSON {'array' if want is list else 'object'}"
        out[key] = parsed
    for key in ("start_deadline", "tolerance"):
        text = values[key].strip()
        try:
            out[key] = float(text) if text else None
        except ValueError:
            errors[key] = f"must be a number of seconds, got {text!r}"
    try:
        parse_timer(out["timer"], kind=out["kind"], tz=out["tz"])
    except (TimerError, ValueError) as exc:
        errors["timer"] = str(exc)
    return out, errors


def store_error(exc: Exception) -> dict[str, str]:
    """Return which field a store error belongs to (by the field it names) and its text."""
    text = str(exc)
    if isinstance(exc, TimerError):
        return {"timer": text}
    for key in FIELDS:
        if text.startswith(key) or f" {key} " in text or f"{key}:" in text:
            return {key: text}
    return {"_form": text}
