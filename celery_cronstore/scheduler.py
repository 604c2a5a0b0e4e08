"""Deprecated home of :class:`Scheduler`: use ``celery_cronstore.Scheduler`` (or
``celery_cronstore.beat.scheduler``). Kept importable for one release (0.2 removes it)."""

from __future__ import annotations

import warnings

from celery_cronstore.beat.scheduler import Scheduler

__all__ = ["Scheduler"]

warnings.warn(
    "celery_cronstore.scheduler is deprecated: import celery_cronstore.Scheduler "
    "(beat -S celery_cronstore.Scheduler, or -S cronstore)",
    DeprecationWarning,
    stacklevel=2,
)
