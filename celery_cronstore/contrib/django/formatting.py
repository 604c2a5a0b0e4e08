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

__all__ = ["action", "describe", "display", "html", "in_zone", "local", "shown"]

_F = TypeVar("_F", bound=Callable[..., Any])
_SLASH = "/\u200b"


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


def shown(instant: datetime | None) -> str:
    """Return ``instant`` in the admin's display zone: Django's current time zone (the
    ``TIME_ZONE`` setting, or one activated for the request), the zone of every time in
    a list column, so that a column reads in one zone. It may wrap between the date and
    the time, never inside either."""
    from django.utils import timezone as django_tz

    day, _, rest = local(instant, django_tz.get_current_timezone_name()).partition(" ")
    if not rest:
        return day
    return html(
        '<span class="cronstore-when">{}</span> <span class="cronstore-when">{}</span>', day, rest
    )


def in_zone(title: str) -> Any:
    """Return a column title naming the display zone, read when the page is drawn."""
    from django.utils import timezone as django_tz
    from django.utils.functional import lazy

    def text() -> str:
        # A zero-width space after each slash lets "(America/Chicago)" wrap in a narrow
        # header (the admin escapes a column title: no <wbr>).
        return f"{title} ({django_tz.get_current_timezone_name().replace('/', _SLASH)})"

    return lazy(text, str)()


@functools.lru_cache(maxsize=4096)
def describe(timer: str, kind: str, tz: str) -> str:
    """Return a timer's description, or why it cannot be read."""
    try:
        return parse_timer(timer, kind=kind, tz=tz).describe()
    except (CronstoreError, ValueError) as exc:
        return f"invalid: {exc}"
