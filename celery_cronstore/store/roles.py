"""Read what the store's database role may do of beat's work (``cronstore health``).

PostgreSQL: ``has_table_privilege`` / ``has_sequence_privilege`` for every privilege of
:func:`celery_cronstore.policy.roles.needed`, and the tables' ownership as beat's own
vacuum reads it (:func:`celery_cronstore.store.vacuum.table_stats`). MariaDB and MySQL:
the account's grants in ``information_schema`` (global, database and table level, to the
user or its current role); there is no ownership. SQLite: nothing to read.
"""

from __future__ import annotations

import sqlalchemy as sa

from celery_cronstore.policy.roles import RoleFacts, needed
from celery_cronstore.store.db import Database
from celery_cronstore.store.vacuum import table_stats

__all__ = ["read_role"]

#: The account's grants at every level; ``information_schema`` names the grantee
#: ``'user'@'host'`` (and a current MariaDB role ``'role'``). ``NULL AS name``: every table.
_MYSQL_HELD = sa.text(
    """
    WITH me AS (
      SELECT CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''',
                    SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''') AS account,
             CONCAT('''', COALESCE(CURRENT_ROLE(), ''), '''') AS role
    )
    SELECT u.PRIVILEGE_TYPE AS privilege, NULL AS name
      FROM information_schema.USER_PRIVILEGES u JOIN me ON u.GRANTEE IN (me.account, me.role)
    UNION ALL
    SELECT s.PRIVILEGE_TYPE, NULL
      FROM information_schema.SCHEMA_PRIVILEGES s JOIN me ON s.GRANTEE IN (me.account, me.role)
     WHERE DATABASE() LIKE s.TABLE_SCHEMA
    UNION ALL
    SELECT t.PRIVILEGE_TYPE, t.TABLE_NAME
      FROM information_schema.TABLE_PRIVILEGES t JOIN me ON t.GRANTEE IN (me.account, me.role)
     WHERE t.TABLE_SCHEMA = DATABASE()
    """
)


def read_role(db: Database) -> RoleFacts | None:
    """Return what the store's role lacks of beat's work (``None``: SQLite, no roles)."""
    name = db.dialect.name
    if name == "postgresql":
        return _postgres(db)
    if name in ("mysql", "mariadb"):
        return _mysql(db)
    return None


def _postgres(db: Database) -> RoleFacts:
    pairs = needed(postgres=True)
    columns = ", ".join(
        f"has_{'sequence' if table.endswith('_seq') else 'table'}_privilege("
        f"to_regclass(:t{i}), :p{i}) AS c{i}"
        for i, (table, _) in enumerate(pairs)
    )
    params: dict[str, str] = {}
    for i, (table, privilege) in enumerate(pairs):
        params[f"t{i}"], params[f"p{i}"] = table, privilege
    with db.engine.connect() as conn:
        row = conn.execute(sa.text(f"SELECT current_user AS role, {columns}"), params).one()
    # NULL: no such table or sequence (an identity column has none): nothing to lack.
    missing = tuple(p for i, p in enumerate(pairs) if row[i + 1] is False)
    not_owned = tuple(t.name for t in table_stats(db) if not t.allowed)
    return RoleFacts(str(row.role), not_owned, missing)


def _mysql(db: Database) -> RoleFacts:
    with db.engine.connect() as conn:
        role = str(conn.exec_driver_sql("SELECT CURRENT_USER()").scalar_one())
        held = conn.execute(_MYSQL_HELD).all()
    everywhere = {str(r.privilege).upper() for r in held if r.name is None}
    on_table = {(str(r.name), str(r.privilege).upper()) for r in held if r.name is not None}
    missing = tuple(
        (table, privilege)
        for table, privilege in needed(postgres=False)
        if privilege not in everywhere
        and "ALL PRIVILEGES" not in everywhere
        and (table, privilege) not in on_table
    )
    return RoleFacts(role, (), missing)
