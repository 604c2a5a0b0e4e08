"""Periodic tasks, the fire ledger, beat heartbeats and the raw-SQL re-plan trigger.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from celery_cronstore.store.types import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TABLE = "cronstore_periodic_task"
_TRIGGER = "cronstore_periodic_task_replan"
_EPOCH = "1970-01-01 00:00:00"

# When a row's timer, zone or enabled flag changes and the writer did not bump `version`
# (raw SQL, an admin tool; the store API always bumps it), the trigger resets next_run to
# the epoch, which tells beat "plan this row again" on its next tick.
_CHANGED = (
    "({n}.timer_kind {ne} {o}.timer_kind OR {n}.timer {ne} {o}.timer"
    " OR {n}.tz {ne} {o}.tz OR {n}.enabled {ne} {o}.enabled)"
)


def _triggers(dialect: str) -> list[str]:
    if dialect == "postgresql":
        changed = _CHANGED.format(n="NEW", o="OLD", ne="IS DISTINCT FROM")
        return [
            f"""CREATE FUNCTION {_TRIGGER}() RETURNS trigger AS $$
BEGIN
  IF {changed} AND NEW.version = OLD.version THEN
    NEW.next_run := TIMESTAMP '{_EPOCH}';
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql""",
            f"""CREATE TRIGGER {_TRIGGER} BEFORE UPDATE ON {_TABLE}
FOR EACH ROW EXECUTE FUNCTION {_TRIGGER}()""",
        ]
    if dialect in ("mysql", "mariadb"):
        changed = _CHANGED.format(n="NEW", o="OLD", ne="<>")
        return [
            f"""CREATE TRIGGER {_TRIGGER} BEFORE UPDATE ON {_TABLE}
FOR EACH ROW IF {changed} AND NEW.version = OLD.version THEN
  SET NEW.next_run = '{_EPOCH}';
END IF"""
        ]
    if dialect == "sqlite":
        changed = _CHANGED.format(n="NEW", o="OLD", ne="IS NOT")
        return [
            f"""CREATE TRIGGER {_TRIGGER} AFTER UPDATE ON {_TABLE}
FOR EACH ROW WHEN {changed} AND NEW.version = OLD.version
BEGIN
  UPDATE {_TABLE} SET next_run = '{_EPOCH}.000000' WHERE id = NEW.id;
END"""
        ]
    return []


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("id", _BigId, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("task", sa.String(200), nullable=False),
        sa.Column("args", sa.Text, nullable=False, server_default="[]"),
        sa.Column("kwargs", sa.Text, nullable=False, server_default="{}"),
        sa.Column("options", sa.Text, nullable=False, server_default="{}"),
        sa.Column("timer_kind", sa.String(16), nullable=False),
        sa.Column("timer", sa.String(500), nullable=False),
        sa.Column("tz", sa.String(64), nullable=False, server_default="UTC"),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("owner_type", sa.String(100), nullable=True),
        sa.Column("owner_id", sa.String(200), nullable=True),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("source", sa.String(16), nullable=False, server_default="api"),
        sa.Column("next_run", UTCDateTime, nullable=True, server_default=sa.text(f"'{_EPOCH}'")),
        sa.Column("last_fire", UTCDateTime, nullable=True),
        sa.Column("last_run", UTCDateTime, nullable=True),
        sa.Column("total_run_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("misfire_policy", sa.String(16), nullable=False, server_default="run_once"),
        sa.Column("misfire_limit", sa.Integer, nullable=False, server_default="100"),
        sa.Column("start_deadline", sa.Float, nullable=True),
        sa.Column("overlap_policy", sa.String(16), nullable=False, server_default="allow"),
        sa.Column("tolerance", sa.Float, nullable=True),
        sa.Column("max_retries", sa.Integer, nullable=False, server_default="0"),
        sa.Column("resume_state", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("version", sa.Integer, nullable=False, server_default="1"),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_cronstore_periodic_task_due", _TABLE, ["enabled", "next_run"])
    op.create_index("ix_cronstore_periodic_task_owner", _TABLE, ["owner_type", "owner_id"])
    op.create_index("ix_cronstore_periodic_task_task", _TABLE, ["task"])
    op.create_table(
        "cronstore_fire",
        sa.Column("id", _BigId, primary_key=True, autoincrement=True),
        sa.Column(
            "periodic_task_id",
            _BigId,
            sa.ForeignKey(f"{_TABLE}.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("fire_time", UTCDateTime, nullable=False),
        sa.Column("fire_until", UTCDateTime, nullable=True),
        sa.Column("fire_count", sa.Integer, nullable=False, server_default="1"),
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("claimed_by", sa.String(200), nullable=True),
        sa.Column("lease_until", UTCDateTime, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("claimed_at", UTCDateTime, nullable=True),
        sa.Column("published_at", UTCDateTime, nullable=True),
        sa.Column("started_at", UTCDateTime, nullable=True),
        sa.Column("finished_at", UTCDateTime, nullable=True),
        sa.Column("node", sa.String(200), nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("result", sa.Text, nullable=True),
        sa.UniqueConstraint("periodic_task_id", "fire_time", name="uq_cronstore_fire_task_time"),
        sa.UniqueConstraint("task_id", name="uq_cronstore_fire_task_id"),
    )
    op.create_index("ix_cronstore_fire_lease", "cronstore_fire", ["state", "lease_until"])
    op.create_table(
        "cronstore_beat",
        sa.Column("node", sa.String(200), primary_key=True),
        sa.Column("started_at", UTCDateTime, nullable=False),
        sa.Column("last_tick", UTCDateTime, nullable=False),
    )
    for statement in _triggers(op.get_bind().dialect.name):
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute(f"DROP TRIGGER IF EXISTS {_TRIGGER} ON {_TABLE}")
        op.execute(f"DROP FUNCTION IF EXISTS {_TRIGGER}()")
    elif dialect in ("mysql", "mariadb", "sqlite"):
        op.execute(f"DROP TRIGGER IF EXISTS {_TRIGGER}")
    op.drop_table("cronstore_beat")
    op.drop_table("cronstore_fire")
    op.drop_table(_TABLE)
