"""PostgreSQL: wake beat when a task falls due sooner; vacuum the hot tables' indexes.

Revision ID: 0005
Revises: 0004

A no-op on SQLite and MariaDB (beat keeps polling there).

**Wake on change.** Beat LISTENs on the channel ``cronstore_changed`` and sleeps on that
socket instead of polling (``cronstore_listen``). Two triggers on
``cronstore_periodic_task`` send the notification, whoever makes the change (the API, the
CLI, the dashboard, Django's admin, raw SQL):

- after every INSERT statement (one notification per statement, whatever its row count);
- after an UPDATE of a row that can now fall due *sooner* than beat planned: it is
  enabled, has a next run, and was disabled, had none, or had a later one. The re-plan
  trigger (0001/0002) runs before it, so a raw-SQL edit of a timer (next run reset to
  the epoch) counts.

Nothing else notifies: beat's own claims only move ``next_run`` later (or to NULL), a
worker's start writes ``last_run``, and a DELETE or a disable can only make beat's next
look later than it planned. So replicas do not wake each other on every claim, and an
idle beat is woken only by edits that need it. PostgreSQL sends one notification per
transaction for identical ones, so a bulk edit costs beat one wake.

**Index cleanup.** PostgreSQL 14+ skips index vacuuming when few heap pages hold dead
rows (``vacuum_index_cleanup = auto``): the due index of ``cronstore_periodic_task``
(every fire moves a row's ``next_run``, which is indexed, so those updates are never HOT)
then bloats until beat's idle look reads a thousand index pages instead of a few.
``vacuum_index_cleanup = on`` for both hot tables; the periodic tasks are vacuumed and
analyzed after 1% / 2% of their rows changed; ``fillfactor = 90`` leaves room on each page
for the updates that touch no indexed column (a worker's ``last_run``) to stay HOT
(pages written from now on).
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_TABLE = "cronstore_periodic_task"
_FUNCTION = "cronstore_notify_changed"
_ON_INSERT = "cronstore_periodic_task_notify_insert"
_ON_SOONER = "cronstore_periodic_task_notify_sooner"
_SOONER = (
    "NEW.enabled AND NEW.next_run IS NOT NULL AND ("
    "NOT OLD.enabled OR OLD.next_run IS NULL OR NEW.next_run < OLD.next_run)"
)
_TASK_OPTIONS = (
    "autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02, fillfactor = 90"
)
_TASK_RESET = "autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor, fillfactor"


def _postgresql() -> bool:
    return bool(op.get_bind().dialect.name == "postgresql")


def _index_cleanup() -> bool:
    """Whether the server has the ``vacuum_index_cleanup`` table option (PostgreSQL 12+)
    with its ``auto`` default (14+) that skips the cleanup."""
    version = op.get_bind().exec_driver_sql("SHOW server_version_num").scalar_one()
    return int(version) >= 140000


def upgrade() -> None:
    if not _postgresql():
        return
    op.execute(
        f"""CREATE OR REPLACE FUNCTION {_FUNCTION}() RETURNS trigger AS $$
BEGIN
  PERFORM pg_notify('cronstore_changed', '');
  RETURN NULL;
END $$ LANGUAGE plpgsql"""
    )
    op.execute(
        f"CREATE TRIGGER {_ON_INSERT} AFTER INSERT ON {_TABLE}"
        f" FOR EACH STATEMENT EXECUTE FUNCTION {_FUNCTION}()"
    )
    op.execute(
        f"CREATE TRIGGER {_ON_SOONER} AFTER UPDATE ON {_TABLE}"
        f" FOR EACH ROW WHEN ({_SOONER}) EXECUTE FUNCTION {_FUNCTION}()"
    )
    op.execute(f"ALTER TABLE {_TABLE} SET ({_TASK_OPTIONS})")
    if _index_cleanup():
        for table in (_TABLE, "cronstore_fire"):
            op.execute(f"ALTER TABLE {table} SET (vacuum_index_cleanup = on)")


def downgrade() -> None:
    if not _postgresql():
        return
    if _index_cleanup():
        for table in (_TABLE, "cronstore_fire"):
            op.execute(f"ALTER TABLE {table} RESET (vacuum_index_cleanup)")
    op.execute(f"ALTER TABLE {_TABLE} RESET ({_TASK_RESET})")
    op.execute(f"DROP TRIGGER IF EXISTS {_ON_SOONER} ON {_TABLE}")
    op.execute(f"DROP TRIGGER IF EXISTS {_ON_INSERT} ON {_TABLE}")
    op.execute(f"DROP FUNCTION IF EXISTS {_FUNCTION}()")
