"""Whether one delivery of a fire may start on a worker: the CronTask guard's rules.

Pure: :func:`decide_start` takes a :class:`StartSnapshot` (what the store read while it
held the task's row lock) and returns a :class:`StartDecision`. The reads that only some
decisions need (a running predecessor, a later fire that started, the previous fire) are
callables, asked only when the table below gets to them.

In order, first match wins:

1. a retry (``retries > 0``) of a fire in state ``retrying``: **retry** (no early check);
2. a fire that already started or ended: **duplicate** (nothing is written);
3. the task is disabled: **dropped**;
4. later than the task's ``start_deadline`` after its fire time: **expired**;
5. overlap policy ``skip`` and a predecessor still running: **skipped**;
6. a later fire of the task already started: **dropped** (superseded), unless the fire
   was asked for by hand (``requested``: run-now, backfill);
7. ``now < last_run + gap - tolerance - jitter`` (``gap``: from the previous fire to this
   one, at most the interval to the next; ``jitter``: the task's, as two delayed fires
   may start that much closer): **dropped** (early) — except under misfire policy
   ``run_all``, whose user asked for every fire, backfilled ones back to back included
   (the early rule is for accidental bunching; the time box still applies to each run),
   and except for a re-run of a fire whose worker went silent (``reruns > 0``: the
   ``last_run`` it would be judged against is its own first start; see
   :mod:`~celery_cronstore.policy.abandon`), and except for a fire asked for by hand;
8. otherwise **started**.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery_cronstore.states import (
    FINISH_STATES,
    REFUSALS,
    STARTABLE,
    WORKER_RUNNING,
    FireState,
)

__all__ = [
    "FINISH_STATES",
    "STARTABLE",
    "WORKER_RUNNING",
    "StartDecision",
    "StartSnapshot",
    "deadline",
    "decide_start",
    "lost_reason",
]


@dataclass(frozen=True)
class StartSnapshot:
    """What the guard knows about one delivery when it decides."""

    task_id: str
    #: The store's clock, read after the task's row lock was taken.
    now: datetime
    #: Celery's ``request.retries``.
    retries: int
    #: The fire's ledger state and time.
    state: str
    fire_time: datetime
    enabled: bool
    start_deadline: float | None
    overlap_policy: str
    misfire_policy: str
    last_run: datetime | None
    #: Seconds from this fire to the timer's next one (``None``: no next fire).
    interval: float | None
    tolerance: float
    #: (fire time, state) of another fire of the task still running, if any.
    running: Callable[[], tuple[datetime, str] | None]
    #: Fire time of a later fire of the task that already started, if any.
    later_started: Callable[[], datetime | None]
    #: Fire time of the task's previous fire in the ledger, if any.
    previous_fire: Callable[[], datetime | None]
    #: How many times the fire was published again after its worker went silent.
    reruns: int = 0
    #: The task's jitter bound and this fire's delay, in seconds (``policy.jitter``).
    jitter: float = 0.0
    delay: float = 0.0
    #: Asked for by hand (``run-now``, ``backfill``): neither early nor superseded.
    requested: bool = False


@dataclass(frozen=True)
class StartDecision:
    """The guard's verdict: ``started``, ``retry``, ``duplicate``, ``dropped``,
    ``skipped`` or ``expired``, with the reason of a refusal."""

    outcome: str
    reason: str | None = None

    @property
    def started(self) -> bool:
        """Whether the body may run."""
        return self.outcome in (FireState.STARTED, "retry")

    @property
    def recorded(self) -> bool:
        """Whether the refusal belongs in the fire's ledger row."""
        return self.outcome in REFUSALS


def lost_reason(publishes: int, start_timeout: float) -> str:
    """Why a published fire that never started is recorded ``lost``."""
    return (
        f"never started {start_timeout:g}s after its publish (published {publishes} time(s)): "
        "its message was lost (a broker restart, a dropped connection), and sending it "
        "again could run it twice (the task is not a CronTask and does not acknowledge late)"
        if publishes <= 1
        else f"never started {start_timeout:g}s after each of {publishes} publishes: its "
        "messages were lost"
    )


def deadline(start: datetime, interval: float | None) -> datetime | None:
    """Return the cooperative deadline of a run started at ``start``: half the interval."""
    return None if interval is None else start + timedelta(seconds=interval / 2)


def decide_start(snap: StartSnapshot) -> StartDecision:
    """Decide whether the delivery in ``snap`` starts (see the module docstring)."""
    if snap.retries > 0 and snap.state == FireState.RETRYING:
        return StartDecision("retry")
    if snap.state not in STARTABLE:
        return StartDecision(
            "duplicate", f"duplicate delivery: fire {snap.task_id} is already {snap.state}"
        )
    if not snap.enabled:
        return StartDecision(FireState.DROPPED, "periodic task is disabled")
    if snap.start_deadline is not None:
        late = (snap.now - snap.fire_time).total_seconds() - snap.delay
        if late > float(snap.start_deadline):
            return StartDecision(
                FireState.EXPIRED,
                f"not started: {late:.1f}s late, past the starting deadline of "
                f"{float(snap.start_deadline):g}s",
            )
    if snap.overlap_policy == "skip":
        running = snap.running()
        if running is not None:
            return StartDecision(
                FireState.SKIPPED,
                f"not started: fire {running[0].isoformat()} is still {running[1]} "
                "(overlap policy skip)",
            )
    later = None if snap.requested else snap.later_started()
    if later is not None:
        # A re-published fire (its beat died before marking it) that arrives after a
        # later fire already ran: running it now would also push the next on-time fire
        # out as "early".
        return StartDecision(
            FireState.DROPPED, f"superseded: the later fire {later.isoformat()} already started"
        )
    early = _early(snap)
    if early is not None:
        return StartDecision(FireState.DROPPED, early)
    return StartDecision(FireState.STARTED)


def _early(snap: StartSnapshot) -> str | None:
    if (
        snap.interval is None
        or snap.last_run is None
        or snap.misfire_policy == "run_all"
        or snap.reruns > 0
        or snap.requested
    ):
        return None
    # The gap that led up to THIS fire, not the one after it: they differ for irregular
    # timers (seconds 19, 20, 41: the on-time :20 run is not early).
    previous = snap.previous_fire()
    since = None if previous is None else (snap.fire_time - previous).total_seconds()
    gap = min(snap.interval, since or snap.interval)
    earliest = snap.last_run + timedelta(seconds=gap - snap.tolerance - snap.jitter)
    if snap.now >= earliest:
        return None
    spread = f" - jitter {snap.jitter:g}s" if snap.jitter else ""
    return (
        f"early: started at {snap.now.isoformat()}, before last run "
        f"{snap.last_run.isoformat()} + interval {gap:g}s - tolerance "
        f"{snap.tolerance:g}s{spread} = {earliest.isoformat()}"
    )
