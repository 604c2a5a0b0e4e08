"""What a source of schedules yields: a task to bring in, or a refusal naming why not.

Pure records. A reader (:mod:`celery_cronstore.adopt.sources`) maps each of the peer's
rows to one of these; :mod:`celery_cronstore.adopt.plan` validates and compares them with
the store. :class:`DocumentError` is the refusal of a whole export/apply file (here, so
that both parts of the file format, :mod:`.document` and :mod:`.calendars`, raise it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "DocumentError",
    "Incoming",
    "Read",
    "ReadContext",
    "Refused",
    "change_json",
    "change_line",
    "count_actions",
    "kind_of",
]


class DocumentError(ValueError):
    """A document that cannot be read at all; the message names the problem and the fix."""


def kind_of(value: Any) -> str:
    """Say what a value read from a file is, for a refusal ("a dict", "nothing")."""
    return "nothing" if value is None else f"a {type(value).__name__}"


@dataclass(frozen=True)
class Incoming:
    """One periodic task as a source describes it.

    ``values`` are fields of :mod:`celery_cronstore.fields` by name (``task``, ``timer``,
    ``kind``, ``tz``, ``args``, ``kwargs``, ``options``, ``enabled``, ``description``,
    ``start_deadline``, the policies, ``owner``); fields left out keep their default (or,
    for a task already stored, their stored value). ``origin`` says where it came from, for
    report lines (``django_celery_beat_periodictask id=12``).
    """

    name: str
    origin: str
    values: Mapping[str, Any]
    #: When the old scheduler last ran it (aware): the first fire here is its timer's
    #: next one after this, so that nothing fires again that already fired.
    last_run_at: datetime | None = None
    #: How many times the old scheduler ran it.
    total_run_count: int | None = None
    #: No fire before this instant (aware): the peer's ``start_time``.
    start_at: datetime | None = None
    #: Notes for the report (what was mapped approximately, what was dropped and why).
    notes: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Refused:
    """A row of the source that cannot come over; ``reason`` names the problem and the fix."""

    name: str
    origin: str
    reason: str


#: One row of a source, mapped.
Read = Incoming | Refused


@dataclass(frozen=True)
class ReadContext:
    """What a reader may need besides the location it reads."""

    #: Zone for schedules that have none of their own (the app's ``timezone``).
    zone: str = "UTC"
    #: The Celery app (``beat_schedule``), or ``None``.
    app: Any = None
    #: RedBeat's key prefix (``redbeat_key_prefix``; default ``redbeat:``).
    key_prefix: str | None = None


# -- how a plan's changes (tasks and calendars alike) are reported ---------------------------


def change_line(
    action: str,
    label: str,
    fields: Mapping[str, tuple[Any, Any]],
    reason: str,
    created: str | None = None,
) -> str:
    """Return the one line a report prints for a change of ``label``: an update lists
    each changed field (old -> new), a create ``created`` (a summary), the rest the reason.
    """
    head = f"{action:<9} {label}"
    if action == "update":
        changed = ", ".join(
            f"{k}: {_show(old)} -> {_show(new)}" for k, (old, new) in fields.items()
        )
        return f"{head}  ({changed})"
    if action == "create" and created is not None:
        return f"{head}  ({created})"
    return f"{head}  {reason}".rstrip()


def change_json(
    action: str, name: str, origin: str, fields: Mapping[str, tuple[Any, Any]], reason: str
) -> dict[str, Any]:
    """Return a change as plain JSON data (``--json``)."""
    out: dict[str, Any] = {"action": action, "name": name, "origin": origin}
    if fields:
        out["fields"] = {k: {"old": o, "new": n} for k, (o, n) in fields.items()}
    if reason:
        out["reason"] = reason
    return out


def count_actions(actions: Iterable[str], known: Iterable[str]) -> dict[str, int]:
    """Return how many of ``actions`` are each of ``known`` (zeros included, in order)."""
    seen = Counter(actions)
    return {action: seen.get(action, 0) for action in known}


def _show(value: Any) -> str:
    text = value.isoformat() if isinstance(value, datetime) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
