"""What a SQLite store's connections are set up with.

Every connection waits for another's lock (``busy_timeout``), enforces foreign keys
(removing an owner removes its tasks), and journals in WAL mode, so that readers do not
wait for a writer. A transaction that writes starts with ``BEGIN IMMEDIATE``: it takes the
file's write lock up front, so a read-then-claim is atomic across processes.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

__all__ = ["BUSY_SECONDS", "WRITE_OPTION", "install"]

#: Execution option marking a transaction that writes (SQLite: ``BEGIN IMMEDIATE``).
WRITE_OPTION = "cronstore_write"

#: How long a new SQLite connection waits for another connection's lock (busy_timeout).
BUSY_SECONDS = 30.0


def install(engine: sa.Engine, *, memory: bool) -> None:
    """Set up every connection ``engine`` opens, and every transaction it begins."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide where transactions begin (pysqlite quirk).
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout={int(BUSY_SECONDS * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        if not memory:
            wal(cursor, BUSY_SECONDS)
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        # Writers take the lock up front so a read-then-claim is atomic across processes;
        # readers (beat's idle peek) must not queue behind writers for it.
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def wal(cursor: Any, seconds: float) -> None:
    """Switch the database file to WAL journaling, waiting up to ``seconds`` for it.

    Hand-written because SQLite does not call its busy handler here: on a fresh file
    (still in rollback-journal mode) whose write lock another connection holds, as when
    several ``cronstore migrate`` start at once, ``PRAGMA journal_mode=WAL`` fails at once
    with "database is locked" instead of waiting. Once the file is in WAL mode the pragma
    takes no lock, so the retry only runs while a first writer creates the schema.
    """
    deadline = time.monotonic() + seconds
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.25)
