"""Many rows in one statement: the claim's ledger insert and row update.

On PostgreSQL a batch goes in as one statement whatever its size. The ledger rows go in
by ``COPY`` (psycopg 3: :func:`insert`); the rows' update binds one array per column and
``unnest`` turns them back into rows on the server (``UPDATE ... FROM unnest(...)``:
:func:`unnest`), a statement the same for every batch, so SQLAlchemy compiles it once.
Either way the values go through each column's type (UTC handling included). Elsewhere
(SQLite, MariaDB, another PostgreSQL driver) the driver's ``executemany`` does it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from celery_cronstore.store.db import planner_off
from celery_cronstore.store.engine import driver_error

__all__ = ["among", "columns", "insert", "joined_by_key", "set_based", "unnest"]


def set_based(conn: sa.Connection) -> bool:
    """Whether ``conn``'s database takes a batch as one ``unnest`` statement."""
    return conn.dialect.name == "postgresql"


def among(column: sa.ColumnElement[Any], values: list[Any], postgres: bool) -> Any:
    """``column IN (values)``; on PostgreSQL ``column = ANY(:array)``, one parameter.

    One array is bound and adapted by the driver, not a parameter (or a literal) per
    value; SQLAlchemy compiles the statement once. Meant for look-ups through
    ``column``'s unique index: PostgreSQL compares an array parameter with each row it
    scans element by element, so a caller whose plan might scan (``store.marks``: a
    transaction with ``enable_seqscan`` off, and no other index in the statement's reach)
    must leave the planner only the index.
    """
    if not postgres:
        return column.in_(values)
    array = sa.bindparam(None, list(values), type_=postgresql.ARRAY(column.type))
    return column == sa.any_(array)


@contextmanager
def joined_by_key(conn: sa.Connection) -> Iterator[None]:
    """Run the statements inside with hash and merge joins off on PostgreSQL: a batch of
    rows joined to a table (``UPDATE ... FROM unnest(...)``) then finds each row through
    the table's index, whatever the statistics say.

    With statistics older than the rows (a store just filled, a burst of new tasks) the
    planner read the whole table into a hash for every batch of 500: 5 ms a batch at
    11,000 stored tasks (``auto_explain``), growing with the table. Only these statements:
    the transaction's other plans are left alone.
    """
    with planner_off(conn, "hashjoin", "mergejoin"):
        yield


def unnest(columns: Mapping[str, sa.types.TypeEngine[Any]], name: str = "v") -> Any:
    """``unnest(:a, :b, ...) AS name(a, b, ...)``: a row per index of the bound arrays.

    Bind each name to a list (all of one length); each list element is converted by its
    column's type, as a plain bind parameter would be.
    """
    arrays = [sa.bindparam(key, type_=postgresql.ARRAY(type_)) for key, type_ in columns.items()]
    rows = sa.func.unnest(*arrays).table_valued(
        *(sa.column(key, type_) for key, type_ in columns.items())
    )
    return rows.render_derived(name=name)


def columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The rows (dicts with the same keys) as one list per column."""
    return {key: [row[key] for row in rows] for key in rows[0]}


def insert(conn: sa.Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` (dicts with the same keys) into ``table``: one ``COPY`` on
    PostgreSQL with psycopg 3, the driver's ``executemany`` elsewhere. A constraint
    refusing a row raises :class:`sqlalchemy.exc.IntegrityError` either way.

    (``COPY`` rather than ``INSERT ... SELECT FROM unnest``: psycopg quotes each array
    element in Python, which made the latter no faster than ``executemany``.)"""
    if not rows:
        return
    if set_based(conn) and conn.dialect.driver == "psycopg":
        _copy(conn, table, list(rows[0]), rows)
    else:
        conn.execute(sa.insert(table), rows)


def _copy(
    conn: sa.Connection, table: sa.Table, names: list[str], rows: list[dict[str, Any]]
) -> None:
    """``COPY table (names) FROM STDIN`` on ``conn``'s psycopg 3 connection, each value
    converted by its column's type first (as a bound parameter would be)."""
    import psycopg

    preparer = conn.dialect.identifier_preparer
    sql = (
        f"COPY {preparer.format_table(table)} "
        f"({', '.join(preparer.quote(name) for name in names)}) FROM STDIN"
    )
    convert = [table.c[name].type.bind_processor(conn.dialect) for name in names]
    pairs = list(zip(names, convert, strict=True))
    raw: Any = conn.connection.driver_connection
    try:
        with raw.cursor() as cursor, cursor.copy(sql) as copy:
            for row in rows:
                copy.write_row([row[n] if f is None else f(row[n]) for n, f in pairs])
    except psycopg.Error as exc:  # as SQLAlchemy would have raised it
        raise driver_error(conn.engine, sql, None, exc) from exc
