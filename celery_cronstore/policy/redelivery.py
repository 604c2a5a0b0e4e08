"""What becomes of a published fire that never started: published again, or ``lost``.

A fire whose start the ledger will record (a CronTask's guard records it; a plain task's
worker does too when its app reaches the store) is published with a *start lease*
(:func:`start_lease`). A message can be lost after the broker took it (Redis: popped by a
worker whose connection dropped; a broker restart), so a fire still ``published`` when
that lease runs out is decided here.

Pure: :func:`decide_redelivery` takes a :class:`RedeliverySnapshot` (what beat read about
one such fire) and returns a :class:`RedeliveryDecision`. Beat
(``store.inflight.InFlight.redeliver_unstarted``) writes it fenced on the fire still
being unstarted: a fire handed back is put in state ``claimed`` with its lease run out,
and the path that re-publishes lapsed claims sends it again under the same task id.

In order, first match wins:

1. a second publish could run the task twice (it is neither a CronTask, whose guard
   starts one copy, nor acknowledged late): **lost**;
2. it was already published more than ``max_redeliveries`` times after the first:
   **lost**;
3. otherwise **handed back** for another publish.

Time is passed in (the database's clock); nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from celery_cronstore.policy.start import lost_reason
from celery_cronstore.states import FireState

__all__ = [
    "HANDED_BACK",
    "RedeliveryDecision",
    "RedeliverySnapshot",
    "decide_redelivery",
    "handed_back_lease",
    "start_lease",
]

#: How far in the past the lease of a fire handed back for another publish is set: run
#: out at once, so the next look for lapsed claims takes it over.
HANDED_BACK = timedelta(microseconds=1)


def handed_back_lease(now: datetime) -> datetime:
    """Return the lease of a fire handed back at ``now`` (already run out)."""
    return now - HANDED_BACK


def start_lease(published: datetime, start_timeout: float | None, watched: bool) -> datetime | None:
    """Return the start lease of a fire published at ``published``: when it counts as
    never started (``None``: not watched, or no ``start_timeout``: never)."""
    if not watched or start_timeout is None:
        return None
    return published + timedelta(seconds=start_timeout)


@dataclass(frozen=True)
class RedeliverySnapshot:
    """What beat knows about one published fire whose start lease ran out unstarted."""

    #: The database's clock.
    now: datetime
    #: How many times it was published (its attempt).
    attempts: int
    #: Whether a second publish of its task starts at most once (guard, or acks late).
    redeliverable: bool
    max_redeliveries: int
    #: Seconds each publish waited for a start.
    start_timeout: float


@dataclass(frozen=True)
class RedeliveryDecision:
    """``claimed`` (handed back, lease run out) or ``lost`` (with the reason)."""

    state: FireState
    lease_until: datetime | None
    reason: str | None = None

    @property
    def again(self) -> bool:
        """Whether the fire is handed back for another publish."""
        return self.state == FireState.CLAIMED


def decide_redelivery(snap: RedeliverySnapshot) -> RedeliveryDecision:
    """Decide what becomes of the unstarted fire in ``snap`` (see the module docstring)."""
    if snap.redeliverable and snap.attempts <= snap.max_redeliveries:
        return RedeliveryDecision(FireState.CLAIMED, handed_back_lease(snap.now))
    return RedeliveryDecision(FireState.LOST, None, lost_reason(snap.attempts, snap.start_timeout))
