"""Deprecated home of :class:`CronTask`: use ``celery_cronstore.CronTask`` (or
``celery_cronstore.worker.task``). Kept importable for one release (0.2 removes it)."""

from __future__ import annotations

import warnings

from celery_cronstore.worker.task import CronTask

__all__ = ["CronTask"]

warnings.warn(
    "celery_cronstore.task is deprecated: import celery_cronstore.CronTask",
    DeprecationWarning,
    stacklevel=2,
)
