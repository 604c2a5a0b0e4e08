"""Column types that behave the same on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Dialect

from celery_cronstore.records import EPOCH

__all__ = ["EPOCH", "UTCDateTime", "dumps", "loads"]


class UTCDateTime(sa.TypeDecorator[datetime]):
    """An aware UTC datetime stored as naive UTC with microseconds on every dialect.

    SQLite keeps datetimes as text and MariaDB's DATETIME has no zone: storing naive UTC
    everywhere keeps comparisons (``next_run <= now``) exact and portable.
    """

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            from sqlalchemy.dialects import mysql

            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        if dialect.name == "sqlite":
            return _TolerantSQLiteDateTime()  # type: ignore[no-untyped-call]  # untyped base
        return dialect.type_descriptor(sa.DateTime(timezone=False))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"refusing to store naive datetime {value.isoformat()}")
        return value.astimezone(timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # raw SQL on SQLite may leave text of another shape
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                # Not a time at all (SQLite stores any text): read it as the epoch, which
                # for next_run means "plan me" (beat rewrites it), instead of failing every
                # read of the table, beat's tick included.
                return EPOCH
        if not isinstance(value, datetime):
            raise TypeError(f"expected a datetime column value, got {value!r}")
        if value.tzinfo is not None:
            return value.astimezone(timezone.utc)
        return value.replace(tzinfo=timezone.utc)


class _TolerantSQLiteDateTime(sqlite.DATETIME):
    """SQLite's DATETIME, handing text it cannot parse on to ``UTCDateTime`` as text."""

    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        parse = super().result_processor(dialect, coltype)
        if parse is None:  # pragma: no cover - SQLAlchemy always parses SQLite text
            return None

        def process(value: Any) -> Any:
            try:
                return parse(value)
            except ValueError:
                return value

        return process


def dumps(value: object) -> str:
    """Serialize ``value`` to compact JSON (the only format the store writes)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def loads(text: str | None, default: Any) -> Any:
    """Parse JSON text written by :func:`dumps` (or by hand); ``None`` gives ``default``."""
    if text is None or text == "":
        return default
    # Most rows hold empty args/kwargs/options: skip the parser for them (fresh objects,
    # never shared, since callers may mutate what they get).
    if text == "[]":
        return []
    if text == "{}":
        return {}
    return json.loads(text)
