"""The store: the only code in celery-cronstore that speaks SQL.

It records what :mod:`celery_cronstore.policy` decides: ``Store`` holds the definitions,
``Claimer`` is beat's side of the fire ledger, ``runs`` the worker's. What they need to know
about Celery tasks they ask a ``TaskSeam`` (``NullSeam`` without an app).
"""

from __future__ import annotations

from celery_cronstore.policy import fire_task_id
from celery_cronstore.records import Claim, Fire, PeriodicTask, Status
from celery_cronstore.store.claims import Claimer, TickResult
from celery_cronstore.store.db import Database
from celery_cronstore.store.seam import NullSeam, TaskSeam
from celery_cronstore.store.store import DEFAULT_URL, Store

__all__ = [
    "DEFAULT_URL",
    "Claim",
    "Claimer",
    "Database",
    "Fire",
    "NullSeam",
    "PeriodicTask",
    "Status",
    "Store",
    "TaskSeam",
    "TickResult",
    "fire_task_id",
]
