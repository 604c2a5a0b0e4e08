"""The trailing zone of a calendar expression, found as systemd finds it: `` UTC`` or a
last word that names an IANA zone (read with :mod:`zoneinfo`)."""

from __future__ import annotations

import re
from datetime import tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["load_zone", "split_zone"]

_ZONE_NAME = re.compile(r"[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*")


def load_zone(name: str) -> tzinfo | None:
    """Return the IANA zone ``name`` if systemd would accept it as a trailing zone, else None."""
    if len(name) > 255 or not _ZONE_NAME.fullmatch(name):
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def split_zone(expression: str) -> tuple[int, bool, str | None]:
    """Return (end of body, utc, zone name) for the trailing zone, as systemd finds it."""
    if expression[-4:].isascii() and expression[-4:].upper() == " UTC":
        return len(expression) - 4, True, None
    space = expression.rfind(" ")
    if space >= 0 and load_zone(expression[space + 1 :]) is not None:
        return space, False, expression[space + 1 :]
    return len(expression), False, None
