"""What runs in a Celery worker: :class:`CronTask`, the per-process store, liveness, and
the signal handlers that record beat's plain tasks.

Importing this package connects the signal handlers (the ``celery`` command imports it
through the ``cronstore`` command plugin, so ``celery -A app worker`` has them).
"""

from __future__ import annotations

from celery_cronstore.worker import signals as _signals  # noqa: F401  (connects the handlers)
from celery_cronstore.worker.runtime import (
    Liveness,
    clock_offset,
    liveness_for,
    node_of,
    store_for,
    use_store,
)

__all__ = ["Liveness", "clock_offset", "liveness_for", "node_of", "store_for", "use_store"]
