"""The due grid points of a task, found in time that does not grow with the outage, and
the misfire choice among them. Pure: no SQL, no Celery, no clock."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery_cronstore.timers import Timer

__all__ = ["WALK_LIMIT", "Backlog", "backlog", "choose"]

#: Grid points of a backlog walked one by one; past that it is searched (O(1) in length).
WALK_LIMIT = 1000
_TICK = timedelta(microseconds=1)


@dataclass(frozen=True)
class Backlog:
    """The due grid points of a task: the first, the last few, how many, and the next."""

    first: datetime | None
    tail: list[datetime]
    count: int
    #: The first grid point after now (the task's next plan); ``None``: no further fire.
    following: datetime | None
    #: Whether ``count`` is exact (``False``: estimated over a long outage).
    exact: bool = True


def backlog(
    timer: Timer,
    first: datetime,
    now: datetime,
    *,
    keep: int,
    taken: frozenset[datetime] = frozenset(),
) -> Backlog:
    """Find the due grid points from ``first`` up to ``now``; keep the last ``keep``.

    Points in ``taken`` (already in the ledger) are passed over, not counted. Up to
    :data:`WALK_LIMIT` points are walked one by one (from each to the next, never
    restarting from ``now``, so a wall time that repeats in an autumn fold is planned
    once); past that, the newest points are found by searching back from ``now`` and the
    ones in between are counted without walking (exactly for interval timers, estimated
    from the walked spacing otherwise): the cost does not grow with the outage.
    """
    tail: deque[datetime] = deque(maxlen=keep)
    count = walked = 0
    start: datetime | None = None
    point: datetime | None = first
    while point is not None and point <= now:
        if walked >= WALK_LIMIT:
            return _jump(timer, first, point, now, Backlog(start, list(tail), count, None), keep)
        if point not in taken:
            start = start or point
            tail.append(point)
            count += 1
        walked += 1
        point = timer.next_after(point)
    return Backlog(start, list(tail), count, point)


def _jump(
    timer: Timer, first: datetime, point: datetime, now: datetime, walked: Backlog, keep: int
) -> Backlog:
    """Finish a long backlog: ``point`` (due) is the first grid point not walked."""
    newest = timer.last_at_or_before(now) or point
    recent: deque[datetime] = deque([newest], maxlen=keep)
    while len(recent) < keep:
        previous = timer.last_at_or_before(recent[0] - _TICK)
        if previous is None or previous < point:
            break
        recent.appendleft(previous)
    middle = timer.count_between(point - _TICK, recent[0] - _TICK, limit=WALK_LIMIT)
    exact = middle is not None
    if middle is None:  # spacing of the walked points, extrapolated over the gap
        spacing = (point - first) / WALK_LIMIT
        middle = round((recent[0] - point) / spacing)
    return Backlog(
        walked.first or point,
        [*walked.tail, *recent][-keep:],
        walked.count + middle + len(recent),
        timer.next_after(newest),
        exact,
    )


def choose(
    policy: str, times: list[datetime], now: datetime, grace: timedelta, limit: int
) -> list[datetime]:
    """Return the fire times to publish under misfire ``policy`` (``times``: oldest first).

    ``run_all`` sends the last ``limit``; ``run_once`` the newest; ``skip`` the newest
    only if it is less than ``grace`` late.
    """
    if policy == "run_all":
        return times[-limit:]
    latest = times[-1]
    if policy == "skip" and now - latest > grace:
        return []
    return [latest]
