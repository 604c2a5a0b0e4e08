"""What every backend can store, checked the same way in every window: text (no NUL, no
lone surrogate, within the column), JSON values, and instants (with their offset). Pure.
:mod:`celery_cronstore.fields` applies these to each field; the store to its own columns.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

__all__ = [
    "INSTANT_WANTS",
    "TEXT_BYTES",
    "FieldValueError",
    "check_text",
    "instant",
    "json_ready",
]

#: What an instant must be, as every window says it.
INSTANT_WANTS = "an ISO-8601 instant with its offset (e.g. 2027-01-01T09:00:00+01:00 or ...Z)"

#: Longest text a ``Text`` column holds on every backend (MySQL/MariaDB ``TEXT``: bytes).
TEXT_BYTES = 65_535
_NUL = chr(0)


class FieldValueError(ValueError):
    """A value a field refuses; ``field`` names it (windows show the text next to it)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


def check_text(name: str, value: str, *, max_chars: int | None = None) -> str:
    """Return ``value`` if every backend can store it verbatim; else raise ``ValueError``.

    PostgreSQL refuses NUL characters in text, no driver can encode a lone surrogate, and
    columns have lengths (``Text`` holds 65,535 bytes of UTF-8 on MySQL/MariaDB).
    """
    nul = value.find(_NUL)
    if nul >= 0:
        raise FieldValueError(
            name, f"{name} contains a NUL character (position {nul}); PostgreSQL cannot store it"
        )
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise FieldValueError(
            name, f"{name} is not valid Unicode (lone surrogate at position {exc.start})"
        ) from None
    if max_chars is not None and len(value) > max_chars:
        raise FieldValueError(
            name, f"{name} is longer than {max_chars} characters ({len(value)}): shorten it"
        )
    if size > TEXT_BYTES:
        raise FieldValueError(
            name, f"{name} is {size} bytes of UTF-8, more than the {TEXT_BYTES} it may hold"
        )
    return value


def json_ready(name: str, value: Any) -> Any:
    try:
        # NaN and infinities are not JSON: other readers (and kombu's peers) refuse them.
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise FieldValueError(name, f"{name} must be JSON-serializable: {exc}") from None
    except RecursionError:
        raise FieldValueError(
            name, f"{name} must be JSON-serializable: nested too deeply"
        ) from None
    return value


def instant(name: str, value: Any, wants: str) -> datetime:
    """An instant from a ``datetime`` or ISO-8601 text (files), with its offset: a
    wall time without one would mean different instants to different windows."""
    if isinstance(value, str):
        text = value.strip()
        try:
            utc = text.endswith(("z", "Z"))  # Python 3.10 reads no "Z"
            value = datetime.fromisoformat(text[:-1] + "+00:00" if utc else text)
        except ValueError:
            raise FieldValueError(name, f"{name} must be {wants}, got {text!r}") from None
    if not isinstance(value, datetime):
        raise FieldValueError(name, f"{name} must be {wants}, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise FieldValueError(
            name,
            f"{name} {value.isoformat()} has no offset: add one (e.g. "
            f"{value.isoformat()}+00:00 or Z for UTC)",
        )
    if not 1971 <= value.astimezone(timezone.utc).year <= 9998:
        raise FieldValueError(
            name, f"{name} must be between the years 1971 and 9998, got {value.isoformat()}"
        )
    return value.astimezone(timezone.utc)
