"""Per-task health from the ledger: failures in a row, last success, how late it runs.

The rules every window shows (``cronstore list``/``show``, the dashboard's task list,
``/metrics``) and the "failing" filter accepts, decided here from the facts
:mod:`celery_cronstore.store.outcomes` reads. Pure: no SQL, no Celery, no clock (``now``
is an argument).

* **Consecutive failures**: the fires that ended badly (:data:`~celery_cronstore.states.BAD_ENDS`)
  since the task's newest ``succeeded`` fire. A ``missed`` row standing for N grid points
  counts N. ``skipped`` (held back on purpose) and fires in flight neither count nor
  break the run. Only the newest :data:`WALK` ledger rows of a task are walked, so one
  task with a long history costs as much as any other: a run that reaches the end of
  the walk is reported as "at least" (``12+``).
* **Failing**: at least one failure in a row, which is the same as "the newest finished
  fire ended badly" (every finished fire newer than the newest success is a bad end).
* **Last success**: when the newest ``succeeded`` fire finished (any age: it is one
  index lookup, not part of the walk).
* **Late by**: for an enabled task whose ``next_run`` is more than ``grace`` seconds
  past, how far past it is (no beat claimed it); otherwise how late its newest fire was
  sent: publish (or start, when no publish is recorded) minus fire time. ``None`` when
  neither is known (a fire that did not run has no lateness: its state says why).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from celery_cronstore.records import EPOCH
from celery_cronstore.states import BAD_ENDS, FireState

__all__ = [
    "FAILING_CHOICES",
    "LATE_GRACE",
    "WALK",
    "OutcomeFacts",
    "TaskHealth",
    "consecutive_failures",
    "fold",
    "health",
    "parse_failing",
]

#: Ledger rows walked per task, newest first, to count failures in a row.
WALK = 50
#: Seconds an enabled task's ``next_run`` may be past before it counts as late.
LATE_GRACE = 30.0

_T = TypeVar("_T")


@dataclass(frozen=True)
class OutcomeFacts:
    """What the store read about one task's ledger (one row of ``store.outcomes``)."""

    enabled: bool
    next_run: datetime | None
    #: Fire time of the newest fire, and when it was sent (publish, else start).
    newest_fire: datetime | None = None
    newest_sent: datetime | None = None
    #: The newest ``succeeded`` fire: its fire time and when it finished.
    success_fire: datetime | None = None
    success_at: datetime | None = None
    #: Bad ends (grid points) newer than the newest success, within the walk.
    bad_in_row: int = 0
    #: Fire time of the oldest walked row when older rows lie beyond the walk of
    #: :data:`WALK` rows (``None``: the walk saw the task's whole ledger).
    walk_start: datetime | None = None


@dataclass(frozen=True)
class TaskHealth:
    """One task's health at one instant (what every window shows)."""

    consecutive_failures: int = 0
    #: The count reached the end of the walk: there may be more (shown ``N+``).
    at_least: bool = False
    last_success: datetime | None = None
    late_by: float | None = None
    #: ``late_by`` measures a ``next_run`` no beat claimed (not a sent fire's lateness).
    overdue: bool = False

    @property
    def failing(self) -> bool:
        """Whether the newest finished fire ended badly."""
        return self.consecutive_failures > 0

    @property
    def failures_text(self) -> str:
        """The count as shown: ``3``, or ``50+`` when the walk ended inside the run."""
        return f"{self.consecutive_failures}{'+' if self.at_least else ''}"


def health(facts: OutcomeFacts, now: datetime, *, grace: float = LATE_GRACE) -> TaskHealth:
    """Return the health of the task ``facts`` describe, at ``now``."""
    success_before_walk = facts.success_fire is None or (
        facts.walk_start is not None and facts.success_fire < facts.walk_start
    )
    at_least = facts.bad_in_row > 0 and facts.walk_start is not None and success_before_walk
    late_by: float | None = None
    overdue = False
    planned = facts.next_run is not None and facts.next_run != EPOCH
    if facts.enabled and planned and facts.next_run is not None:
        past = (now - facts.next_run).total_seconds()
        if past > grace:
            late_by, overdue = past, True
    if not overdue and facts.newest_fire is not None and facts.newest_sent is not None:
        late_by = max(0.0, (facts.newest_sent - facts.newest_fire).total_seconds())
    return TaskHealth(
        consecutive_failures=facts.bad_in_row,
        at_least=at_least,
        last_success=facts.success_at,
        late_by=late_by,
        overdue=overdue,
    )


def consecutive_failures(rows: Iterable[tuple[str, int]], walk: int = WALK) -> tuple[int, bool]:
    """Return (bad ends in a row, whether the walk ended inside the run) for ``rows``:
    ``(state, fire_count)`` newest first. The rule the store's query computes in SQL."""
    count = 0
    for walked, (state, fire_count) in enumerate(rows):
        if walked == walk:
            return count, count > 0
        if state == FireState.SUCCEEDED:
            return count, False
        if state in BAD_ENDS:
            count += fire_count
    return count, False


def fold(
    healths: Mapping[_T, TaskHealth], names: Mapping[_T, str], limit: int
) -> tuple[list[_T], list[_T]]:
    """Split tasks into those that get series of their own (at most ``limit``) and the
    rest, summed under one label value.

    Failing tasks come first (most failures in a row first), then the others by name, so
    a failing task never hides in the rest while there is room; names break ties so the
    choice is stable from one scrape to the next.
    """
    order: Sequence[_T] = sorted(
        healths, key=lambda k: (-healths[k].consecutive_failures, names[k])
    )
    return list(order[:limit]), list(order[limit:])


#: The values the "failing" filter takes in every window (empty: any task).
FAILING_CHOICES = {"yes": True, "no": False, "": None}


def parse_failing(text: str | None) -> bool | None:
    """Return the "failing" filter ``text`` means (``yes``, ``no``, empty: any), or raise
    ``ValueError`` naming it."""
    value = (text or "").strip().lower()
    if value not in FAILING_CHOICES:
        shown = value[:40].encode("ascii", "backslashreplace").decode("ascii")
        raise ValueError(f"failing must be yes, no or empty (any task), got {shown!r}")
    return FAILING_CHOICES[value]
