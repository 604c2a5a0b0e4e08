"""celery-cronstore: periodic Celery tasks kept in SQL, each fire claimed once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from celery_cronstore.errors import (
    CronstoreError,
    DuplicateTaskError,
    SchemaVersionError,
    StoreError,
    TaskNotFoundError,
    TimerError,
    TimerSearchError,
    TimerSyntaxError,
)
from celery_cronstore.timers import Timer, detect_kind, is_valid, parse_timer

if TYPE_CHECKING:
    from celery_cronstore.beat.scheduler import Scheduler
    from celery_cronstore.store import Store
    from celery_cronstore.worker.headers import fire_time
    from celery_cronstore.worker.task import CronTask

__all__ = [
    "CronTask",
    "CronstoreError",
    "DuplicateTaskError",
    "Scheduler",
    "SchemaVersionError",
    "Store",
    "StoreError",
    "TaskNotFoundError",
    "Timer",
    "TimerError",
    "TimerSearchError",
    "TimerSyntaxError",
    "__version__",
    "detect_kind",
    "fire_time",
    "is_valid",
    "parse_timer",
]

__version__ = "0.1.0"

# The Celery-facing classes import Celery and SQLAlchemy: load them on first use so that
# `import celery_cronstore` (e.g. for timers) stays light.
_LAZY = {
    "Scheduler": "celery_cronstore.beat.scheduler",
    "Store": "celery_cronstore.store",
    "CronTask": "celery_cronstore.worker.task",
    "fire_time": "celery_cronstore.worker.headers",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'celery_cronstore' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
