"""Sentry Crons check-ins from the ledger, when ``sentry_sdk`` is installed and initialized.

Each enabled task is a monitor whose slug is the task's name. Every look, beat reads each
task's newest fire (one seek per task) and reports what changed since its last look:
``in_progress`` when the fire started, ``ok`` when it succeeded, ``error`` when it ended
badly (failed, timed out, abandoned, lost, dropped, expired, missed). A fire that started
and ended between two looks gets its end alone, which Sentry takes as a whole run.

The check-in id is the fire's own (its deterministic Celery task id, as hex), so the
start and the end of one fire are one check-in in Sentry, and the same report sent by two
beat replicas, or again after a restart, lands on that same check-in. What changed since
the last look (and, after a start, the catch-up of :data:`CATCH_UP`) is decided by
:class:`~celery_cronstore.beat.changes.Changes`, shared with the ping URLs. Cron and
interval timers also send their schedule (``monitor_config``): Sentry then creates the
monitor and says when a check-in is missing.

We call only ``sentry_sdk``'s public API: ``is_initialized()`` and
``sentry_sdk.crons.capture_checkin``; the SDK's own transport sends the envelope.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from celery_cronstore.beat.changes import CATCH_UP, FAIL, OK, START, Changes, progress, run_id
from celery_cronstore.records import Fire
from celery_cronstore.store.alerts import NewestFire
from celery_cronstore.timers import parse_timer

__all__ = ["CATCH_UP", "SentryCheckins", "checkin_status", "monitor_config", "sentry_active"]

#: Sentry's status of each progress.
_STATUS = {START: "in_progress", OK: "ok", FAIL: "error"}
# Sentry's interval units, largest first, in seconds (months and years are not fixed).
_UNITS = (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60))


def sentry_active() -> bool:
    """Return whether ``sentry_sdk`` is importable and initialized (with a DSN)."""
    try:
        import sentry_sdk
    except ImportError:
        return False
    return bool(sentry_sdk.is_initialized())


def checkin_status(state: str) -> str | None:
    """Return the Sentry status a fire in ``state`` reports (``None``: nothing yet)."""
    step = progress(state)
    return None if step is None else _STATUS[step]


def monitor_config(kind: str, expression: str, tz: str) -> dict[str, Any] | None:
    """Return the Sentry monitor schedule of a timer, if Sentry can say it."""
    if kind == "cron":
        return {"schedule": {"type": "crontab", "value": expression}, "timezone": tz}
    if kind != "interval":
        return None  # calendar events and one-off instants have no Sentry schedule
    try:
        period = parse_timer(expression, kind=kind, tz=tz).period  # type: ignore[attr-defined]
    except ValueError:
        return None
    seconds = int(period.total_seconds())
    for unit, size in _UNITS:
        if seconds % size == 0:
            return {"schedule": {"type": "interval", "value": seconds // size, "unit": unit}}
    return None


def _duration(fire: Fire) -> float | None:
    if fire.started_at is None or fire.finished_at is None:
        return None
    return max((fire.finished_at - fire.started_at).total_seconds(), 0.0)


class SentryCheckins:
    """What this beat reported to Sentry, per task, and the next report (see the module).

    The tracking is its own :class:`Changes`: every enabled task is a monitor."""

    def __init__(self) -> None:
        self._changes = Changes()
        #: Check-ins sent so far (logs, tests).
        self.sent = 0

    def look(self, newest: Sequence[NewestFire], now: datetime) -> int:
        """Report each task's newest fire if it changed; return how many were sent."""
        from sentry_sdk.crons import capture_checkin

        sent = 0
        for row, step in self._changes.look(newest, now):
            fire = row.fire
            capture_checkin(
                monitor_slug=row.name,
                check_in_id=run_id(fire.task_id).hex,
                status=_STATUS[step],
                duration=_duration(fire) if step != START else None,
                monitor_config=monitor_config(row.timer_kind, row.timer, row.tz),  # type: ignore[arg-type]
            )
            sent += 1
        self.sent += sent
        return sent
