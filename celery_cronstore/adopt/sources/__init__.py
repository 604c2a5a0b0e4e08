"""One reader per scheduler a team may move over from.

Each module has ``read(location, context) -> list[Read]``: every row of the peer's data,
mapped to an :class:`~celery_cronstore.adopt.records.Incoming` task or a
:class:`~celery_cronstore.adopt.records.Refused` line. A reader never writes anything,
and one bad row never stops the others.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from celery_cronstore.adopt.records import Read, ReadContext

__all__ = ["SOURCES", "Reader", "reader", "tag"]

Reader = Callable[[str | None, ReadContext], list[Read]]

#: ``--from`` value -> (module, the ``source`` tag its tasks are stored with: 16 chars max).
SOURCES: dict[str, tuple[str, str]] = {
    "django-celery-beat": ("django_celery_beat", "dcb"),
    "redbeat": ("redbeat", "redbeat"),
    "sqlalchemy-celery-beat": ("sqlalchemy_celery_beat", "scb"),
    "beat-schedule": ("beat_schedule", "beat-schedule"),
}


def reader(source: str) -> Reader:
    """Return the reader of ``source`` (a key of :data:`SOURCES`; ``ValueError`` if not)."""
    try:
        module, _ = SOURCES[source]
    except KeyError:
        raise ValueError(f"unknown source {source!r}: give one of {', '.join(SOURCES)}") from None
    found: Reader = importlib.import_module(f"{__name__}.{module}").read
    return found


def tag(source: str) -> str:
    """Return the ``source`` column value of tasks imported from ``source``."""
    return SOURCES[source][1]
