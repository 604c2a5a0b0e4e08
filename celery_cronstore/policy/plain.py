"""Whether a worker starts a delivery of a plain task's fire (a task that is not a CronTask).

A plain task has no guard of its own: its worker asks the ledger, when its app reaches
the store, just before the body runs (``worker.plain``). Pure: :func:`decide_plain_start`
takes a :class:`PlainSnapshot` (the fire's ledger row and its task, read in the start's
transaction) and returns a :class:`PlainDecision`.

In order, first match wins:

1. no ledger row: its periodic task was removed (or the fire pruned): **refused**;
2. waiting for its Celery retry (``retrying``) and this is the retry: **started**;
3. not started yet (``claimed``, ``sending``, ``published``, or ``lost``: a late start
   turns a fire recorded lost into a started one):
   its task disabled or gone: **refused**, recorded ``dropped``; else **started**;
4. already started or ended, and the task acknowledges late (``acks_late``: the broker
   hands a message whose worker died to another, which the user asked for): **started**;
5. otherwise (already started, ended, or closed without a run): **refused** as a
   duplicate, nothing recorded (the ledger already says what became of the fire).

So a disable or a removal that committed before the start stops the fire, and a second
delivery of a fire (a message re-sent, or re-delivered by the broker) does not run it
twice. Time is not needed: the store writes its own clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from celery_cronstore.states import STARTABLE, FireState

__all__ = [
    "DISABLED",
    "GONE",
    "NOT_STARTED",
    "PlainDecision",
    "PlainSnapshot",
    "decide_plain_start",
]

#: Why a fire of a task disabled (or removed) before it started is not started.
DISABLED = "not started: its periodic task was disabled (or removed) before the fire started"
#: Why a delivery whose fire has no ledger row is not started.
GONE = (
    "not started: the fire is not in the store (its periodic task was removed, or this "
    "worker's cronstore_url is not beat's)"
)

#: A fire that did not start yet (a late start turns ``lost`` into a start).
NOT_STARTED = (*STARTABLE, FireState.LOST)
_REDELIVERED = (FireState.STARTED, FireState.ABANDONED)


@dataclass(frozen=True)
class PlainSnapshot:
    """What a worker read about one delivery of a plain task's fire."""

    #: The fire's ledger state (``None``: no ledger row).
    state: FireState | None
    #: Whether its periodic task exists and is enabled.
    enabled: bool
    #: Celery's ``request.retries``.
    retries: int = 0
    #: Whether the task acknowledges late (``acks_late``).
    acks_late: bool = False


@dataclass(frozen=True)
class PlainDecision:
    """Start the delivery, or refuse it (and what to record on the fire's row, if any)."""

    start: bool
    #: The state written to the fire's row when refused (``None``: nothing written).
    record: FireState | None = None
    reason: str | None = None


def decide_plain_start(snap: PlainSnapshot) -> PlainDecision:
    """Decide whether the delivery in ``snap`` starts (see the module docstring)."""
    state = snap.state
    if state is None:
        return PlainDecision(False, None, GONE)
    if state == FireState.RETRYING and snap.retries > 0:
        return PlainDecision(True)
    if state in NOT_STARTED:
        if not snap.enabled:
            return PlainDecision(False, FireState.DROPPED, DISABLED)
        return PlainDecision(True)
    if snap.acks_late and state in _REDELIVERED:
        return PlainDecision(True)
    return PlainDecision(False, None, f"duplicate delivery: the fire is already {state}")
