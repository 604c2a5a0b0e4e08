"""What becomes of a claim whose claimer let its lease run out before it was published.

Pure: :func:`decide_take_over` takes a :class:`TakeOverSnapshot` (what a beat read, under
the fire's row lock, about one claim in state ``claimed``) and returns a
:class:`TakeOverDecision`, or ``None``. Beat
(``store.takeover.TakeOver.reclaim_expired``) writes the decision fenced on the attempt
it read, and publishes the claims it took over again under the same task id.

In order, first match wins:

1. the lease has not run out: **not taken over** (``None``) — the claim is still its
   claimer's, which may be publishing it right now;
2. its claimer stopped while handing it to the broker (state ``sending``): it may have
   gone, so it is **not sent again**: recorded ``published`` with that reason (and a
   start lease when the ledger will see it start, so a fire that never went ends
   ``lost``). At most once, whatever stopped beat;
3. beat would now refuse to send the row (it was edited since the claim: another task
   name, unsafe options, a name no longer allowed or registered): **closed** ``dropped``;
4. the task was disabled: **closed** ``dropped``;
5. past the claim's starting deadline (``expires``): **closed** ``expired``;
6. otherwise **taken over**: the beat that asks becomes the claimer, with a fresh lease.

Either way the attempt counts one more and the asking beat is recorded as the claimer, so
a late mark by the first claimer (fenced on its attempt) finds nothing to mark.

Time is passed in (the database's clock); nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery_cronstore.states import FireState

__all__ = [
    "DISABLED",
    "MAYBE_SENT",
    "NEVER_PUBLISHED",
    "TakeOverDecision",
    "TakeOverSnapshot",
    "decide_take_over",
]

#: Why the claim of a task disabled since is closed (after ``not re-published: ``).
DISABLED = "the task was disabled before its fire went out"
#: Why a fire whose beat stopped while sending it is recorded published, not sent again.
MAYBE_SENT = (
    "its beat stopped while handing it to the broker: it may have gone out, so it is not "
    "sent again (a fire is sent at most once)"
)
#: Why a claim past its starting deadline is closed.
NEVER_PUBLISHED = "publish never completed before the starting deadline"


@dataclass(frozen=True)
class TakeOverSnapshot:
    """What a beat knows about one claim (state ``claimed``) it could take over."""

    #: The database's clock.
    now: datetime
    #: The asking beat (the claimer if it takes the claim over) and the lease it holds.
    node: str
    lease: timedelta
    #: When the current claimer's lease runs out.
    lease_until: datetime | None
    #: Publishes tried so far (the claim's attempt).
    attempts: int
    #: Why beat would refuse to send the row as it reads now (``None``: it would send it).
    refused: str | None
    enabled: bool
    #: The claim's starting deadline, if the task has one.
    expires: datetime | None
    #: Whether the claim is ``sending`` (its claimer stopped while sending it).
    sending: bool = False
    #: The start lease of a fire recorded published now (``policy.start_lease``), when the
    #: ledger will see it start.
    start_lease: datetime | None = None


@dataclass(frozen=True)
class TakeOverDecision:
    """The claim's new ledger values: taken over (``state`` ``None``) or closed."""

    attempt: int
    claimed_by: str
    lease_until: datetime | None
    #: ``None``: still ``claimed``, to be published again; else the state it is closed in.
    state: FireState | None = None
    reason: str | None = None
    #: When it counts as published (a fire that may have gone out).
    published_at: datetime | None = None

    @property
    def republish(self) -> bool:
        """Whether the asking beat publishes the claim again."""
        return self.state is None

    def values(self) -> dict[str, Any]:
        """Return the columns to write to the fire's ledger row."""
        values: dict[str, Any] = {
            "attempts": self.attempt,
            "claimed_by": self.claimed_by,
            "lease_until": self.lease_until,
        }
        if self.state is not None:
            values.update(state=self.state, reason=self.reason)
        if self.published_at is not None:
            values["published_at"] = self.published_at
        return values


def decide_take_over(snap: TakeOverSnapshot) -> TakeOverDecision | None:
    """Decide what becomes of the claim in ``snap`` (see the module docstring)."""
    if snap.lease_until is not None and snap.lease_until >= snap.now:
        return None
    attempt = snap.attempts + 1
    if snap.sending:
        return TakeOverDecision(
            attempt, snap.node, snap.start_lease, FireState.PUBLISHED, MAYBE_SENT, snap.now
        )
    refused = snap.refused
    if refused is None and not snap.enabled:
        refused = DISABLED
    if refused is not None:
        return TakeOverDecision(
            attempt, snap.node, None, FireState.DROPPED, f"not re-published: {refused}"
        )
    if snap.expires is not None and snap.now > snap.expires:
        return TakeOverDecision(attempt, snap.node, None, FireState.EXPIRED, NEVER_PUBLISHED)
    return TakeOverDecision(attempt, snap.node, snap.now + snap.lease)
