"""Whether the beats of a store are doing their job: the rule behind ``cronstore health``.

A beat is *alive* when its last heartbeat is at most ``max_age`` old, and *stalled* when
it has had due fires it could neither claim nor publish for longer than ``stall_limit``
(the lease: after that, the fires it owes are late by more than the replicas promise).

A heartbeat alone cannot tell the whole truth: a beat blocked on a cut or paused database
link, on a locked table or on a broker that refuses messages writes no heartbeat, and its
last one still says "fine" until it is ``max_age`` old. So health also reads the store's
*backlog* (:class:`Backlog`): enabled tasks due longer than ``stall_limit`` ago that no
beat claimed, and claims not published that long after their fire time. Any of them, or a
backlog look that could not get an answer in time (a table locked), is unhealthy,
whatever the heartbeats say. The store is healthy when at least one alive beat is not
stalled and the backlog is empty.

A beat started with firing off (``CRONSTORE_FIRE=0``: a staging copy of a production
store) claims nothing on purpose. When every alive beat is such a beat, the store is
healthy (a liveness probe must not restart a beat that does what it was told), the line
says that firing is off and due work waits, and the backlog is not judged; with
``require_firing`` it is unhealthy instead. Alive beats that fire are judged as above,
and the others are named in the line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from celery_cronstore.records import Beat

__all__ = [
    "CLOCK_WARN",
    "CLOCK_WARN_EVERY",
    "OFF_SWITCH",
    "Backlog",
    "backlog_problem",
    "beat_health",
]

#: How a beat is started with firing off, as the lines name it.
OFF_SWITCH = "CRONSTORE_FIRE=0 or cronstore_fire = False"
#: A host clock further than this (seconds) from the database's is reported.
CLOCK_WARN = 1.0
#: Seconds between two such reports of one process.
CLOCK_WARN_EVERY = 300.0


@dataclass(frozen=True)
class Backlog:
    """What the store owes: due work no beat has done, as one look at the store saw it."""

    #: The database's time of the look.
    now: datetime
    #: Enabled tasks (not in error) whose ``next_run`` is more than the limit ago.
    overdue: int = 0
    #: The oldest such ``next_run``.
    oldest_due: datetime | None = None
    #: Fires claimed (or being sent) but not published, whose fire time is more than the
    #: limit ago.
    unpublished: int = 0
    #: The oldest such fire time.
    oldest_claim: datetime | None = None
    #: Why the look got no answer (a lock or statement timeout), or ``None``.
    blocked: str | None = None


def backlog_problem(backlog: Backlog, limit: float) -> str | None:
    """Return why ``backlog`` is unhealthy (one line), or ``None`` when it is not."""
    if backlog.blocked is not None:
        return (
            f"unhealthy: the store did not answer health's look within its timeout "
            f"({backlog.blocked}): the task or fire table is locked (a migration, a LOCK "
            f"TABLE, a long transaction), so beats could not claim or publish either"
        )
    parts: list[str] = []
    if backlog.overdue and backlog.oldest_due is not None:
        late = (backlog.now - backlog.oldest_due).total_seconds()
        parts.append(f"{backlog.overdue} enabled task(s) due for up to {late:.1f}s not claimed")
    if backlog.unpublished and backlog.oldest_claim is not None:
        late = (backlog.now - backlog.oldest_claim).total_seconds()
        parts.append(
            f"{backlog.unpublished} claimed fire(s) due for up to {late:.1f}s not published"
        )
    if not parts:
        return None
    return (
        f"unhealthy: {'; '.join(parts)} (more than the lease of {limit:g}s): beats could "
        "not claim or publish them (database unreachable or locked, broker refusing, "
        "or no beat running)"
    )


def beat_health(
    beats: Sequence[Beat],
    now: datetime,
    *,
    max_age: float,
    stall_limit: float,
    backlog: Backlog | None = None,
    require_firing: bool = False,
) -> tuple[bool, str]:
    """Return (healthy, one line saying why) for ``beats`` (newest heartbeat first) and
    the store's ``backlog`` (``None``: not looked at); ``require_firing``: a store whose
    alive beats all have firing off is unhealthy."""
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
    firing = [b for b in alive if b.firing is not False]
    if not firing:
        off = alive[0]
        age = (now - off.last_tick).total_seconds()
        text = (
            f"firing is off: beat {off.node} (ticked {age:.1f}s ago, max {max_age:g}s) was "
            f"started with {OFF_SWITCH}: it claims and publishes nothing, and due work "
            "waits"
        )
        if require_firing:
            return False, f"unhealthy: {text} (--require-firing)"
        return True, f"healthy: {text}"
    problem = None if backlog is None else backlog_problem(backlog, stall_limit)
    if problem is not None:
        return False, problem
    unarmed = len(alive) - len(firing)
    also = f"; {unarmed} more alive beat(s) with firing off ({OFF_SWITCH})" if unarmed else ""
    for candidate in firing:
        stalled = _stalled_for(candidate, now)
        if stalled is None or stalled <= stall_limit:
            age = (now - candidate.last_tick).total_seconds()
            text = f"healthy: beat {candidate.node} ticked {age:.1f}s ago (max {max_age:g}s)"
            return True, text + _clock_note(candidate) + also
    worst = firing[0]
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
