"""The worker's signal handlers: beat's plain tasks guarded and recorded, the worker's
node remembered.

Connected when this module is imported: the ``celery`` command imports it through the
``cronstore`` command plugin, so ``celery -A app worker`` has them. When the worker's app
names a ``cronstore_url``, a plain task (any base class) is guarded as the worker starts
(``worker.plain``: its start recorded, or refused), and the outcome of a run whose message
carries beat's headers is recorded; :class:`~celery_cronstore.CronTask` records its own.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from celery import signals

from celery_cronstore.policy import H_NAME
from celery_cronstore.states import FireState
from celery_cronstore.store import runs
from celery_cronstore.worker import plain
from celery_cronstore.worker.failure import failure_detail
from celery_cronstore.worker.runtime import liveness_for, remember_node, store_for

logger = logging.getLogger("celery_cronstore.worker")


def _on_worker_init(sender: Any = None, **_: Any) -> None:
    app, hostname = getattr(sender, "app", None), getattr(sender, "hostname", None)
    if app is not None and hostname:
        remember_node(app, str(hostname))
    if app is not None:
        plain.install(app)  # before the worker builds its tracers (and forks its pool)


# -- plain tasks, from the worker's signals ------------------------------------------------


def _on_process_init(sender: Any = None, **_: Any) -> None:
    """A prefork child: guard the plain tasks it inherited unguarded (a spawned child)."""
    from celery import current_app

    plain.install(current_app, str(sender) if sender else socket.gethostname())


def _on_postrun(
    sender: Any = None, task: Any = None, retval: Any = None, state: str | None = None, **_: Any
) -> None:
    task = task or sender
    task_id = plain.beat_fire(task, getattr(task, "request", None))
    if task_id is None or state == "IGNORED":  # refused (or ended on purpose unrecorded)
        return
    outcome = {"SUCCESS": FireState.SUCCEEDED, "RETRY": FireState.RETRYING}.get(
        state or "", FireState.FAILED
    )
    details: dict[str, Any] = {}
    if outcome == FireState.SUCCEEDED:
        details["result"] = retval
    else:
        details["error"] = f"{type(retval).__name__}: {retval}" if retval is not None else state
        if outcome == FireState.FAILED and isinstance(retval, BaseException):
            # Celery hands the run's exception over with its traceback still attached.
            details["detail"] = failure_detail(retval, task.app)
    try:
        live = liveness_for(task.app)
        if outcome == FireState.RETRYING:
            details["hold"] = live.abandon_after * 4  # the retry's countdown is not known here
        live.finish(task_id, outcome, **details)
    except Exception as exc:
        plain.unrecorded(task, exc)


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
signals.worker_process_init.connect(_on_process_init, weak=False)
signals.task_postrun.connect(_on_postrun, weak=False)
signals.task_revoked.connect(_on_revoked, weak=False)
