"""The file ``cronstore export`` writes and ``cronstore apply`` / ``check --file`` read.

A document is plain data, the same in JSON and YAML::

    {"cronstore": 1,
     "tasks": [{"name": "report", "task": "app.report", "timer": "0 9 * * *",
                "kind": "cron", "tz": "Europe/Berlin", "enabled": true, ...,
                "exclude": "xmas", "owner": "tenant:42",
                "state": {"source": "cli", "next_run": "2026-03-03T08:00:00Z", ...}}],
     "calendars": [{"name": "xmas", "entries": ["2026-12-24..2026-12-26"],
                    "holidays": null, "description": "Christmas"}]}

* ``cronstore`` is the format's version (``1``): a reader refuses any other, so that a
  file written by a later release is never half understood;
* each task has every field of :func:`celery_cronstore.fields.table` by its field name
  (the one list every window shares: a field added there is exported and read here with
  no change to this module). The timer is as stored (canonical text, ``kind``, ``tz``);
  the owner is ``"TYPE:ID"`` text (ids are stored as text), or ``null``. An owner type
  that itself contains ``:`` is written as a ``[type, id]`` pair, which reads back
  unambiguously (the text form splits at the first ``:``, so ids may contain colons);
* ``state`` is read-only: what the store knows about the task (``source``, ``next_run``,
  ``last_fire``, ``total_run_count``, ``error``, ``version``; times UTC ISO-8601). A
  reader ignores it, except ``state.last_fire``, which becomes the incoming task's
  ``last_run_at``: a task moved from one store to another starts after the fire it last
  sent there, so nothing fires twice (and on the same store it changes nothing);
* ``calendars`` (optional; added in version 1, so older files read as before) are the
  exclusion calendars the tasks' ``exclude`` names, each as stored (``name``, ``entries``,
  ``holidays``, ``description``), sorted by name: an export of the whole store writes
  every calendar, so a file applied to a fresh store brings its calendars with it. How
  they are read and planned, and what ``--prune`` does with them: :mod:`.calendars`.

A task entry may leave fields out: they keep their stored value (or, for a new task,
their default). Unknown keys refuse that entry (a typo must not be dropped silently);
a document whose shape is wrong is refused as a whole (``ValueError`` naming the problem
and the fix), because a half-read desired state would be pruned against.

Pure: no database, no clock. YAML needs PyYAML (the ``yaml`` extra), imported only when a
YAML document is read or written.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from celery_cronstore import fields
from celery_cronstore.adopt.calendars import FileCalendar, export_calendars, read_calendars
from celery_cronstore.adopt.records import DocumentError, Incoming, Read, Refused, kind_of
from celery_cronstore.policy.exclusions import CalendarText
from celery_cronstore.records import PeriodicTask
from celery_cronstore.timers.once import format_instant

__all__ = [
    "FORMATS",
    "STATE",
    "VERSION",
    "Document",
    "DocumentError",
    "dump",
    "export_document",
    "format_of",
    "load_file",
    "load_text",
    "parse_document",
    "read_document",
]

#: The version of the format this release writes and reads.
VERSION = 1
#: The formats :func:`dump` writes and :func:`load_text` reads.
FORMATS = ("json", "yaml")
#: The read-only keys of an entry's ``state`` mapping.
STATE = ("source", "next_run", "last_fire", "total_run_count", "error", "version")

_TOP = ("cronstore", "tasks", "calendars")
_FIX = "see `cronstore export` for the format"


@dataclass(frozen=True)
class Document:
    """What a file says: its task entries, and its calendars (``None``: the file has no
    ``calendars`` key, and leaves the stored calendars as they are)."""

    tasks: list[Read]
    calendars: list[FileCalendar] | None = None


# -- writing --------------------------------------------------------------------------------


def export_document(
    tasks: Sequence[PeriodicTask], calendars: Iterable[CalendarText] | None = None
) -> dict[str, Any]:
    """Return the document of ``tasks`` (sorted by name: the same store, the same file)
    and, unless ``None``, of ``calendars`` (sorted by name too; ``[]`` writes the key)."""
    document: dict[str, Any] = {
        "cronstore": VERSION,
        "tasks": [_entry(task) for task in sorted(tasks, key=lambda t: t.name)],
    }
    if calendars is not None:
        document["calendars"] = export_calendars(calendars)
    return document


def _entry(task: PeriodicTask) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    for spec in fields.table():
        if spec.name == "owner":
            entry["owner"] = _owner_out(task.owner)
        else:
            value = getattr(task, spec.key)
            entry[spec.name] = _plain(value)
    entry["state"] = {
        "source": task.source,
        "next_run": _instant(task.next_run),
        "last_fire": _instant(task.last_fire),
        "total_run_count": task.total_run_count,
        "error": task.error,
        "version": task.version,
    }
    return entry


def _plain(value: Any) -> Any:
    """Return a copy of ``value`` (lists and dicts are the stored task's own), an instant
    as ISO-8601 text (what the field reads back)."""
    if isinstance(value, datetime):
        return format_instant(value)
    return json.loads(json.dumps(value)) if isinstance(value, (list, dict)) else value


def _owner_out(owner: tuple[str, str] | None) -> Any:
    if owner is None:
        return None
    owner_type, owner_id = owner
    if ":" in owner_type:  # "a:b:c" would read back as ("a", "b:c")
        return [owner_type, owner_id]
    return f"{owner_type}:{owner_id}"


def _instant(value: datetime | None) -> str | None:
    return None if value is None else format_instant(value)


def dump(document: Mapping[str, Any], format: str = "json") -> str:
    """Return ``document`` as text in ``format`` (``json`` or ``yaml``), keys sorted.

    Sorted keys and tasks sorted by name make the output stable: exporting the same
    store twice gives the same bytes, and a ``git diff`` of two exports shows only what
    changed. Non-ASCII text is written as is (UTF-8), not escaped.
    """
    if format == "json":
        return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if format == "yaml":
        text: str = _yaml().safe_dump(
            _plain_mapping(document),
            sort_keys=True,
            allow_unicode=True,
            default_flow_style=False,
            width=100,
        )
        return text
    raise DocumentError(f"unknown format {format!r}: give one of {', '.join(FORMATS)}")


def _plain_mapping(document: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``document`` as plain dicts and lists (PyYAML's safe dumper wants them)."""
    data: dict[str, Any] = json.loads(json.dumps(document))
    return data


# -- reading --------------------------------------------------------------------------------


def _yaml() -> Any:
    """Return the ``yaml`` module (PyYAML), or raise naming the extra that installs it."""
    try:
        return importlib.import_module("yaml")
    except ImportError:
        raise DocumentError(
            "YAML needs PyYAML, which is not installed: install celery-cronstore[yaml] "
            "(or use JSON: --format json, a .json file)"
        ) from None


def format_of(path: str, text: str) -> str:
    """Return the format of a file: by its extension (``.json``, ``.yaml``, ``.yml``),
    else by its content (JSON starts with ``{``; anything else is read as YAML)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        return "json"
    if suffix in (".yaml", ".yml"):
        return "yaml"
    return "json" if text.lstrip().startswith("{") else "yaml"


def load_file(path: str) -> Any:
    """Return the data of the JSON or YAML file at ``path`` (:func:`format_of`).

    Raise :class:`DocumentError` (a ``ValueError``) naming the problem for a file that
    cannot be read, is not UTF-8, or does not parse.
    """
    try:
        raw = Path(path).read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        reason = getattr(exc, "strerror", None) or exc
        raise DocumentError(
            f"cannot read {path!r}: {reason}: give the path of an exported file"
        ) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentError(
            f"{path} is not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start}): "
            "save it as UTF-8"
        ) from None
    return load_text(text, format_of(path, text), path)


def load_text(text: str, format: str, origin: str) -> Any:
    """Return the data of ``text`` in ``format``; :class:`DocumentError` if it does not parse."""
    if format == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise DocumentError(
                f"{origin} is not valid JSON (line {exc.lineno} column {exc.colno}: "
                f"{exc.msg}): fix it, or export a fresh one with `cronstore export`"
            ) from None
        except RecursionError:
            raise DocumentError(
                f"{origin} is nested too deeply to be a cronstore file: give an exported one"
            ) from None
    if format == "yaml":
        yaml = _yaml()
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise DocumentError(
                f"{origin} is not valid YAML ({where}{problem}): fix it, or export a fresh "
                "one with `cronstore export --format yaml`"
            ) from None
        except RecursionError:
            raise DocumentError(
                f"{origin} is nested too deeply to be a cronstore file: give an exported one"
            ) from None
    raise DocumentError(f"unknown format {format!r}: give one of {', '.join(FORMATS)}")


def read_document(data: Any, origin: str) -> list[Read]:
    """Return each task entry of a document as an :class:`Incoming` (or a :class:`Refused`).

    ``origin`` names the file in messages. Raise :class:`DocumentError` for a document
    that is not one (wrong top level, version, an entry that is not a mapping or has no
    name, a ``calendars`` list of the wrong shape): nothing of it can be trusted, and a
    missing name would let ``--prune`` remove the task it meant. A bad value of one entry
    is left to :func:`~celery_cronstore.adopt.plan.make_plan`, which refuses that entry
    alone. :func:`parse_document` returns the calendars too.
    """
    return parse_document(data, origin).tasks


def parse_document(data: Any, origin: str) -> Document:
    """Return the tasks and calendars of a document; refuse it as :func:`read_document`
    does (and a calendar as :func:`~celery_cronstore.adopt.calendars.read_calendars`)."""
    if not isinstance(data, Mapping):
        raise DocumentError(
            f"{origin} is not a cronstore file: expected a mapping with 'cronstore: "
            f"{VERSION}' and 'tasks', got {kind_of(data)}: {_FIX}"
        )
    unknown = sorted(str(k) for k in data if k not in _TOP)
    if unknown:
        raise DocumentError(
            f"{origin}: unknown top-level key(s) {', '.join(unknown)}: a cronstore file has "
            "only 'cronstore' (the format version), 'tasks' and 'calendars'"
        )
    if "cronstore" not in data:
        raise DocumentError(
            f"{origin} is not a cronstore file: it has no 'cronstore' version key: add "
            f"'cronstore: {VERSION}' ({_FIX})"
        )
    version = data["cronstore"]
    if isinstance(version, bool) or version != VERSION:
        raise DocumentError(
            f"{origin} is format version {version!r}, this release reads version {VERSION}: "
            "export it again with this release, or upgrade celery-cronstore"
        )
    tasks = data.get("tasks")
    if not isinstance(tasks, list):
        raise DocumentError(
            f"{origin}: 'tasks' must be a list of task entries, got {kind_of(tasks)}: give "
            "'tasks: []' for none"
        )
    calendars = read_calendars(data["calendars"], origin) if "calendars" in data else None
    entries = [_read_entry(entry, f"{origin}: tasks[{i}]") for i, entry in enumerate(tasks)]
    return Document(entries, calendars)


def _read_entry(entry: Any, origin: str) -> Read:
    if not isinstance(entry, Mapping):
        raise DocumentError(f"{origin} must be a mapping of fields, got {kind_of(entry)}: {_FIX}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise DocumentError(
            f"{origin} has no name (got {name!r}): give every task entry a 'name' (text)"
        )
    table = fields.by_name()
    unknown = sorted(str(k) for k in entry if k not in table and k != "state")
    if unknown:
        return Refused(
            name,
            origin,
            f"unknown key(s) {', '.join(unknown)}: known are {', '.join(table)}, state",
        )
    try:
        last_run_at = _last_fire(entry.get("state"))
        values = {k: _value(k, v) for k, v in entry.items() if k not in ("name", "state")}
    except ValueError as exc:
        return Refused(name, origin, str(exc))
    return Incoming(name, origin, values, last_run_at=last_run_at)


def _value(key: str, value: Any) -> Any:
    if key == "owner" and isinstance(value, str):
        owner_type, sep, owner_id = value.partition(":")
        if not sep or not owner_type or not owner_id:
            raise ValueError(f"owner must be TYPE:ID text (e.g. tenant:42) or null, got {value!r}")
        return (owner_type, owner_id)
    if key == "timer" and isinstance(value, (date, datetime)):
        # YAML reads an unquoted instant as a timestamp: it meant the one-off timer.
        if isinstance(value, datetime) and value.tzinfo is not None:
            return format_instant(value)
        return value.isoformat()
    return value


def _last_fire(state: Any) -> datetime | None:
    """Return ``state.last_fire`` as an aware instant (``None`` if not given)."""
    if state is None:
        return None
    if not isinstance(state, Mapping):
        raise ValueError(f"state must be a mapping (it is read-only), got {kind_of(state)}")
    value = state.get("last_fire")
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"state.last_fire must be an ISO-8601 instant (2026-03-02T09:00:00Z), "
                f"got {value!r}: fix it or remove it"
            ) from None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError(
            f"state.last_fire must be an ISO-8601 instant with a zone (2026-03-02T09:00:00Z), "
            f"got {value!r}: fix it or remove it"
        )
    return value
