"""Whether the beats of a store are doing their job: the rule behind ``cronstore health``.

A beat is *alive* when its last heartbeat is at most ``max_age`` old, and *stalled* when
it has had due fires it could neither claim nor publish for longer than ``stall_limit``
(the lease: after that, the fires it owes are late by more than the replicas promise).
The store is healthy when at least one alive beat is not stalled.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from celery_cronstore.records import Beat

__all__ = ["CLOCK_WARN", "CLOCK_WARN_EVERY", "beat_health"]

#: A host clock further than this (seconds) from the database's is reported.
CLOCK_WARN = 1.0
#: Seconds between two such reports of one process.
CLOCK_WARN_EVERY = 300.0


def beat_health(
    beats: Sequence[Beat], now: datetime, *, max_age: float, stall_limit: float
) -> tuple[bool, str]:
    """Return (healthy, one line saying why) for ``beats`` (newest heartbeat first)."""
    if not beats:
        return False, "unhealthy: no beat has ever ticked"
    alive = [b for b in beats if (now - b.last_tick).total_seconds() <= max_age]
    if not alive:
        newest = beats[0]
        age = (now - newest.last_tick).total_seconds()
        return False, (
            f"unhealthy: newest beat tick was {age:.1f}s ago (max {max_age:g}s), "
            f"by {newest.node} at {newest.last_tick.isoformat()}"
        )
    for candidate in alive:
        stalled = _stalled_for(candidate, now)
        if stalled is None or stalled <= stall_limit:
            age = (now - candidate.last_tick).total_seconds()
            text = f"healthy: beat {candidate.node} ticked {age:.1f}s ago (max {max_age:g}s)"
            return True, text + _clock_note(candidate)
    worst = alive[0]
    return False, (
        f"unhealthy: beat {worst.node} ticks but has had due fires it could not claim or "
        f"publish for {_stalled_for(worst, now) or 0:.1f}s (more than the lease of "
        f"{stall_limit:g}s): another process holds the rows, or the broker refuses messages"
    )


def _stalled_for(beat: Beat, now: datetime) -> float | None:
    if beat.stalled_since is None:
        return None
    return max(0.0, (now - beat.stalled_since).total_seconds())


def _clock_note(beat: Beat) -> str:
    if beat.clock_offset is None or abs(beat.clock_offset) <= CLOCK_WARN:
        return ""
    return f"; its clock is {beat.clock_offset:+.1f}s off the database's"
