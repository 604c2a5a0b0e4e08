"""Backfill: claim the grid points of a past range that never ran. Pure: no SQL, no clock.

``cronstore backfill NAME --from WHEN --to WHEN`` (and ``actions.backfill``) asks for the
fire times of a task's timer in ``[start, end]``, both included, and claims each one the
ledger does not hold yet through the claim-once path: its own ledger row (unique on task
and fire time), its deterministic task id (:func:`~celery_cronstore.policy.fire_task_id`)
and the message beat would have sent for it (:func:`~celery_cronstore.policy.make_claim`:
the nominal fire time is the point itself).

What counts as "held":

* a row at the point (claimed, published, run, dropped, expired, skipped, a run-now that
  fell on the grid, ...) holds it: the point is passed over, never claimed twice;
* a point inside a ``missed`` row (one row per run of missed points:
  ``fire_time .. fire_until``, ``fire_count``) is claimed, and that row is **split**: the
  backfilled points leave it, and what stays missed before and after them is recorded
  again as at most two ``missed`` rows (:func:`~celery_cronstore.policy.missed_entry`)
  with the count that is left. So the ledger keeps one row per fire and a true count.
  A missed row whose ends are not on the task's current grid was recorded under another
  timer (an edit re-planned it): it is left as it is, and the current grid's points in
  its span are claimed as points no row holds.

Counts are kept exact where they can be: one side left over gets what remains of the
row's count; two sides (a range inside a missed run) count one side on the timer (exactly
for intervals, up to :data:`COUNT_LIMIT` points otherwise) and the other gets the rest.
Where that is not possible the new row says "about", as beat's own estimates do.

Bounds: a range may hold at most :data:`MAX_POINTS` grid points (found with a walk of at
most that many steps, so a huge range is refused at once), it may not end after now
(fires after now are beat's), and it is claimed in one transaction with leases spread at
the publish ``rate`` (:func:`offset`), so a beat does not take over a claim that is still
waiting its turn.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from celery_cronstore.errors import CronstoreError, TimerSyntaxError
from celery_cronstore.policy.fires import (
    RUN_NOW_REASON,
    Entry,
    fire_task_id,
    make_claim,
    missed_entry,
)
from celery_cronstore.records import Claim, PeriodicTask
from celery_cronstore.states import FireState
from celery_cronstore.timers import Timer
from celery_cronstore.timers.base import fires, resolve_zone
from celery_cronstore.timers.once import format_instant, parse_instant

__all__ = [
    "BACKFILL_REASON",
    "COUNT_LIMIT",
    "DEFAULT_RATE",
    "FROM_MISSED_REASON",
    "MAX_POINTS",
    "Backfill",
    "BackfillError",
    "RangeError",
    "Recorded",
    "check_range",
    "grid",
    "offset",
    "plan_backfill",
    "read_instant",
    "requested_by",
    "within_bounds",
]

#: The most grid points one backfill claims (split a longer range).
MAX_POINTS = 10_000
#: Fires published per second unless told otherwise.
DEFAULT_RATE = 10.0
#: Grid points counted one by one when a missed row is split on both sides.
COUNT_LIMIT = 100_000
#: The reason of a backfilled fire's ledger row (one no row held before).
BACKFILL_REASON = "backfill requested"
#: The reason of a backfilled fire that was recorded missed.
FROM_MISSED_REASON = "backfill requested (it was recorded missed)"


def requested_by(reason: str | None) -> str | None:
    """Return which hand request a claimed ledger row stands for, from its reason
    (``"run-now"``, ``"backfill"``), or ``None`` for a scheduled fire: a beat that takes a
    lapsed claim over sends it with the same ``cronstore_requested`` mark as its claimer."""
    if reason == RUN_NOW_REASON:
        return "run-now"
    if reason in (BACKFILL_REASON, FROM_MISSED_REASON):
        return "backfill"
    return None


_TICK = timedelta(microseconds=1)
_UNPUBLISHED = "not published: "


class BackfillError(CronstoreError, ValueError):
    """A backfill was refused before anything was claimed (the message names the fix)."""


class RangeError(BackfillError):
    """The range itself is wrong: an instant that does not parse, ``--from`` after
    ``--to``, an end after now, or more than :data:`MAX_POINTS` grid points."""


@dataclass(frozen=True)
class Recorded:
    """A ledger row of the task that the range meets (as the store read it)."""

    id: int
    fire_time: datetime
    state: str
    fire_until: datetime | None = None
    fire_count: int = 1
    reason: str | None = None
    claimed_by: str | None = None

    @property
    def last(self) -> datetime:
        """Return the newest fire time the row stands for."""
        return self.fire_until or self.fire_time


@dataclass(frozen=True)
class Backfill:
    """What a backfill of a range comes to: the claims and the ledger writes."""

    #: The claims to publish, oldest first (each has its ledger row in ``entries``).
    claims: list[Claim] = field(default_factory=list)
    #: Ledger rows to insert: each claim's, then the missed rows that replace ``replaced``.
    entries: list[Entry] = field(default_factory=list)
    #: Ids of the ``missed`` rows to delete first (their remainders are in ``entries``).
    replaced: list[int] = field(default_factory=list)
    #: Grid points of the range the ledger holds already (passed over).
    taken: list[datetime] = field(default_factory=list)
    #: Of the claimed fire times, those a ``missed`` row stood for.
    from_missed: list[datetime] = field(default_factory=list)

    @property
    def fire_times(self) -> list[datetime]:
        """Return the fire times claimed (or, in a dry run, that would be), oldest first."""
        return [claim.fire_time for claim in self.claims]


def read_instant(text: str, zone: str, flag: str) -> datetime:
    """Return the instant ``text`` given to option ``flag`` as aware UTC.

    ISO-8601 with ``Z`` or an offset is that instant; without one it is read in ``zone``
    (the task's: a wall time that does not exist there is refused, a repeated one is its
    first occurrence); a bare date is midnight there.
    """
    try:
        return parse_instant(text.strip(), resolve_zone(zone), date_only=True)
    except TimerSyntaxError as exc:
        raise RangeError(
            f"{flag} {text!r} is not an instant ({exc.reason}): give ISO-8601 such as "
            f"2026-03-01T09:00:00Z or 2026-03-01T10:00:00+01:00 (without an offset it is "
            f"read in the task's zone, {zone})"
        ) from None


def check_range(start: datetime, end: datetime, now: datetime) -> None:
    """Refuse a range that is empty by its ends or reaches past ``now`` (the database's)."""
    if start > end:
        raise RangeError(
            f"--from {format_instant(start)} is after --to {format_instant(end)}: give "
            "--from at or before --to"
        )
    if end > now:
        raise RangeError(
            f"--to {format_instant(end)} is after now ({format_instant(now)}, the "
            "database's clock): fires after now cannot be backfilled, beat sends them when "
            "they fall due; give a --to at or before now (or `now`)"
        )


def within_bounds(
    task: PeriodicTask, start: datetime, end: datetime
) -> tuple[datetime, datetime] | None:
    """Return ``[start, end]`` cut to the task's own bounds (``start_at``, ``end_at``): its
    schedule has no fire outside them, so a backfill claims none; ``None``: nothing left."""
    if task.start_at is not None and task.start_at > start:
        start = task.start_at
    if task.end_at is not None and task.end_at < end:
        end = task.end_at
    return (start, end) if start <= end else None


def grid(
    timer: Timer, start: datetime, end: datetime, *, limit: int = MAX_POINTS
) -> list[datetime]:
    """Return the timer's fire times in ``[start, end]``, oldest first.

    At most ``limit + 1`` steps are walked: a range with more points is refused
    (:class:`RangeError`) without walking it to its end.
    """
    points = list(fires(timer, start - _TICK, until=end, limit=limit + 1))
    if len(points) > limit:
        raise RangeError(
            f"--from {format_instant(start)} --to {format_instant(end)} holds more than "
            f"{limit} fire times of the timer {str(timer)!r}: backfill at most {limit} at "
            f"once (split the range; the {limit}th is {format_instant(points[limit - 1])})"
        )
    return points


def offset(index: int, rate: float | None) -> float:
    """Return the seconds after the first publish at which claim ``index`` is published
    (``rate``: fires per second; ``None``: all at once)."""
    return index / rate if rate else 0.0


def plan_backfill(
    task: PeriodicTask,
    timer: Timer,
    points: list[datetime],
    recorded: list[Recorded],
    now: datetime,
    *,
    node: str,
    lease: timedelta,
    rate: float | None = DEFAULT_RATE,
) -> Backfill:
    """Decide what backfilling ``points`` (from :func:`grid`) of ``task`` does at ``now``.

    ``recorded``: the task's ledger rows the range meets, and every row inside a missed
    row it meets (the store reads them). Each point no row holds, or a missed row holds,
    is claimed under ``node``; its lease runs ``lease`` past its turn to be published at
    ``rate``. Missed rows are split as the module docstring says. A task with a starting
    deadline is refused (:class:`BackfillError`) if a fire would be past it when sent: its
    message would expire unrun.
    """
    usable = {r.id: r for r in recorded if _usable(timer, r)}
    by_time = {r.fire_time: r for r in recorded}
    spans = sorted((r for r in recorded if r.fire_until is not None), key=lambda r: r.fire_time)
    starts = [r.fire_time for r in spans]
    claims: list[Claim] = []
    entries: list[Entry] = []
    taken: list[datetime] = []
    from_missed: list[datetime] = []
    held: dict[int, list[datetime]] = {}
    late: list[datetime] = []
    for point in points:
        holder = _holder(by_time.get(point), _covering(spans, starts, point), usable)
        if holder is False:
            taken.append(point)
            continue
        turn = offset(len(claims), rate)
        entry = Entry(
            periodic_task_id=task.id,
            fire_time=point,
            task_id=fire_task_id(task.id, task.name, point),
            state=FireState.CLAIMED,
            reason=FROM_MISSED_REASON if isinstance(holder, Recorded) else BACKFILL_REASON,
            claimed_by=node,
            lease_until=now + lease + timedelta(seconds=turn),
            claimed_at=now,
        )
        claim = replace(
            make_claim(task, point, entry.task_id, entry.attempts, timer), requested="backfill"
        )
        if claim.expires is not None and claim.expires <= now + timedelta(seconds=turn):
            late.append(point)
        entries.append(entry)
        claims.append(claim)
        if isinstance(holder, Recorded):
            held.setdefault(holder.id, []).append(point)
            from_missed.append(point)
    if late:
        raise BackfillError(
            f"periodic task {task.name!r} has a starting deadline of {task.start_deadline:g}s: "
            f"{len(late)} of the fires to backfill (the first {format_instant(late[0])}) would "
            "be past it when sent and expire unrun; clear the deadline first (`cronstore "
            f"edit {task.name} --start-deadline ''`), or backfill a range closer to now"
        )
    others = {t: r for t, r in by_time.items() if r.id not in held}
    for row_id, claimed in held.items():
        entries.extend(_split(task, timer, usable[row_id], claimed, others))
    return Backfill(claims, entries, list(held), taken, from_missed)


def _holder(
    row: Recorded | None, span: Recorded | None, usable: dict[int, Recorded]
) -> Recorded | bool | None:
    """Return what holds a point: ``False`` if a row does (pass it over), the missed row
    to take it from, or ``None`` if nothing does (claim it fresh).

    ``row``: the row at the point; ``span``: a ranged row whose span holds it. A missed
    row off the current grid holds only its own instant (its key), not its span.
    """
    if row is not None:
        return row if row.id in usable else False
    if span is None:
        return None
    if span.id in usable:
        return span
    return None if span.state == FireState.MISSED else False


def _usable(timer: Timer, row: Recorded) -> bool:
    """Whether ``row`` is a missed row recorded on the timer's current grid."""
    return (
        row.state == FireState.MISSED
        and _on_grid(timer, row.fire_time)
        and _on_grid(timer, row.last)
    )


def _on_grid(timer: Timer, instant: datetime) -> bool:
    return timer.next_after(instant - _TICK) == instant


def _covering(spans: list[Recorded], starts: list[datetime], point: datetime) -> Recorded | None:
    """Return the ranged row whose span holds ``point`` (spans do not overlap), if any."""
    index = bisect.bisect_right(starts, point) - 1
    if index >= 0 and spans[index].last >= point:
        return spans[index]
    return None


def _split(
    task: PeriodicTask,
    timer: Timer,
    row: Recorded,
    claimed: list[datetime],
    others: dict[datetime, Recorded],
) -> list[Entry]:
    """Return the missed rows that replace ``row`` once ``claimed`` (its points in the
    range, oldest first) leave it: what stays before them, and what stays after."""
    before = _beside(timer, claimed[0], row, others, back=True)
    after = _beside(timer, claimed[-1], row, others, back=False)
    sides = [side for side in (before, after) if side is not None]
    exact = not (row.reason or "").startswith("about ")
    counts = _counts(timer, sides, row.fire_count - len(claimed), others)
    why = _why(row.reason)
    return [
        missed_entry(task, first, last, count, why, node=row.claimed_by, exact=exact and known)
        for (first, last), (count, known) in zip(sides, counts, strict=True)
    ]


def _beside(
    timer: Timer,
    point: datetime,
    row: Recorded,
    others: dict[datetime, Recorded],
    *,
    back: bool,
) -> tuple[datetime, datetime] | None:
    """Return the span of ``row`` left before (``back``) or after ``point``, if any: from
    the row's end to the nearest grid point no other row holds."""
    end = row.fire_time if back else row.last
    step = point
    for _ in range(len(others) + 1):  # each step passes one other row, at most
        found = timer.last_at_or_before(step - _TICK) if back else timer.next_after(step)
        if found is None or (found < end if back else found > end):
            return None
        if found not in others:
            return (end, found) if back else (found, end)
        step = found
    return None


def _counts(
    timer: Timer,
    sides: list[tuple[datetime, datetime]],
    left: int,
    others: dict[datetime, Recorded],
) -> list[tuple[int, bool]]:
    """Return (fire count, whether counted exactly) of each side left of a missed row
    whose count, less the points claimed from it, is ``left``."""
    if len(sides) == 1:
        if left >= 1:
            return [(left, True)]
        counted = _count(timer, *sides[0], others)
        return [(max(counted or 1, 1), False)]
    if len(sides) != 2:
        return []
    (a1, b1), (a2, b2) = sides
    counted = _count(timer, a1, b1, others)
    known = counted is not None
    if counted is None:  # share what is left by the length of each side
        share = (b1 - a1 + _TICK) / ((b1 - a1) + (b2 - a2) + 2 * _TICK)
        counted = round(left * share)
    first = min(max(counted, 1), max(left - 1, 1))
    known = known and first == counted
    rest = left - first
    if rest >= 1:
        return [(first, known), (rest, known)]
    return [(first, False), (max(_count(timer, a2, b2, others) or 1, 1), False)]


def _count(
    timer: Timer, first: datetime, last: datetime, others: dict[datetime, Recorded]
) -> int | None:
    """Return the grid points in ``[first, last]`` no other row holds (``None``: more
    than :data:`COUNT_LIMIT`)."""
    total = timer.count_between(first - _TICK, last, limit=COUNT_LIMIT)
    if total is None:
        return None
    inside = sum(1 for t in others if first <= t <= last and _on_grid(timer, t))
    return total - inside


def _why(reason: str | None) -> str:
    """Return why a missed row's fires were missed, as its reason says it."""
    if not reason:
        return "recorded missed"
    _head, sep, why = reason.partition(_UNPUBLISHED)
    return why if sep and why else reason
