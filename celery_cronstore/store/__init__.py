"""The store: the only code in celery-cronstore that speaks SQL."""

from __future__ import annotations

from celery_cronstore.store.claims import Claimer, TickResult, fire_task_id
from celery_cronstore.store.records import Claim, Fire, PeriodicTask, Status
from celery_cronstore.store.store import DEFAULT_URL, Store

__all__ = [
    "DEFAULT_URL",
    "Claim",
    "Claimer",
    "Fire",
    "PeriodicTask",
    "Status",
    "Store",
    "TickResult",
    "fire_task_id",
]
