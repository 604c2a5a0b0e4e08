"""Re-plan rows in error when raw SQL fixes them; exact text comparison on MySQL/MariaDB.

Revision ID: 0002
Revises: 0001

- The re-plan trigger also fires when a row that beat put in error is edited without the
  store API (its task, args, kwargs or options change, or its ``error`` is cleared): the
  row gets ``next_run = 1970-01-01`` ("plan me") and beat checks it again on its next
  tick, clearing the error or putting it back with the reason.
- MySQL/MariaDB: the tables move to ``utf8mb4`` with a binary, no-pad collation, so names
  are compared exactly as on PostgreSQL and SQLite (``'a'``, ``'A'`` and ``'a '`` are
  three different tasks) and any Unicode text (emoji included) can be stored.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_TABLES = ("cronstore_periodic_task", "cronstore_fire", "cronstore_beat")
_TABLE = "cronstore_periodic_task"
_TRIGGER = "cronstore_periodic_task_replan"
_EPOCH = "1970-01-01 00:00:00"

_TIMER_CHANGED = (
    "({n}.timer_kind {ne} {o}.timer_kind OR {n}.timer {ne} {o}.timer"
    " OR {n}.tz {ne} {o}.tz OR {n}.enabled {ne} {o}.enabled)"
)
_ERROR_FIXED = (
    "({o}.error IS NOT NULL AND ({n}.error IS NULL OR {n}.task {ne} {o}.task"
    " OR {n}.args {ne} {o}.args OR {n}.kwargs {ne} {o}.kwargs"
    " OR {n}.options {ne} {o}.options))"
)


def _triggers(dialect: str, *, fixed_errors: bool) -> list[str]:
    """Return the statements creating the re-plan trigger (0001's when not ``fixed_errors``)."""
    ne = {"postgresql": "IS DISTINCT FROM", "sqlite": "IS NOT"}.get(dialect, "<>")
    changed = _TIMER_CHANGED
    if fixed_errors:
        changed = f"({_TIMER_CHANGED} OR {_ERROR_FIXED})"
    changed = changed.format(n="NEW", o="OLD", ne=ne)
    if dialect == "postgresql":
        return [
            f"""CREATE OR REPLACE FUNCTION {_TRIGGER}() RETURNS trigger AS $$
BEGIN
  IF {changed} AND NEW.version = OLD.version THEN
    NEW.next_run := TIMESTAMP '{_EPOCH}';
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql"""
        ]
    if dialect in ("mysql", "mariadb"):
        return [
            f"DROP TRIGGER IF EXISTS {_TRIGGER}",
            f"""CREATE TRIGGER {_TRIGGER} BEFORE UPDATE ON {_TABLE}
FOR EACH ROW IF {changed} AND NEW.version = OLD.version THEN
  SET NEW.next_run = '{_EPOCH}';
END IF""",
        ]
    if dialect == "sqlite":
        return [
            f"DROP TRIGGER IF EXISTS {_TRIGGER}",
            f"""CREATE TRIGGER {_TRIGGER} AFTER UPDATE ON {_TABLE}
FOR EACH ROW WHEN {changed} AND NEW.version = OLD.version
BEGIN
  UPDATE {_TABLE} SET next_run = '{_EPOCH}.000000' WHERE id = NEW.id;
END""",
        ]
    return []


def _binary_collation() -> str:
    version = str(op.get_bind().exec_driver_sql("SELECT VERSION()").scalar_one()).lower()
    if "mariadb" in version:
        return "utf8mb4_nopad_bin"  # MariaDB >= 10.2
    major = version.split(".")[0]
    return "utf8mb4_0900_bin" if major.isdigit() and int(major) >= 8 else "utf8mb4_bin"


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect in ("mysql", "mariadb"):
        collation = _binary_collation()
        for table in _TABLES:
            op.execute(f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 COLLATE {collation}")
    for statement in _triggers(dialect, fixed_errors=True):
        op.execute(statement)


def downgrade() -> None:
    # The character set stays utf8mb4: converting text back could lose characters.
    for statement in _triggers(op.get_bind().dialect.name, fixed_errors=False):
        op.execute(statement)
