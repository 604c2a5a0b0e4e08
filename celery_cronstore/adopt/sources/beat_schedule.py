"""Celery's own beat: the ``beat_schedule`` setting and ``PersistentScheduler``'s shelve.

``location`` says what to read:

``None``
    ``context.app.conf.beat_schedule`` (``celery -A proj cronstore import --from
    beat-schedule``).
``module:attribute`` or ``module.attribute``
    A ``beat_schedule`` dict, or a Celery app whose ``conf.beat_schedule`` (and
    ``timezone``) is used.
a file path
    The ``celerybeat-schedule`` shelve ``PersistentScheduler`` writes (``beat -s``; the
    ``.db``/``.dat`` suffix some dbm flavours add may be given or left out). With an app
    whose ``beat_schedule`` is not empty (``context.app``), the setting says *which*
    tasks there are and the shelve only gives their last runs (Celery merges the setting
    into the shelve at start, so the setting is the truth); shelve entries no longer in
    the setting are refused (Celery drops them at its next start). Without one, the
    shelve's own entries (task, schedule, args, kwargs, options) are read.
``SETTING@PATH``
    Both at once: ``proj.celeryconfig:beat_schedule@/var/lib/beat/celerybeat-schedule``.

Mapping: each entry's ``schedule`` through
:func:`celery_cronstore.adopt.convert.schedule_timer` (crontabs in the app's zone, else
the zone the shelve was written in, else ``context.zone``; intervals from their last run,
as Celery fires them ``run_every`` after it; never run: the epoch grid, noted), with the
entry's ``relative`` flag; ``args``/``kwargs``/``options`` as they are, refused when not
JSON (beat sends JSON); the entry's ``"cronstore"`` mapping (policies, as beat's own sync
reads it) as fields. ``last_run_at`` and ``total_run_count`` come from the shelve; a
naive ``last_run_at`` is UTC, as Celery reads it. When the shelve's stored ``tz`` or
``utc_enabled`` differ from the app's, Celery would reset it at its next start: the last
runs are then left out, with a note.

The shelve is a pickle file (opened read-only): read only one you trust, as beat does.
"""

from __future__ import annotations

import importlib
import os
import shelve
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from celery_cronstore import fields
from celery_cronstore.adopt import convert
from celery_cronstore.adopt.records import Incoming, Read, ReadContext, Refused
from celery_cronstore.beat.schedule_sync import entry_policies

__all__ = ["Shelf", "arguments", "read", "read_shelf"]

_SUFFIXES = (".db", ".dat", ".dir", ".bak")


def arguments(args: Any, kwargs: Any, options: Any) -> dict[str, Any]:
    """Return ``args``, ``kwargs`` and ``options`` as the store's fields (``None``: empty;
    tuples: lists), checked; ``ValueError`` naming the one that is not JSON."""
    values = {
        "args": list(args) if isinstance(args, tuple) else ([] if args is None else args),
        "kwargs": {} if kwargs is None else kwargs,
        "options": {} if options is None else options,
    }
    return {name: fields.field(name).check(value) for name, value in values.items()}


@dataclass(frozen=True)
class Shelf:
    """What a ``celerybeat-schedule`` shelve holds."""

    entries: Mapping[str, Any]
    tz: str | None = None
    utc_enabled: bool | None = None
    notes: tuple[str, ...] = field(default=())


def read_shelf(path: str) -> Shelf:
    """Return the entries of the shelve at ``path`` (read-only; ``ValueError`` if it cannot
    be opened or read)."""
    candidates = [path]
    stem, suffix = os.path.splitext(path)
    if suffix in _SUFFIXES:
        candidates.append(stem)
    problem: Exception | None = None
    for candidate in candidates:
        try:
            with shelve.open(candidate, flag="r") as db:
                entries = dict(db.get("entries") or {})
                tz = db.get("tz")
                utc = db.get("utc_enabled")
        except Exception as exc:  # dbm raises its own errors; unpickling anything
            problem = exc
            continue
        return Shelf(
            entries=entries,
            tz=None if tz is None else str(tz),
            utc_enabled=None if utc is None else bool(utc),
        )
    raise ValueError(f"cannot read the beat shelve {path!r}: {problem}")


def _is_file(location: str) -> bool:
    if os.path.exists(location) or any(os.path.exists(location + s) for s in _SUFFIXES):
        return True
    return os.sep in location or "/" in location


def _import(path: str) -> Any:
    """Return the object at ``module:attribute`` or ``module.attribute``."""
    module, sep, attribute = path.partition(":")
    if not sep:
        module, _, attribute = path.rpartition(".")
    if not module or not attribute:
        raise ValueError(
            f"{path!r} is not a Python path: give module:attribute (proj.celery:app) or a "
            "shelve file path"
        )
    try:
        found = importlib.import_module(module)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import {path!r}: {exc}") from None
    return found


def _setting(target: Any, context: ReadContext) -> tuple[dict[str, Any], str, Any]:
    """Return (beat_schedule, zone, app) of a dict or an app."""
    if isinstance(target, Mapping):
        return dict(target), context.zone, context.app
    conf = getattr(target, "conf", None)
    if conf is None:
        raise ValueError(
            f"{type(target).__name__} is neither a beat_schedule dict nor a Celery app"
        )
    return dict(conf.beat_schedule or {}), str(conf.timezone or "UTC"), target


def read(location: str | None, context: ReadContext) -> list[Read]:
    """Return every ``beat_schedule`` entry (or shelve entry) at ``location``, mapped."""
    setting: dict[str, Any] | None = None
    zone, app, shelf = context.zone, context.app, None
    spec, at, path = (location or "").rpartition("@")
    if not at:
        spec = ""
    if path and not spec and not _is_file(path):
        spec, path = path, ""
    if spec:
        setting, zone, app = _setting(_import(spec), context)
    elif app is not None and path:
        setting, zone, app = _setting(app, context)
        setting = setting or None
    elif not path:
        if app is None:
            raise ValueError(
                "no beat_schedule to read: run under the Celery app (celery -A proj "
                "cronstore ...) or give --url module:beat_schedule or a shelve file"
            )
        setting, zone, app = _setting(app, context)
    if path:
        shelf = read_shelf(path)
    if setting is None:
        if shelf is None:  # pragma: no cover - one of them is always given
            return []
        zone = shelf.tz or zone
    return _read(setting, shelf, zone, app)


def _read(setting: dict[str, Any] | None, shelf: Shelf | None, zone: str, app: Any) -> list[Read]:
    notes = _stale(shelf, app) if shelf is not None else ()
    # A reset shelve's last runs are not Celery's any more (see the module doc).
    keep = not notes
    if setting is None:
        entries = shelf.entries if shelf is not None else {}
        return [
            _from_shelf(str(name), entry, zone, keep, notes)
            for name, entry in sorted(entries.items(), key=lambda item: str(item[0]))
        ]
    runs: Mapping[str, Any] = shelf.entries if shelf is not None and keep else {}
    results: list[Read] = [
        _from_setting(str(name), entry, runs.get(name), zone, notes)
        for name, entry in setting.items()
    ]
    if shelf is not None:
        for name in sorted(set(map(str, shelf.entries)) - set(map(str, setting))):
            results.append(
                Refused(
                    name,
                    f"celerybeat-schedule entry {name}",
                    f"{name!r} is in the shelve but no longer in beat_schedule: Celery drops "
                    "it at its next start; add it to beat_schedule to bring it over",
                )
            )
    return results


def _stale(shelf: Shelf, app: Any) -> tuple[str, ...]:
    if app is None:
        return ()
    conf = app.conf
    notes = []
    tz = str(conf.timezone or "UTC")
    if shelf.tz is not None and shelf.tz != tz:
        notes.append(
            f"the shelve was written with timezone {shelf.tz!r}, the app now has {tz!r}: "
            "Celery resets it at its next start, so its last runs are left out"
        )
    utc = bool(conf.enable_utc)
    if shelf.utc_enabled is not None and shelf.utc_enabled != utc:
        notes.append(
            f"the shelve was written with enable_utc={shelf.utc_enabled}, the app now has "
            f"{utc}: Celery resets it at its next start, so its last runs are left out"
        )
    return tuple(notes)


def _from_setting(name: str, entry: Any, ran: Any, zone: str, notes: tuple[str, ...]) -> Read:
    origin = f"beat_schedule entry {name}"
    try:
        if not isinstance(entry, Mapping):
            raise ValueError(f"the entry is a {type(entry).__name__}, not a mapping")
        policies = entry.get("cronstore") or {}
        if not isinstance(policies, Mapping):
            raise ValueError("its 'cronstore' must be a mapping of policies")
        unknown = sorted(str(k) for k in policies if k not in entry_policies())
        if unknown:
            raise ValueError(f"unknown 'cronstore' key(s) {', '.join(unknown)}")
        last = _last_run(getattr(ran, "last_run_at", None))
        count = getattr(ran, "total_run_count", None)
        return _incoming(
            name,
            origin,
            task=entry.get("task"),
            schedule=entry.get("schedule"),
            relative=bool(entry.get("relative", False)),
            args=entry.get("args"),
            kwargs=entry.get("kwargs"),
            options=entry.get("options"),
            policies=dict(policies),
            last_run_at=last,
            total_run_count=count if isinstance(count, int) and last is not None else None,
            zone=zone,
            notes=notes,
        )
    except ValueError as exc:
        return Refused(name, origin, f"beat_schedule entry {name!r}: {exc}")


def _from_shelf(name: str, entry: Any, zone: str, keep: bool, notes: tuple[str, ...]) -> Read:
    origin = f"celerybeat-schedule entry {name}"
    try:
        last = _last_run(getattr(entry, "last_run_at", None)) if keep else None
        count = getattr(entry, "total_run_count", None)
        return _incoming(
            name,
            origin,
            task=getattr(entry, "task", None),
            schedule=getattr(entry, "schedule", None),
            relative=False,  # a shelve entry's schedule object carries it already
            args=getattr(entry, "args", None),
            kwargs=getattr(entry, "kwargs", None),
            options=getattr(entry, "options", None),
            policies={},
            last_run_at=last,
            total_run_count=count if isinstance(count, int) and keep else None,
            zone=zone,
            notes=notes,
        )
    except ValueError as exc:
        return Refused(name, origin, f"celerybeat-schedule entry {name!r}: {exc}")


def _last_run(value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValueError(f"its last_run_at {value!r} is not a datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        return value.replace(tzinfo=timezone.utc)  # Celery reads naive times as UTC
    return value


def _incoming(
    name: str,
    origin: str,
    *,
    task: Any,
    schedule: Any,
    relative: bool,
    args: Any,
    kwargs: Any,
    options: Any,
    policies: dict[str, Any],
    last_run_at: datetime | None,
    total_run_count: int | None,
    zone: str,
    notes: tuple[str, ...],
) -> Incoming:
    if not isinstance(task, str) or not task:
        raise ValueError(f"its task is {task!r}: give the Celery task name")
    if schedule is None:
        raise ValueError("it has no schedule")
    if relative and isinstance(schedule, (int, float, timedelta)):
        from celery.schedules import schedule as celery_schedule

        seconds = schedule if isinstance(schedule, timedelta) else timedelta(seconds=schedule)
        schedule = celery_schedule(run_every=seconds, relative=True)
    spec = convert.schedule_timer(schedule, zone, last_run_at=last_run_at)
    extra: list[str] = list(notes)
    if spec.kind == "interval" and last_run_at is None and " from " not in spec.timer:
        extra.append(
            "never ran: fires on the interval grid from the epoch (Celery would fire it "
            "one period after beat starts)"
        )
    return Incoming(
        name=name,
        origin=origin,
        values={
            "task": task,
            **spec.values(),
            **arguments(args, kwargs, options),
            **policies,
        },
        last_run_at=last_run_at,
        total_run_count=total_run_count,
        notes=tuple(extra),
    )
