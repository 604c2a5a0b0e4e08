"""Celery's protocol-2 wire format for the messages beat sends: the headers and the body.

The rules of what a message carries (its options, header names, the time box) are
:mod:`celery_cronstore.policy.messages`; this is how Celery 5.7 lays such a message out,
which :class:`celery_cronstore.beat.dispatch.Dispatcher` reproduces byte for byte
(``tests/beat/test_dispatch_brokers.py`` compares both ways field by field).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

__all__ = ["expiry", "protocol2_body", "protocol2_headers"]

logger = logging.getLogger("celery.beat")

#: The canvas part of a protocol-2 body: beat's messages have none.
_EMBED: dict[str, Any] = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def protocol2_headers(
    *,
    task_id: str,
    name: str,
    argsrepr: str,
    kwargsrepr: str,
    origin: str,
    expires: str | None,
    time_limit: float | None,
    soft_time_limit: float | None,
    ignore_result: bool | None,
    shadow: str | None = None,
) -> dict[str, Any]:
    """Return the headers Celery's protocol 2 gives a message beat sends (no eta, no
    parent, no group, no canvas), before the message's own option headers go on top.

    The same keys and values as ``celery.app.amqp.AMQP.as_task_v2`` (Celery 5.7): a
    periodic fire is its own root, and stamps are empty. ``expires`` is already ISO 8601.
    """
    return {
        "lang": "py",
        "task": name,
        "id": task_id,
        "shadow": shadow,
        "eta": None,
        "expires": expires,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [time_limit, soft_time_limit],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": argsrepr,
        "kwargsrepr": kwargsrepr,
        "origin": origin,
        "ignore_result": ignore_result,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }


def protocol2_body(args: list[Any] | None, kwargs: dict[str, Any] | None) -> tuple[Any, ...]:
    """Return the protocol-2 body of a message beat sends: its arguments, no canvas."""
    return (args or [], kwargs or {}, _EMBED.copy())


def expiry(app: Any, task_id: str, expires: Any) -> tuple[str, float]:
    """Return the ``expires`` header and the ``expiration`` TTL of a message sent now by
    ``app``, as Celery computes them (a moment past is warned about and gives TTL 0)."""
    from celery.utils.time import add_seconds_to_datetime, maybe_make_aware
    from celery.utils.time import subtract_datetimes as elapsed

    now = app.now()
    if isinstance(expires, datetime):
        seconds = elapsed(expires, now).total_seconds()
        header = expires.isoformat()
    elif isinstance(expires, str):
        # Celery parses with dateutil's isoparse; rows hold what option_problems let
        # through (fromisoformat), which both read alike.
        moment = datetime.fromisoformat(expires.replace("Z", "+00:00"))
        seconds = elapsed(moment, now).total_seconds()
        header = expires
    else:
        seconds = expires
        later = add_seconds_to_datetime(now, expires)
        header = maybe_make_aware(later, tz=app.timezone).isoformat()
    if seconds < 0:
        logger.warning("%s has an expiration date in the past (%ss ago)", task_id, -seconds)
        seconds = 0
    return header, seconds
