"""What a failed run leaves for the failures view: its traceback, bounded and scrubbed.

CronTask (``worker.task``) and the signal handlers of plain tasks (``worker.signals``)
store this in the fire's ``detail`` beside the one-line ``reason``. The traceback may
quote a connection string or a password an exception message carried: it goes through
:func:`~celery_cronstore.secrets.scrub` with the app's own passwords (store, broker,
result backend) before it leaves the worker. It is cut twice: to a few times the bound
before scrubbing (an exception message of megabytes costs no more than a short one),
then to :data:`~celery_cronstore.store.failures.DETAIL_MAX`; the kept head and tail of
the second cut lie well inside those of the first, so no half of a password cut by the
first survives the second.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from celery_cronstore.secrets import app_passwords, scrub
from celery_cronstore.store.failures import DETAIL_MAX, clip

__all__ = ["failure_detail"]

logger = logging.getLogger("celery_cronstore.worker")


def failure_detail(exc: BaseException, app: Any, limit: int = DETAIL_MAX) -> str:
    """Return the traceback of ``exc`` (its chained causes too), scrubbed and clipped.

    Never raises: a run's end is recorded even when its exception cannot be formatted.
    """
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # a hostile __str__ or __repr__ may raise anything
        text = f"{type(exc).__name__} (the traceback could not be formatted)\n"
    try:
        secrets = app_passwords(app)
    except Exception:  # a broken configuration must not hide the failure itself
        logger.debug("cannot read the app's passwords to scrub a traceback", exc_info=True)
        secrets = []
    return clip(scrub(clip(text, limit * 4), secrets), limit)
