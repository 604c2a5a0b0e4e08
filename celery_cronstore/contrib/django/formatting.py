"""How the admin shows things: typed wrappers of Django's decorators, times, timers."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar, cast
from zoneinfo import ZoneInfo

from django.contrib import admin
from django.utils.html import format_html

from celery_cronstore.errors import CronstoreError
from celery_cronstore.timers import parse_timer

__all__ = ["action", "describe", "display", "html", "local"]

_F = TypeVar("_F", bound=Callable[..., Any])


def display(**kwargs: Any) -> Callable[[_F], _F]:
    """Return ``admin.display(**kwargs)``, typed (Django ships no types)."""
    return cast(Callable[[_F], _F], admin.display(**kwargs))


def action(**kwargs: Any) -> Callable[[_F], _F]:
    """Return ``admin.action(**kwargs)``, typed (Django ships no types)."""
    return cast(Callable[[_F], _F], admin.action(**kwargs))


def html(template: str, *args: Any) -> str:
    """Return ``format_html(template, *args)``: every argument escaped, the result safe."""
    return cast(str, format_html(template, *args))


def local(instant: datetime | None, tz: str) -> str:
    """Return ``2026-05-01 14:00:00 CEST``: ``instant`` as the task's zone shows it."""
    if instant is None:
        return "-"
    try:
        zone: Any = ZoneInfo(tz)
    except (ValueError, LookupError):  # a zone the row should not have: show UTC
        zone = timezone.utc
    moment = instant.astimezone(zone)
    return f"{moment:%Y-%m-%d %H:%M:%S} {moment.tzname() or tz}"


@functools.lru_cache(maxsize=4096)
def describe(timer: str, kind: str, tz: str) -> str:
    """Return a timer's description, or why it cannot be read."""
    try:
        return parse_timer(timer, kind=kind, tz=tz).describe()
    except (CronstoreError, ValueError) as exc:
        return f"invalid: {exc}"
