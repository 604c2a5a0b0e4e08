"""Which ledger rows may be pruned: the retention rule, without SQL or a clock.

A row of the fire ledger is *prunable* when every reader that could still need it is
done with it. In order, the first that applies keeps the row:

1. its fire is **not older than the cutoff** (``now - cronstore_history_days``);
2. its fire is **in flight**: ``claimed``, ``started`` or ``retrying``, or ``published``
   with a start lease (a CronTask fire beat may still publish again);
3. it is its task's **newest fire** (beat plans after it; ``status`` shows it);
4. it is at or after the task's **oldest fire in flight** (the guard asks whether a later
   fire already started), or the fire **right before** it (the guard's previous fire).

Everything else older than the cutoff goes: ended fires (``succeeded``, ``failed``,
``timed_out``, ``dropped``, ``skipped``, ``missed``, ``expired``) and ``published`` fires
without a start lease (plain tasks: the ledger never hears of their outcome, and nobody
re-publishes them). The guard answers ``unknown`` for a delivery whose row is gone and
does not run it.

The store reads candidate rows oldest first (:class:`Candidate`) and, for their tasks,
the newest fire, the oldest fire in flight and the one before it (:class:`TaskLedger`);
:func:`keep_reason` decides each row.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery_cronstore.states import IN_FLIGHT, FireState

__all__ = [
    "IN_FLIGHT",
    "Candidate",
    "TaskLedger",
    "cutoff",
    "keep_reason",
    "parse_age",
    "prunable",
    "retention",
    "worth_a_pass",
]


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
#: The longest age (1000 years): ``now - age`` must stay a date.
_MAX_AGE_DAYS = 365_000
_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Candidate:
    """One ledger row as the pruner sees it."""

    id: int
    periodic_task_id: int
    fire_time: datetime
    state: str
    #: Whether the row holds a lease (``lease_until`` is set).
    leased: bool


@dataclass(frozen=True)
class TaskLedger:
    """What the rule needs to know about the rest of one task's ledger."""

    #: Fire time of the task's newest row.
    newest: datetime
    #: Fire time of its oldest fire in flight, and of the row right before that one.
    in_flight: datetime | None = None
    before_in_flight: datetime | None = None


def retention(days: float | None) -> timedelta | None:
    """Return how long history is kept for ``cronstore_history_days`` (``None``: forever).

    ``0`` and ``None`` keep every row forever.
    """
    if days is None or days == 0:
        return None
    if days < 0:
        raise ValueError(f"history days must be zero or more, got {days!r}")
    return timedelta(days=days)


def cutoff(now: datetime, keep: timedelta | None) -> datetime | None:
    """Return the fire time before which ended rows may go (``None``: keep everything)."""
    return None if keep is None else now - keep


def worth_a_pass(oldest: datetime | None, cutoff: datetime | None) -> bool:
    """Whether a prune pass may find anything, given the fire time of the ledger's oldest
    row in write order (``None``: the ledger is empty).

    A pass walks rows in write order and ends at a batch with nothing older than the
    cutoff; while the first row is within the window there is nothing to start it for.
    """
    return cutoff is not None and oldest is not None and oldest < cutoff


def parse_age(text: str) -> timedelta:
    """Parse an age such as ``30d``, ``12h``, ``90m``, ``3600s`` or ``2w`` (bare: days).

    Raise ``ValueError`` naming the text when it is not one, or is zero.
    """
    match = _AGE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"age {text!r} is not a number with a unit s, m, h, d or w (e.g. 30d, 12h)"
        )
    seconds = float(match.group(1)) * _UNITS[(match.group(2) or "d").lower()]
    if seconds <= 0:
        raise ValueError(f"age {text!r} must be more than zero")
    if seconds > _MAX_AGE_DAYS * 86_400:  # a cutoff before year 1 would overflow datetime
        raise ValueError(f"age {text!r} is too long: at most {_MAX_AGE_DAYS}d")
    return timedelta(seconds=seconds)


def keep_reason(row: Candidate, cutoff: datetime | None, task: TaskLedger | None) -> str | None:
    """Return why ``row`` is kept (see the module docstring), or ``None`` if it may go.

    ``task`` describes the rest of the row's task's ledger (``None``: unknown, kept).
    """
    if cutoff is None or row.fire_time >= cutoff:
        return "recent"
    if row.state in IN_FLIGHT or (row.state == FireState.PUBLISHED and row.leased):
        return "in flight"
    if task is None or row.fire_time >= task.newest:
        return "newest"
    if task.in_flight is not None:
        guarded = task.in_flight if task.before_in_flight is None else task.before_in_flight
        if row.fire_time >= guarded:
            return "read by the guard"
    return None


def prunable(
    rows: Iterable[Candidate], cutoff: datetime | None, tasks: Mapping[int, TaskLedger]
) -> list[Candidate]:
    """Return the rows of ``rows`` that may be deleted (``tasks``: by periodic task id)."""
    return [
        row for row in rows if keep_reason(row, cutoff, tasks.get(row.periodic_task_id)) is None
    ]
