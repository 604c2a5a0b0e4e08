"""Immutable records shared by the rules, the store and the Celery layer.

The store returns them, :mod:`celery_cronstore.policy` decides with them, beat publishes
them. Nothing here saves itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, NamedTuple

from celery_cronstore import states

__all__ = [
    "ABANDON_POLICIES",
    "EPOCH",
    "FIRE_STATES",
    "MISFIRE_POLICIES",
    "OVERLAP_POLICIES",
    "Beat",
    "Claim",
    "Fire",
    "PeriodicTask",
    "Status",
]

#: ``next_run`` value meaning "plan me": rows inserted or re-timed by raw SQL get it, and
#: beat computes the real next fire time on its next tick (never a fire by itself).
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

MISFIRE_POLICIES = ("run_once", "run_all", "skip")
OVERLAP_POLICIES = ("allow", "skip", "buffer_one", "replace")
#: What becomes of a started fire whose worker went silent: ``leave`` it ``abandoned``, or
#: ``rerun`` it (published again once, under the same task id).
ABANDON_POLICIES = ("leave", "rerun")

#: Every state a fire can be in (kept for callers of this module; see
#: :mod:`celery_cronstore.states`).
FIRE_STATES = states.FIRE_STATES


@dataclass(frozen=True)
class PeriodicTask:
    """One periodic task: its definition and its scheduling state."""

    id: int
    name: str
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    options: dict[str, Any]
    timer_kind: str
    timer: str
    tz: str
    enabled: bool
    owner_type: str | None
    owner_id: str | None
    description: str
    source: str
    next_run: datetime | None
    last_fire: datetime | None
    last_run: datetime | None
    total_run_count: int
    misfire_policy: str
    misfire_limit: int
    start_deadline: float | None
    overlap_policy: str
    tolerance: float | None
    max_retries: int
    resume_state: Any
    error: str | None
    version: int
    created_at: datetime
    updated_at: datetime
    #: What becomes of a fire whose worker went silent (:data:`ABANDON_POLICIES`).
    abandon_policy: str = "leave"
    #: Its dead man's switch (``"3 periods"``, ``"6h"``; ``None``: ``cronstore_alert_after``).
    alert_after: str | None = None
    #: Scheduled fires after which it plans no more (``None``: no limit; migration 0009).
    max_runs: int | None = None
    #: Seconds each fire may be delayed by, the same on every replica (``None``: none;
    #: :mod:`celery_cronstore.policy.jitter`, migration 0010).
    jitter: float | None = None
    #: No fire before / after these instants (``None``: unbounded; migration 0011).
    start_at: datetime | None = None
    end_at: datetime | None = None
    #: Set while it is paused: when, by whom, why, until when (``None``: until resumed)
    #: and what resuming does with the fires held back (``policy.pause``; migration 0012).
    paused_at: datetime | None = None
    paused_by: str | None = None
    paused_note: str | None = None
    paused_until: datetime | None = None
    paused_resume: str = "skip"
    #: The exclusion calendars whose days it skips, comma-separated (``None``: none).
    exclude: str | None = None

    @property
    def owner(self) -> tuple[str, str] | None:
        """Return ``(owner_type, owner_id)`` or ``None``."""
        if self.owner_type is None or self.owner_id is None:
            return None
        return (self.owner_type, self.owner_id)


@dataclass(frozen=True)
class Fire:
    """One row of the fire ledger: what became of one fire time of one periodic task."""

    id: int
    periodic_task_id: int
    name: str
    fire_time: datetime
    fire_until: datetime | None
    fire_count: int
    task_id: str
    state: str
    claimed_by: str | None
    lease_until: datetime | None
    attempts: int
    claimed_at: datetime | None
    published_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    node: str | None
    reason: str | None
    result: str | None
    #: How many times the fire was published again after its worker went silent (0 or 1).
    reruns: int = 0

    @property
    def lateness(self) -> float | None:
        """Return seconds from the fire time to its start (or publish), if it got that far."""
        moment = self.started_at or self.published_at
        return None if moment is None else (moment - self.fire_time).total_seconds()


@dataclass(frozen=True)
class Claim:
    """A fire this beat claimed and must now publish (then mark published)."""

    periodic_task_id: int
    name: str
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    options: dict[str, Any]
    fire_time: datetime
    task_id: str
    attempt: int
    expires: datetime | None = None
    #: Seconds from this fire to the timer's next one (None: no next fire): the CronTask
    #: time box is half of it.
    interval: float | None = None
    #: When it is sent, if later than ``fire_time`` (the task's jitter delays it).
    due: datetime | None = None
    #: Asked for by hand, outside the schedule's own order: ``run-now`` or ``backfill``
    #: (its message says so; the CronTask guard then neither drops it as early or
    #: superseded nor moves the task's ``last_run`` with it).
    requested: str | None = None
    #: Recorded ``sending`` by its claim's own transaction (due when claimed, published
    #: at once, a second publish could run it twice): no separate mark before it goes.
    sending: bool = False

    @property
    def send_at(self) -> datetime:
        """Return when the fire is meant to go out: its fire time, or later by jitter."""
        return self.fire_time if self.due is None else self.due


@dataclass(frozen=True)
class Status:
    """The last known outcome of a periodic task (from its newest ledger row)."""

    name: str
    state: str | None
    fire_time: datetime | None
    at: datetime | None
    node: str | None
    reason: str | None
    result: str | None
    next_run: datetime | None
    last_run: datetime | None
    error: str | None


class Beat(NamedTuple):
    """One beat process as its heartbeats describe it."""

    node: str
    started_at: datetime
    last_tick: datetime
    #: Since when it has had due fires it could neither claim nor publish (``None``: ok).
    stalled_since: datetime | None = None
    #: Its host's clock minus the database's, in seconds, at its last heartbeat.
    clock_offset: float | None = None
    #: ``False``: started with firing off (``CRONSTORE_FIRE=0``); it claims and publishes
    #: nothing. ``True`` or ``None`` (a beat from before schema 0008): it fires.
    firing: bool | None = None
