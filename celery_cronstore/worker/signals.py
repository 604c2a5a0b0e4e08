"""The worker's signal handlers: beat's plain tasks recorded, the worker's node remembered.

Connected when this module is imported: the ``celery`` command imports it through the
``cronstore`` command plugin, so ``celery -A app worker`` has them. A plain task (any base
class) whose message carries beat's headers gets its start and outcome recorded, when the
worker's app names a ``cronstore_url``; :class:`~celery_cronstore.CronTask` records its own.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from celery import signals

from celery_cronstore.policy import H_NAME
from celery_cronstore.states import FireState
from celery_cronstore.store import runs
from celery_cronstore.worker.runtime import liveness_for, remember_node, store_for

logger = logging.getLogger("celery_cronstore.worker")

#: Apps whose plain-task records failed once (warned; not again).
_warned: set[int] = set()


def _on_worker_init(sender: Any = None, **_: Any) -> None:
    app, hostname = getattr(sender, "app", None), getattr(sender, "hostname", None)
    if app is not None and hostname:
        remember_node(app, str(hostname))


# -- plain tasks, from the worker's signals ------------------------------------------------


def _from_beat(task: Any, request: Any) -> str | None:
    """Return the fire's task id if ``task`` is a plain task run from a beat message."""
    if task is None or getattr(task, "cronstore_guarded", False) or request is None:
        return None
    headers = getattr(request, "headers", None) or {}
    if not (headers.get(H_NAME) or getattr(request, H_NAME, None)):
        return None
    if not task.app.conf.get("cronstore_url"):
        return None  # this worker has no store: run the task, record nothing
    task_id = getattr(request, "id", None)
    return str(task_id) if task_id else None


def _unrecorded(task: Any, exc: BaseException) -> None:
    if id(task.app) not in _warned:
        _warned.add(id(task.app))
        logger.warning(
            "cannot record the runs of beat's plain tasks in the store (%s: %s); they still "
            "run, unrecorded",
            type(exc).__name__,
            exc,
        )


def _on_prerun(sender: Any = None, task: Any = None, **_: Any) -> None:
    task = task or sender
    task_id = _from_beat(task, getattr(task, "request", None))
    if task_id is None:
        return
    try:
        live = liveness_for(task.app)
        node = str(task.request.hostname or socket.gethostname())
        run = runs.record_start(live.store.db, task_id, node=node, abandon_after=live.abandon_after)
        if run is not None:
            live.started(task_id, run)
    except Exception as exc:
        _unrecorded(task, exc)


def _on_postrun(
    sender: Any = None, task: Any = None, retval: Any = None, state: str | None = None, **_: Any
) -> None:
    task = task or sender
    task_id = _from_beat(task, getattr(task, "request", None))
    if task_id is None:
        return
    outcome = {"SUCCESS": FireState.SUCCEEDED, "RETRY": FireState.RETRYING}.get(
        state or "", FireState.FAILED
    )
    details: dict[str, Any] = {}
    if outcome == FireState.SUCCEEDED:
        details["result"] = retval
    else:
        details["error"] = f"{type(retval).__name__}: {retval}" if retval is not None else state
    try:
        live = liveness_for(task.app)
        if outcome == FireState.RETRYING:
            details["hold"] = live.abandon_after * 4  # the retry's countdown is not known here
        live.finish(task_id, outcome, **details)
    except Exception as exc:
        _unrecorded(task, exc)


def _on_revoked(sender: Any = None, request: Any = None, expired: bool = False, **_: Any) -> None:
    """Record a beat-published run the worker discarded unstarted because it expired.

    Celery drops an expired message before the task is called: without this the ledger
    would say "published" for a fire that never ran.
    """
    if not expired or sender is None or request is None:
        return
    headers = getattr(request, "headers", None) or {}
    task_id = getattr(request, "id", None)
    if not task_id or not (headers.get(H_NAME) or getattr(request, H_NAME, None)):
        return
    if not getattr(sender, "cronstore_guarded", False) and not sender.app.conf.get("cronstore_url"):
        return
    reason = "not started: the message expired (starting deadline) before a worker took it"
    try:
        if runs.expire_fire(store_for(sender.app).db, str(task_id), reason):
            logger.warning("%s[%s]: expired before it started", sender.name, task_id)
    except Exception:
        logger.exception("%s[%s]: could not record the expiry", sender.name, task_id)


signals.worker_init.connect(_on_worker_init, weak=False)
signals.task_prerun.connect(_on_prerun, weak=False)
signals.task_postrun.connect(_on_postrun, weak=False)
signals.task_revoked.connect(_on_revoked, weak=False)
