"""The store's three timer fields, and the two conversions every peer needs: intervals
and one-off instants (see :mod:`celery_cronstore.adopt.convert`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from celery_cronstore.timers import parse_timer
from celery_cronstore.timers.once import format_instant

__all__ = ["TimerSpec", "aware", "interval_timer", "once_timer", "solar_timer", "spec"]

#: The longest interval timer (interval.py's maximum).
_MAX_SECONDS = 366 * 86_400


@dataclass(frozen=True)
class TimerSpec:
    """A timer as the store's three fields: expression, kind and zone (``None``: the
    store's default zone; intervals and once timers are instants and need none)."""

    timer: str
    kind: str
    tz: str | None

    def values(self) -> dict[str, Any]:
        """Return the ``timer``, ``kind`` and ``tz`` fields."""
        return {"timer": self.timer, "kind": self.kind, "tz": self.tz}


def spec(expression: str, kind: str, tz: str | None) -> TimerSpec:
    """Return the canonical spec of ``expression`` (TimerSyntaxError, a ValueError, if bad)."""
    timer = parse_timer(expression, kind=kind, tz=tz)
    return TimerSpec(str(timer), timer.kind, tz if tz is None else timer.tz_name)


def aware(instant: datetime, what: str) -> datetime:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"{what} {instant.isoformat()} has no zone: give an aware datetime")
    return instant.astimezone(timezone.utc)


def _rounded(seconds: object) -> int:
    if isinstance(seconds, (int, float)) and math.isfinite(seconds):
        return max(1, round(seconds))
    return 1


def interval_timer(seconds: float, origin: datetime | None) -> TimerSpec:
    """Return ``every Ns`` (canonical: ``every 1h30m``), ``from`` ``origin`` when given.

    Raise ``ValueError`` when ``seconds`` is not a whole number of at least 1 or more than
    366 days (with the fix), or ``origin`` is naive.
    """
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not math.isfinite(seconds)
        or seconds < 1
        or seconds != int(seconds)
    ):
        raise ValueError(
            f"interval {seconds!r}s is not a whole number of seconds of at least 1: "
            "cronstore intervals count whole seconds; make it one (e.g. "
            f"{_rounded(seconds)}s)"
        )
    if seconds > _MAX_SECONDS:
        raise ValueError(
            f"interval {int(seconds)}s is longer than the 366 days an interval timer may "
            "span: use a calendar timer (e.g. '*-01-01 00:00' yearly)"
        )
    expression = f"every {int(seconds)}s"
    if origin is not None:
        expression += f" from {format_instant(aware(origin, 'interval origin'))}"
    return spec(expression, "interval", None)


def once_timer(instant: datetime) -> TimerSpec:
    """Return a ``once`` timer at ``instant`` (aware; ``ValueError`` if naive)."""
    return spec(format_instant(aware(instant, "instant")), "once", None)


def solar_timer(event: Any, latitude: Any, longitude: Any) -> TimerSpec:
    """Return a ``solar`` timer of a peer's solar schedule (its event names are ours);
    ``ValueError`` naming the bad part if cronstore refuses it."""
    return spec(f"{event} {float(latitude)!r} {float(longitude)!r}", "solar", None)
