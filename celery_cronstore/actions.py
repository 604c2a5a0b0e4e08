"""What an operator does to a periodic task from any window: the CLI, the dashboard and
the Django admin call these, so each action has one path."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from celery_cronstore.catalog import TaskCatalog
from celery_cronstore.config import FIRE_VARIABLE, Config
from celery_cronstore.errors import CronstoreError
from celery_cronstore.policy.backfill import DEFAULT_RATE, RangeError, offset
from celery_cronstore.policy.health import OFF_SWITCH
from celery_cronstore.records import Claim
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.backfill import claim_range

__all__ = [
    "BackfillReport",
    "DisabledTaskError",
    "FiringOffError",
    "backfill",
    "disabled_refusal",
    "run_now",
]


class DisabledTaskError(CronstoreError, ValueError):
    """ "Run now" was asked of a disabled task: refused before anything is claimed."""


class FiringOffError(CronstoreError, ValueError):
    """ "Run now" was asked where firing is off (``CRONSTORE_FIRE=0``): refused."""


def disabled_refusal(name: str) -> str:
    """Return why ``name``, disabled, is not run now, and what to do instead."""
    return (
        f"periodic task {name!r} is disabled: enable it first (its fires are dropped while "
        "it is disabled), then run it now; or call its Celery task directly, outside the "
        "schedule and its ledger"
    )


def run_now(app: Any, store: Store, name: str, *, node: str) -> Claim:
    """Claim and publish one extra fire of periodic task ``name`` now; return its claim.

    A disabled task is refused (:class:`DisabledTaskError`) before anything is claimed:
    the worker's guard drops every fire of a disabled task, a CronTask's and a watched
    plain task's alike, so claiming one would say "sent" for a fire that never runs.
    Letting run-now pass the guard instead would make "disabled" mean "unless someone
    clicks": the flag an operator sets during an incident must hold from every window.

    The claim writes the ledger row (its own task id; the database refuses a second claim
    of the same fire), then the message is published and the row marked published. A
    publish failure leaves the claim for a running beat to re-publish once its lease runs
    out, and raises :class:`CronstoreError` saying so. Beat's refusals apply (the
    allowlist, and what the app's :class:`~celery_cronstore.catalog.TaskCatalog` says:
    a task it must register, args that do not fit).
    """
    from celery_cronstore.beat.publish import publish

    config = Config.from_app(app)
    if not config.fire:  # a staging copy of production's store fires nothing, run-now neither
        raise FiringOffError(
            f"firing is off here ({OFF_SWITCH}): {name!r} is "
            f"not run; unset it (or {FIRE_VARIABLE}=1) where this runs to send fires"
        )
    if not store.get(name).enabled:
        # Read first, claimed after: a disable landing in between still gets the fire
        # dropped by the worker's guard (and recorded so), never run.
        raise DisabledTaskError(disabled_refusal(name))
    claimer = _claimer(app, store, node, config)
    claim = claimer.claim_now(name)
    try:
        publish(app, claim)
    except Exception as exc:
        raise CronstoreError(
            f"claimed a fire of {name} (task id {claim.task_id}) but could not publish it "
            f"({type(exc).__name__}: {exc}); a running beat re-publishes it once its lease of "
            f"{config.lease:g}s runs out"
        ) from None
    claimer.mark_published([claim])
    return claim


@dataclass(frozen=True)
class BackfillReport:
    """What :func:`backfill` claimed and sent (in a dry run: what it would claim)."""

    name: str
    task: str
    start: datetime
    #: The end of the range (the database's now when none was given).
    end: datetime
    dry_run: bool
    #: The fires claimed (or that would be), oldest first.
    claimed: list[Claim]
    #: Of those, the ones published and marked published.
    sent: list[Claim] = field(default_factory=list)
    #: Claimed but not sent by this call: a disable or a beat's take-over came first.
    not_sent: list[Claim] = field(default_factory=list)
    #: Of the claimed fire times, those a ``missed`` ledger row stood for.
    from_missed: list[datetime] = field(default_factory=list)
    #: Fire times of the range the ledger already held (passed over).
    taken: list[datetime] = field(default_factory=list)

    @property
    def fire_times(self) -> list[datetime]:
        """Return the claimed fire times (in a dry run: those it would claim)."""
        return [claim.fire_time for claim in self.claimed]


def backfill(
    app: Any,
    store: Store,
    name: str,
    start: datetime,
    end: datetime | None,
    *,
    node: str,
    dry_run: bool = False,
    rate: float | None = DEFAULT_RATE,
    pace: Callable[[float], None] | None = None,
    on_sent: Callable[[Claim], None] | None = None,
) -> BackfillReport:
    """Claim and publish the fires of task ``name`` in ``[start, end]`` that never ran.

    ``start``/``end`` are aware instants (``end=None``: the database's now). Each fire
    time of the task's timer in the range that the ledger does not hold, or holds only
    as ``missed``, is claimed in one transaction (a missed row is split: see
    :mod:`celery_cronstore.policy.backfill`), then each claim is published under its
    deterministic task id with the nominal fire time, oldest first, and marked
    published, through the same steps as beat (``sending`` first, so a claim a beat took
    over, or whose task was disabled meanwhile, is not sent twice or at all).

    ``rate``: fires per second (``None``: no bound); the claims' leases are spread at it.
    ``pace(seconds)`` is called before each publish with the seconds after the first one
    at which it is due: the caller waits (the CLI sleeps; without ``pace`` it publishes
    at once). ``on_sent`` is called with each claim once it is published. ``dry_run``:
    claim nothing and report the fire times it would claim.

    Refused before anything is claimed, as :func:`run_now` is: firing off
    (:class:`FiringOffError`), a disabled task (:class:`DisabledTaskError`), and what
    :func:`celery_cronstore.store.backfill.claim_range` refuses. A publish that fails
    raises :class:`CronstoreError`: that claim and the ones after it stay in the ledger,
    and a running beat publishes them as their leases run out.
    """
    from celery_cronstore.beat.publish import publish

    config = Config.from_app(app)
    if not config.fire:
        raise FiringOffError(
            f"firing is off here ({OFF_SWITCH}): {name!r} is not backfilled; unset it (or "
            f"{FIRE_VARIABLE}=1) where this runs to send fires"
        )
    record = store.get(name)
    if not record.enabled:
        raise DisabledTaskError(
            f"periodic task {name!r} is disabled: enable it first (the worker's guard drops "
            "the fires of a disabled task), then backfill it"
        )
    for what, instant in (("start", start), ("end", end)):
        if instant is not None and (instant.tzinfo is None or instant.utcoffset() is None):
            raise RangeError(
                f"the {what} of a backfill must be an aware datetime, got naive {instant}"
            )
    if rate is not None and not 0 < rate < float("inf"):
        raise RangeError(f"the rate must be a positive number of fires per second, got {rate}")
    claimer = _claimer(app, store, node, config)
    done = claim_range(claimer, name, start, end, rate=rate, dry_run=dry_run)
    plan = done.plan
    report = BackfillReport(
        name=name,
        task=done.task.task,
        start=done.start,
        end=done.end,
        dry_run=dry_run,
        claimed=plan.claims,
        from_missed=plan.from_missed,
        taken=plan.taken,
    )
    if dry_run:
        return report
    sent: list[Claim] = []
    not_sent: list[Claim] = []
    for index, claim in enumerate(plan.claims):
        if pace is not None:
            pace(offset(index, rate))
        if not claimer.mark_sending([claim], paused_ok=True):
            not_sent.append(claim)
            continue
        try:
            publish(app, claim)
        except Exception as exc:
            claimer.release([claim])  # back to claimed: a beat publishes it after its lease
            raise CronstoreError(
                f"backfill of {name}: sent {len(sent)} of {len(plan.claims)} claimed "
                f"fires; could not publish the fire of {claim.fire_time.isoformat()} (task id "
                f"{claim.task_id}: {type(exc).__name__}: {exc}); a running beat publishes it "
                f"and the {len(plan.claims) - index - 1} after it as their leases run out"
            ) from None
        claimer.mark_published([claim])
        sent.append(claim)
        if on_sent is not None:
            on_sent(claim)
    return replace(report, sent=sent, not_sent=not_sent)


def _claimer(app: Any, store: Store, node: str, config: Config) -> Claimer:
    """The claimer an action claims through: beat's lease, allowlist and task checks."""
    return Claimer(
        store,
        node,
        lease=config.lease,
        allowlist=config.task_allowlist,
        seam=TaskCatalog(app, config=config),
    )
