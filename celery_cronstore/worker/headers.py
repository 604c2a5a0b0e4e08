"""What beat's message says about the fire, read in the worker: the headers beat adds to
every message it sends (``policy.messages``: the row's name, the nominal fire time, the
timer's interval), for CronTask and plain tasks alike.

:func:`fire_time` is the documented accessor for a plain task: the instant the fire was
scheduled for, however late the task runs, so a job can process "the hour that ended at
the fire time" (a CronTask has it as ``self.fire_time`` too).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from celery_cronstore.policy import H_FIRE, H_INTERVAL, H_NAME

__all__ = ["fire_time", "header", "interval_of", "parse_interval", "parse_time", "row_name"]


def header(request: Any, name: str) -> Any:
    """Return message header ``name`` of a Celery task request (``None``: not there)."""
    headers = getattr(request, "headers", None) or {}
    if name in headers:
        return headers[name]
    return getattr(request, name, None)


def parse_time(value: Any) -> datetime | None:
    """Return the instant an ISO 8601 header value names (``None``: not one)."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def parse_interval(value: Any) -> float | None:
    """Return a positive number of seconds from a header value (``None``: not one)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if number > 0 else None
    return None


def _request(task_or_request: Any) -> Any:
    # A bound task (``self`` in ``@app.task(bind=True)``) or its ``request``.
    request = getattr(task_or_request, "request", None)
    return task_or_request if request is None else request


def fire_time(task_or_request: Any) -> datetime | None:
    """Return the nominal fire time (aware, UTC) of the fire this task runs for, from the
    message beat sent; ``None`` when the task was not sent by beat (called directly,
    ``apply_async`` by hand).

    ``task_or_request``: the bound task (``self``) or ``self.request``.
    """
    return parse_time(header(_request(task_or_request), H_FIRE))


def interval_of(task_or_request: Any) -> float | None:
    """Return the timer's interval (seconds) beat sent with the fire, or ``None``."""
    return parse_interval(header(_request(task_or_request), H_INTERVAL))


def row_name(task_or_request: Any) -> str | None:
    """Return the name of the periodic task row the fire belongs to, or ``None``."""
    value = header(_request(task_or_request), H_NAME)
    return value if isinstance(value, str) and value else None
