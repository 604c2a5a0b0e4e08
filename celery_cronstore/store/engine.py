"""Engine construction, the dialect probe and the database clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.pool import StaticPool

__all__ = ["Dialect", "create_store_engine", "db_now", "redact"]

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class Dialect:
    """What the database can do, probed once per engine."""

    name: str
    skip_locked: bool


def redact(url: str | URL) -> str:
    """Return ``url`` with its password replaced by ``***`` (safe to log or print)."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except Exception:  # not a URL at all: show nothing that could be a secret
        return "<unparsable database URL>"
    return parsed.render_as_string(hide_password=True)


def create_store_engine(url: str, **options: Any) -> Engine:
    """Create an engine for ``url`` with the settings the store relies on.

    SQLite gets ``BEGIN IMMEDIATE`` transactions (so a tick's read-then-claim is atomic
    across processes), WAL journaling and a busy timeout; an in-memory SQLite database is
    shared by every connection of the engine.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        options.setdefault("pool_pre_ping", True)
        return sa.create_engine(parsed, **options)
    memory = parsed.database in (None, "", ":memory:")
    connect_args = options.pop("connect_args", {})
    connect_args.setdefault("check_same_thread", False)
    connect_args.setdefault("timeout", 30)
    if memory:
        options.setdefault("poolclass", StaticPool)
    engine = sa.create_engine(parsed, connect_args=connect_args, **options)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide where transactions begin (pysqlite quirk).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        if not memory:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def probe(engine: Engine) -> Dialect:
    """Return what ``engine``'s database supports (asks the server once)."""
    name = engine.dialect.name
    if name == "postgresql":
        return Dialect(name, skip_locked=True)
    if name in ("mysql", "mariadb"):
        with engine.connect() as conn:
            version = str(conn.exec_driver_sql("SELECT VERSION()").scalar_one())
        numbers = tuple(int(p) for p in version.split("-")[0].split(".")[:2] if p.isdigit())
        maria = "mariadb" in version.lower()
        return Dialect(name, skip_locked=numbers >= ((10, 6) if maria else (8, 0)))
    return Dialect(name, skip_locked=False)


def db_now(conn: sa.Connection, clock: Clock | None = None) -> datetime:
    """Return the database's current time as aware UTC (SQLite: the host's; or ``clock``)."""
    if clock is not None:
        return clock().astimezone(timezone.utc)
    name = conn.dialect.name
    if name == "postgresql":
        value = conn.exec_driver_sql("SELECT clock_timestamp()").scalar_one()
    elif name in ("mysql", "mariadb"):
        value = conn.exec_driver_sql("SELECT UTC_TIMESTAMP(6)").scalar_one()
    else:
        return datetime.now(timezone.utc)
    if not isinstance(value, datetime):
        raise TypeError(f"database clock returned {value!r}")
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)
