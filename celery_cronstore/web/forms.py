"""Form and query-string handling: text in, typed values (or per-field errors) out.

The task form is built from :mod:`celery_cronstore.fields` (read when a form is shown or
posted): each field's text is parsed and checked there, so a bad value gets the message
every other window gives; what needs the database or the Celery app (a timer's zone, an
unknown task, args that do not fit, a past one-off) is left to the
:class:`~celery_cronstore.store.Store` API, whose message is shown next to the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from celery_cronstore import fields
from celery_cronstore.errors import TimerError, TimerSyntaxError
from celery_cronstore.policy.outcomes import parse_failing
from celery_cronstore.store import PeriodicTask
from celery_cronstore.store.read import MAX_PAGE_SIZE, TaskQuery
from celery_cronstore.timers import edit_kind, parse_timer
from celery_cronstore.web.render import fmt_local, fmt_utc

__all__ = [
    "POLICIES",
    "blank",
    "changes",
    "form_fields",
    "kind_of",
    "page_number",
    "preview",
    "store_error",
    "submitted",
    "task_query",
]

#: The policy choices the form offers (the store validates them again).
POLICIES = {f.name: f.choices for f in fields.table() if f.choices and f.group == "policies"}
#: Form keys that are not fields: the edit's concurrency check.
_EXTRA = ("version",)
#: Keys every submitted form has (the rest are absent when the page lacks them).
_ALWAYS = ("name", "task", "timer", "kind", "tz", "version")
PREVIEW_COUNT = 10
#: The deepest page a list or history offers (the offset stays far from any integer limit).
MAX_PAGE = 100_000


def _tristate(value: str | None) -> bool | None:
    return {"yes": True, "no": False}.get(value or "")


def page_number(args: Mapping[str, str], key: str, default: int = 1, top: int = MAX_PAGE) -> int:
    """Return the whole number ``args[key]`` in 1..``top`` (``ValueError`` naming it if not)."""
    text = args.get(key, "") or str(default)
    # ASCII digits only: int() also reads "1_0", " 7 " and other scripts' digits.
    if not (text.isascii() and text.isdigit()) or len(text) > 12 or not 1 <= int(text) <= top:
        shown = text[:40].encode("ascii", "backslashreplace").decode("ascii")
        raise ValueError(f"{key} must be a whole number from 1 to {top}, got {shown!r}")
    return int(text)


def task_query(args: Mapping[str, str]) -> TaskQuery:
    """Build the task-list query from the query string (``ValueError`` if malformed)."""
    page = page_number(args, "page")
    per_page = page_number(args, "per_page", 50, MAX_PAGE_SIZE)
    return TaskQuery(
        search=args.get("q", ""),
        enabled=_tristate(args.get("enabled")),
        in_error=_tristate(args.get("error")),
        owner_type=args.get("owner_type") or None,
        kind=args.get("kind") or None,
        failing=parse_failing(args.get("failing")),
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


def form_fields() -> list[fields.Field]:
    """Return the fields the task form shows (the table as it is now; the name and the
    enabled box are drawn apart, the name only when adding)."""
    return [f for f in fields.table() if f.name not in ("name", "enabled")]


def values_of(task: PeriodicTask) -> dict[str, str]:
    """Return the edit form's text values for a stored task."""
    values = {
        f.name: f.text(task.owner if f.name == "owner" else getattr(task, f.key, f.default))
        for f in fields.table()
    }
    values["version"] = str(task.version)
    return values


def blank() -> dict[str, str]:
    """Return the values of an empty "new task" form."""
    values = {f.name: f.text(f.default) for f in fields.table()}
    values.update(tz="UTC", version="")
    return values


def submitted(form: Mapping[str, str]) -> dict[str, str]:
    """Return the posted form's text values (a field the page lacks stays absent)."""
    keys = [*_ALWAYS, *(f.name for f in fields.table()), *_EXTRA]
    return {key: form.get(key, "") for key in dict.fromkeys(keys) if key in form or key in _ALWAYS}


def kind_of(values: Mapping[str, str], record: PeriodicTask | None) -> str | None:
    """Return the kind the form's timer is read as (``None``: detected from it).

    The form posts back the kind it showed, the stored one: left so while the expression
    changed, it is detected again (:func:`~celery_cronstore.timers.edit_kind`, the rule of
    every window), so ``*/5 * * * *`` -> ``every 5m`` saves as an interval.
    """
    given = values.get("kind", "").strip() or None
    if record is None:
        return given
    changed = values.get("timer", "").strip() != record.timer
    return edit_kind(
        given, stored=record.timer_kind, shown=record.timer_kind, timer_changed=changed
    )


def changes(
    values: Mapping[str, str], record: PeriodicTask | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """Return the store keywords a form asks for, and per-field errors.

    A field the form lacks (an older page) is left out: adding, the store's default;
    editing (``record``: the task as stored), the stored value stays, and the timer's
    kind follows :func:`kind_of`.
    """
    errors: dict[str, str] = {}
    out: dict[str, Any] = {}
    for spec in form_fields():
        if spec.name not in values:
            continue
        try:
            out[spec.name] = spec.parse(values[spec.name])
        except ValueError as exc:
            errors[spec.name] = str(exc)
    if "tz" in out and out["tz"] is None:
        out["tz"] = "UTC"
    if "kind" in out and "kind" not in errors:
        out["kind"] = kind_of(values, record)
    if "timer" not in errors:
        try:
            parse_timer(out["timer"], kind=out.get("kind"), tz=out.get("tz"))
        except (TimerError, ValueError) as exc:
            errors["tz" if "time zone" in str(exc) else "timer"] = str(exc)
    return out, errors


def store_error(exc: Exception) -> dict[str, str]:
    """Return which field a store error belongs to and its text."""
    text = str(exc)
    if isinstance(exc, fields.FieldValueError):
        known = exc.field in {f.name for f in form_fields()}
        return {exc.field if known else "_form": text}
    if isinstance(exc, TimerError):
        return {"tz" if "time zone" in text else "timer": text}
    for spec in fields.table():
        key = spec.name
        if text.startswith(key) or f" {key} " in text or f"{key}:" in text:
            return {key: text}
    return {"_form": text}
