"""A new SQLite connection waits for the first writer of a fresh file instead of failing.

SQLite does not call its busy handler for ``PRAGMA journal_mode=WAL`` on a file still in
rollback-journal mode whose write lock another connection holds: five ``cronstore
migrate`` started at once on a fresh file failed one in a few rounds with "database is
locked" (CI, 2026-12-07). The store's engine now waits for the lock like any other.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from celery_cronstore.store.engine import create_store_engine
from celery_cronstore.store.sqlite import wal


def test_a_connection_to_a_fresh_file_waits_for_the_first_writer(tmp_path: Path) -> None:
    path = tmp_path / "fresh.sqlite"
    first = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    first.execute("BEGIN IMMEDIATE")  # a fresh file, rollback journal, write lock held
    first.execute("CREATE TABLE t (x INTEGER)")
    # Without the wait, SQLite refuses at once, whatever the busy timeout.
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        sqlite3.connect(path, timeout=5, isolation_level=None).execute("PRAGMA journal_mode=WAL")
    release = threading.Timer(0.3, lambda: first.execute("COMMIT"))
    release.start()
    engine = create_store_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.execute(sa.text("SELECT count(*) FROM t")).scalar() == 0
    finally:
        release.join()
        engine.dispose()
        first.close()


def test_the_wait_is_bounded_and_says_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "held.sqlite"
    first = sqlite3.connect(path, isolation_level=None)
    first.execute("BEGIN IMMEDIATE")
    first.execute("CREATE TABLE t (x INTEGER)")
    other = sqlite3.connect(path, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            wal(other.cursor(), 0.2)
    finally:
        other.close()
        first.execute("ROLLBACK")
        first.close()
