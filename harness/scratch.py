"""Scratch databases: one empty PostgreSQL or MariaDB database per test session, fault
scenario or benchmark run, on the server an admin URL points at.

The one helper for tests (``tests/conftest.py``), the fault harness and the benchmarks:
the repository root is on ``sys.path`` under pytest (``pythonpath``) and in the editable
install the benchmarks run from.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sqlalchemy as sa

__all__ = ["Scratch", "scratch_database"]


@dataclass
class Scratch:
    """A database made for one run: its URL (password included) and its name."""

    url: str
    name: str
    #: Leave the database behind at the end (set it inside the block to decide late).
    keep: bool = False


@contextmanager
def scratch_database(
    admin_url: str, *, prefix: str = "cronstore", keep: bool = False
) -> Iterator[Scratch]:
    """Create an empty database on ``admin_url``'s server; drop it on leaving the block.

    ``admin_url`` must be allowed to ``CREATE DATABASE``. The name is ``prefix`` and a
    random suffix, so parallel runs never collide. The database is dropped even while
    clients are still connected (PostgreSQL's ``FORCE``), unless ``keep`` is set.
    """
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        quoted = admin.dialect.identifier_preparer.quote(name)
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {quoted}")
        url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
        scratch = Scratch(url, name, keep)
        try:
            yield scratch
        finally:
            if not scratch.keep:
                force = " WITH (FORCE)" if admin.dialect.name == "postgresql" else ""
                with admin.connect() as conn:
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quoted}{force}")
    finally:
        admin.dispose()
