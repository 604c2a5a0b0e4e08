"""The plain-task guard: a worker asks the ledger before a plain task's fire runs.

A CronTask guards its own start. A plain task (any other base class) gets the same
promise from its worker, when the worker's app names a ``cronstore_url``: just before
the body of a fire sent by beat runs, one transaction (``store.plain.start_plain``)
records its start, or refuses it when its task was disabled or removed since, when the
ledger closed the fire (``dropped``, ``expired``...), or when the fire already started
(a second delivery). A refused delivery ends ``IGNORED`` in Celery (no result stored),
with the reason logged and, where it applies, written to the fire's row.

How: Celery calls a task's ``run`` from a tracer built per task when the worker starts
(and again in each prefork child). :func:`install` wraps ``run`` of every plain task of
the app (an instance attribute, so a custom ``__call__`` calling ``self.run`` is covered
too) before those tracers are built, and rebuilds them where they already were. Celery
offers no hook that can stop a task from ``task_prerun``; ``Ignore`` raised from the body
is its documented way to end a task without a result. Calls that do not come from beat
(no beat header) pass straight through, untouched.

If the store cannot be reached, the fire runs unrecorded (a warning, once): a fire is
still sent at most once by beat (``docs/reliability.md``), and the worker does not hold
up work on the database.
"""

from __future__ import annotations

import functools
import logging
import socket
from typing import Any

from celery.exceptions import Ignore

from celery_cronstore.store.plain import start_plain
from celery_cronstore.worker.headers import row_name
from celery_cronstore.worker.runtime import liveness_for

__all__ = ["beat_fire", "install", "start"]

logger = logging.getLogger("celery_cronstore.worker")

#: Marks a wrapped ``run`` (install is idempotent).
_WRAPPED = "__cronstore_plain__"
#: Apps whose plain-task records failed once (warned; not again).
_warned: set[int] = set()


def beat_fire(task: Any, request: Any) -> str | None:
    """Return the fire's task id if ``task`` is a plain task run from a beat message by a
    worker whose app reaches the store; else ``None``."""
    if task is None or getattr(task, "cronstore_guarded", False) or request is None:
        return None
    if not row_name(request):
        return None
    if not task.app.conf.get("cronstore_url"):
        return None  # this worker has no store: run the task, record nothing
    task_id = getattr(request, "id", None)
    return str(task_id) if task_id else None


def start(task: Any) -> bool:
    """Record the start of the beat fire ``task`` is about to run; return whether it may
    run (``False``: refused, the reason logged and recorded)."""
    request = task.request
    task_id = beat_fire(task, request)
    if task_id is None:
        return True
    try:
        live = liveness_for(task.app)
        node = str(getattr(request, "hostname", None) or socket.gethostname())
        decision, run = start_plain(
            live.store.db,
            task_id,
            node=node,
            abandon_after=live.abandon_after,
            retries=int(getattr(request, "retries", 0) or 0),
            acks_late=bool(getattr(task, "acks_late", False)),
        )
    except Exception as exc:
        unrecorded(task, exc)
        return True
    if not decision.start:
        logger.warning("%s[%s]: %s", task.name, task_id, decision.reason)
        return False
    if run is not None:
        live.started(task_id, run)
    return True


def unrecorded(task: Any, exc: BaseException) -> None:
    """Warn, once per app, that the runs of beat's plain tasks go unrecorded."""
    if id(task.app) not in _warned:
        _warned.add(id(task.app))
        logger.warning(
            "cannot record the runs of beat's plain tasks in the store (%s: %s); they still "
            "run, unrecorded",
            type(exc).__name__,
            exc,
        )


def install(app: Any, hostname: str | None = None) -> int:
    """Guard every plain task of ``app`` (when it names a ``cronstore_url``); with
    ``hostname``, rebuild their tracers (a prefork child built them already). Return how
    many tasks were newly guarded."""
    if not app.conf.get("cronstore_url"):
        return 0
    guarded = 0
    for name, task in list(app.tasks.items()):
        if name.startswith("celery.") or getattr(task, "cronstore_guarded", False):
            continue
        run = task.run
        if getattr(run, _WRAPPED, False):
            continue
        task.run = _guard(task, run)
        guarded += 1
        if hostname is not None:
            from celery.app.trace import build_tracer

            task.__trace__ = build_tracer(name, task, app.loader, hostname, app=app)
    return guarded


def _guard(task: Any, run: Any) -> Any:
    @functools.wraps(run)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if not start(task):
            raise Ignore()
        return run(*args, **kwargs)

    setattr(guarded, _WRAPPED, True)
    return guarded
