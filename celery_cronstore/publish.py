"""Send one claimed fire to the broker: the one place that builds the message."""

from __future__ import annotations

import logging
from typing import Any

from celery_cronstore.store import Claim

__all__ = ["publish"]

logger = logging.getLogger("celery.beat")


def publish(app: Any, claim: Claim, producer: Any = None) -> None:
    """Publish ``claim`` under its ledger task id, with the cronstore headers.

    A registered :class:`~celery_cronstore.CronTask` gets the time box: a soft time limit
    of half the interval to the timer's next fire (unless the options set one) and a hard
    limit at the next fire.
    """
    from celery_cronstore.task import CronTask

    options = dict(claim.options)
    headers = dict(options.pop("headers", None) or {})
    headers.update(
        celery_beat_task=True,
        cronstore_name=claim.name,
        cronstore_fire_time=claim.fire_time.isoformat(),
        cronstore_interval=claim.interval,
    )
    if claim.expires is not None:
        options["expires"] = claim.expires
    logger.info("beat: sending %s (%s) for %s", claim.name, claim.task, claim.fire_time)
    task = app.tasks.get(claim.task)
    if isinstance(task, CronTask) and claim.interval and "soft_time_limit" not in options:
        options["soft_time_limit"] = claim.interval / 2
        # The hard limit (the only one gevent enforces) kills at the next fire.
        options.setdefault("time_limit", max(claim.interval, claim.interval / 2 + 1))
    message: dict[str, Any] = {
        "args": claim.args,
        "kwargs": claim.kwargs,
        "task_id": claim.task_id,
        "producer": producer,
        "headers": headers,
        **options,
    }
    if task is not None:
        task.apply_async(**message)
    else:
        app.send_task(claim.task, **message)
