"""What an operator does to a periodic task from any window: the CLI, the dashboard and
the Django admin call these, so each action has one path."""

from __future__ import annotations

from typing import Any

from celery_cronstore.catalog import TaskCatalog
from celery_cronstore.config import FIRE_VARIABLE, Config
from celery_cronstore.errors import CronstoreError
from celery_cronstore.policy.health import OFF_SWITCH
from celery_cronstore.records import Claim
from celery_cronstore.store import Claimer, Store

__all__ = ["DisabledTaskError", "FiringOffError", "disabled_refusal", "run_now"]


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
    claimer = Claimer(
        store,
        node,
        lease=config.lease,
        allowlist=config.task_allowlist,
        seam=TaskCatalog(app, config=config),
    )
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
