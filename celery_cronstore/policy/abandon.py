"""What becomes of a started fire whose worker went silent: left ``abandoned``, or re-run.

Pure: :func:`decide_abandoned` takes an :class:`AbandonSnapshot` (what beat read about
one fire whose liveness lease ran out) and returns an :class:`AbandonDecision`. Beat
(``store.inflight.InFlight.abandon_silent``) writes it in the same transaction: a fire
left is recorded ``abandoned`` with the reason; a fire re-run is handed back (state
``claimed``, lease run out, ``reruns`` + 1) and published again under the same task id
by the path that re-publishes lapsed claims.

In order, first match wins:

1. the task's abandon policy is ``leave`` (the default): **left**;
2. the fire was already re-run once (``reruns >= 1``): **left** — a re-run that is
   abandoned in turn is not sent a third time;
3. the task is disabled (or being removed): **left**;
4. later than the task's ``start_deadline`` after its fire time: **left** (the guard
   would refuse it as expired anyway);
5. a later fire of the task has started, or is claimed or published and will start:
   **left** (superseded — the task has moved on, and re-running the old fire would also
   push the next on-time fire out as "early");
6. beat cannot tell that a second publish starts at most once (the task is neither a
   :class:`~celery_cronstore.CronTask`, whose guard starts one copy, nor acknowledges
   late): **left** — as for a published fire that never started;
7. otherwise **re-run**.

Time is passed in (the database's clock); nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = [
    "ABANDONED",
    "KILL_SLACK",
    "MAX_RERUNS",
    "AbandonDecision",
    "AbandonSnapshot",
    "abandoned_reason",
    "decide_abandoned",
    "killed_run_age",
]

#: The reason of every fire whose worker went silent, after the worker's node name.
ABANDONED = " stopped reporting on the run (killed, or cut off from the database)"
#: How many times one fire may be re-run after its worker went silent.
MAX_RERUNS = 1


#: Seconds a run's recorded start may follow the moment its hard time limit began counting
#: (the pool starts the clock; the run records its start one transaction later).
KILL_SLACK = 5.0


def killed_run_age(time_limit: float) -> timedelta:
    """How long, at least, before a hard-time-limit kill the killed run started.

    The worker's main process records the kill without knowing which run of the fire its
    child was on. A re-run of the fire started later, since a re-run waits for the first
    run's liveness lease to lapse: so the record is fenced on the run having started at
    least this long ago (``time_limit`` less :data:`KILL_SLACK`, or less half of it for
    a limit under twice the slack), and on the worker's node.
    """
    limit = max(0.0, float(time_limit))
    return timedelta(seconds=limit - min(KILL_SLACK, limit / 2))


def abandoned_reason(node: str | None) -> str:
    """Why a started fire of a worker on ``node`` is recorded abandoned (rule 1's text)."""
    return f"its worker {node or '?'}{ABANDONED}"


@dataclass(frozen=True)
class AbandonSnapshot:
    """What beat knows about one started fire whose liveness lease ran out."""

    #: The database's clock.
    now: datetime
    fire_time: datetime
    #: The node that ran it (the worker's hostname), if known.
    node: str | None
    #: The task's ``abandon_policy``: ``leave`` or ``rerun``.
    policy: str
    #: How many times the fire was already re-run after its worker went silent.
    reruns: int
    enabled: bool
    start_deadline: float | None
    #: Fire time of a later fire of the task that started or is claimed / published.
    later: datetime | None
    #: Whether a second publish of the task starts at most once (guard, or acks late).
    redeliverable: bool


@dataclass(frozen=True)
class AbandonDecision:
    """``rerun`` or not, and the reason written to the fire's ledger row."""

    rerun: bool
    reason: str


def decide_abandoned(snap: AbandonSnapshot) -> AbandonDecision:
    """Decide what becomes of the silent fire in ``snap`` (see the module docstring)."""
    silent = abandoned_reason(snap.node)
    if snap.policy != "rerun":
        return AbandonDecision(False, silent)
    why = _not_rerun(snap)
    if why is not None:
        return AbandonDecision(False, f"{silent}; not re-run: {why}")
    return AbandonDecision(
        True, f"{silent}; published again under the same task id (abandon policy rerun)"
    )


def _not_rerun(snap: AbandonSnapshot) -> str | None:
    if snap.reruns >= MAX_RERUNS:
        return f"it was already re-run {snap.reruns} time(s) (at most {MAX_RERUNS})"
    if not snap.enabled:
        return "the task is disabled"
    if snap.start_deadline is not None:
        late = (snap.now - snap.fire_time).total_seconds()
        if late > float(snap.start_deadline):
            return (
                f"{late:.1f}s after its fire time, past the starting deadline of "
                f"{float(snap.start_deadline):g}s"
            )
    if snap.later is not None:
        return f"superseded by the later fire {snap.later.isoformat()}"
    if not snap.redeliverable:
        return (
            "the task is not a CronTask and does not acknowledge late: publishing it again "
            "could run it twice"
        )
    return None
