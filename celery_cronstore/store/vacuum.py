"""PostgreSQL: read the hot tables' vacuum statistics, and vacuum one (beat's own vacuum,
see :mod:`celery_cronstore.policy.vacuum` for when)."""

from __future__ import annotations

import sqlalchemy as sa

from celery_cronstore.policy.vacuum import TableStats
from celery_cronstore.store.db import Database
from celery_cronstore.store.pooler import pooling_of
from celery_cronstore.store.schema import fire, periodic_task

__all__ = ["HOT_TABLES", "table_stats", "vacuum"]

#: The tables every fire writes (a periodic task's ``next_run``, the ledger).
HOT_TABLES = (periodic_task.name, fire.name)

_STATS = sa.text(
    """
    SELECT s.relname AS name, s.n_live_tup AS live, s.n_dead_tup AS dead,
           extract(epoch FROM now() - greatest(s.last_vacuum, s.last_autovacuum)) AS since,
           pg_has_role(c.relowner, 'USAGE') AS allowed
      FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
     WHERE s.relid IN (to_regclass(:tasks), to_regclass(:ledger))
    """
)


def table_stats(db: Database) -> list[TableStats]:
    """Return the statistics of :data:`HOT_TABLES` (empty if not PostgreSQL)."""
    if db.dialect.name != "postgresql":
        return []
    with db.engine.connect() as conn:
        rows = conn.execute(_STATS, {"tasks": HOT_TABLES[0], "ledger": HOT_TABLES[1]}).all()
    return [
        TableStats(
            r.name,
            int(r.live),
            int(r.dead),
            None if r.since is None else float(r.since),
            bool(r.allowed),
        )
        for r in sorted(rows, key=lambda r: HOT_TABLES.index(r.name))
    ]


def vacuum(db: Database, table: str) -> None:
    """Run a plain ``VACUUM`` (no lock against reads or writes) of one of :data:`HOT_TABLES`."""
    if table not in HOT_TABLES:
        raise ValueError(f"not one of the store's hot tables: {table!r}")
    pooling = pooling_of(db.engine)
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if pooling is not None and pooling.per_transaction:
            # Through a transaction pooler the session limits are per transaction, so
            # this autocommit VACUUM has the server's own; a SET here would stay behind on
            # a server session other clients get (and VACUUM cannot share a transaction).
            conn.exec_driver_sql(f"VACUUM {table}")
            return
        # Beat's sessions carry a statement timeout of half the lease; a vacuum of a big
        # table may take longer, and must not leave the pooled session without it.
        limit = conn.exec_driver_sql("SHOW statement_timeout").scalar_one()
        conn.exec_driver_sql("SET statement_timeout = 0")
        try:
            conn.exec_driver_sql(f"VACUUM {table}")
        finally:
            conn.exec_driver_sql(f"SET statement_timeout = '{limit}'")
