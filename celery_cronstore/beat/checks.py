"""Start-up checks connected to Celery's signals: loud warnings that name the fix.

Importing this module connects them (the ``celery`` command imports it with the CLI
plugin, so every ``celery beat`` and ``celery worker -B`` process has them).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from celery import signals

__all__ = ["other_scheduler_problem", "warn_other_scheduler"]

logger = logging.getLogger("celery.beat")

_OURS = "celery_cronstore.beat.scheduler.Scheduler"


def other_scheduler_problem(
    app: Any, scheduler_cls: Any, *, app_name: str | None = None
) -> str | None:
    """Return a warning when ``app`` sets ``cronstore_url`` but beat runs ``scheduler_cls``.

    ``scheduler_cls`` is what beat was given (a class, a dotted name or an alias such as
    ``cronstore``); ``None`` when it is a cronstore scheduler or no ``cronstore_url`` is set.
    ``app_name`` is what ``-A`` was given (shown in the commands to run instead).
    """
    if not app.conf.get("cronstore_url"):
        return None
    resolved = _resolve(scheduler_cls)
    if resolved is None:
        return None
    name = f"{resolved.__module__}.{resolved.__qualname__}"
    if any(f"{k.__module__}.{k.__qualname__}" == _OURS for k in resolved.__mro__):
        return None
    return (
        f"beat: cronstore_url is set but this beat runs {name}, not celery-cronstore: "
        "the tasks in the store will NOT fire. Start it with "
        "`celery -A <app> beat -S cronstore` or `celery -A <app> worker -B --scheduler "
        "cronstore` (on `celery worker`, -S is --statedb, not the scheduler), or set "
        "beat_scheduler = 'celery_cronstore.Scheduler'"
    ).replace("<app>", app_name or app.main or "<app>")


def _resolve(scheduler_cls: Any) -> type | None:
    if isinstance(scheduler_cls, type):
        return scheduler_cls
    from celery.utils.imports import load_extension_class_names, symbol_by_name

    aliases = dict(load_extension_class_names("celery.beat_schedulers"))
    try:
        found = symbol_by_name(scheduler_cls, aliases=aliases)
    except Exception:  # beat itself reports a scheduler it cannot import
        return None
    return found if isinstance(found, type) else None


def warn_other_scheduler(sender: Any = None, **_kwargs: Any) -> None:
    """Warn (log level WARNING, ``celery.beat``) when beat runs another scheduler."""
    problem = other_scheduler_problem(sender.app, sender.scheduler_cls, app_name=_app_arg())
    if problem is not None:
        logger.warning(problem)


def _app_arg() -> str | None:
    """Return the ``-A``/``--app`` value this process was started with, if any."""
    argv = sys.argv
    for i, arg in enumerate(argv):
        if arg in ("-A", "--app") and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--app="):
            return arg.split("=", 1)[1]
        if arg.startswith("-A") and len(arg) > 2:
            return arg[2:]
    return None


signals.beat_init.connect(
    warn_other_scheduler, weak=False, dispatch_uid="celery_cronstore.beat.checks.other_scheduler"
)
