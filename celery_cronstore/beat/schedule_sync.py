"""Celery's ``beat_schedule`` setting: its entries as cronstore timers, mirrored into the store."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from celery_cronstore import fields
from celery_cronstore.adopt.convert import schedule_timer
from celery_cronstore.errors import CronstoreError, DuplicateTaskError, StoreUnavailableError
from celery_cronstore.store import Store
from celery_cronstore.timers import Timer, parse_timer

__all__ = ["ENTRY_POLICIES", "entry_policies", "sync_beat_schedule", "timer_from_entry"]

logger = logging.getLogger("celery.beat")


def entry_policies() -> dict[str, Any]:
    """Return what an entry's ``"cronstore"`` mapping may set, and the value a key left
    out means (the entry describes the task: a key removed from it goes back to its
    default): the fields of :mod:`celery_cronstore.fields` marked ``entry``, read now."""
    return {f.name: f.default for f in fields.entry_fields()}


#: :func:`entry_policies` as it was at import (kept for callers of this name).
ENTRY_POLICIES: dict[str, Any] = entry_policies()


def timer_from_entry(name: str, schedule: Any, default_tz: str) -> Timer:
    """Return the timer for one ``beat_schedule`` entry's ``schedule`` value.

    :func:`celery_cronstore.adopt.convert.schedule_timer` translates it (one home for
    Celery's schedules): numbers, timedeltas and ``schedule`` as intervals on the epoch
    grid, a ``crontab`` in the app's zone (a cron timer, or a calendar timer when both
    day fields are restricted, since Celery requires both to match), strings in any
    timer syntax. Raise ``ValueError`` naming the entry for anything else (e.g. ``solar``).
    """
    try:
        spec = schedule_timer(schedule, default_tz)
        return parse_timer(spec.timer, kind=spec.kind, tz=spec.tz)
    except ValueError as exc:
        raise ValueError(f"beat_schedule entry {name!r}: {exc}") from None


def sync_beat_schedule(store: Store, app: Any) -> None:
    """Mirror ``app.conf.beat_schedule`` into the store (source ``config``).

    Entries are added or updated; stored ``config`` tasks no longer in the setting are
    removed; a bad entry is logged and skipped; a stored task of another source with the
    same name is left alone. An entry's optional ``"cronstore"`` mapping sets the task's
    policies (:data:`ENTRY_POLICIES`, e.g. ``{"abandon_policy": "rerun"}``).
    """
    wanted = app.conf.beat_schedule or {}
    zone = str(app.conf.timezone or "UTC")
    for name, entry in wanted.items():
        try:
            _sync_entry(store, name, dict(entry), zone)
        except StoreUnavailableError:
            raise  # the database, not the entry: beat backs off and syncs again
        except (CronstoreError, ValueError) as exc:
            logger.error("beat: beat_schedule entry %r not stored: %s", name, exc)
    for stale in store.list(source="config"):
        if stale.name not in wanted:
            logger.info("beat: removing %r: no longer in beat_schedule", stale.name)
            store.remove(stale.name)


def _policies(name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Return the periodic task's policies an entry's ``"cronstore"`` mapping sets."""
    given = entry.get("cronstore") or {}
    if not isinstance(given, dict):
        raise ValueError(
            f"beat_schedule entry {name!r}: 'cronstore' must be a mapping of policies, "
            f"got {type(given).__name__}"
        )
    known = entry_policies()
    unknown = sorted(str(k) for k in given if k not in known)
    if unknown:
        raise ValueError(
            f"beat_schedule entry {name!r}: unknown 'cronstore' key(s) {', '.join(unknown)} "
            f"(known: {', '.join(known)})"
        )
    return {**known, **given}


def _sync_entry(store: Store, name: str, entry: dict[str, Any], zone: str) -> None:
    timer = timer_from_entry(name, entry["schedule"], zone)
    fields: dict[str, Any] = {
        "task": entry["task"],
        "args": list(entry.get("args") or ()),
        "kwargs": dict(entry.get("kwargs") or {}),
        "options": dict(entry.get("options") or {}),
        **_policies(name, entry),
    }
    try:
        current = store.get(name)
    except KeyError:
        with contextlib.suppress(DuplicateTaskError):  # another replica added it first
            store.add(
                name, timer=str(timer), kind=timer.kind, tz=timer.tz_name, source="config", **fields
            )
        return
    if current.source != "config":
        logger.warning("beat: beat_schedule entry %r shadows a stored task; left alone", name)
        return
    same_timer = (current.timer, current.timer_kind, current.tz) == (
        str(timer),
        timer.kind,
        timer.tz_name,
    )
    changed = {k: v for k, v in fields.items() if getattr(current, k) != v}
    if not same_timer:
        changed.update(timer=str(timer), kind=timer.kind, tz=timer.tz_name)
    if changed:
        store.update(name, **changed)
