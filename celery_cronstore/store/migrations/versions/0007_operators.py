"""What operators need: alert episodes, an audit trail, a failure's traceback, a dead man's
switch per task.

Revision ID: 0007
Revises: 0006

- ``cronstore_periodic_task.alert_after`` (text, NULL: the default
  ``cronstore_alert_after``): the task's dead man's switch, "N periods" or a duration
  (``3 periods``, ``6h``); see docs/alerts.md.
- ``cronstore_fire.detail`` (text, NULL): what a fire that ended badly left behind for the
  failures view: its traceback, bounded and with secrets scrubbed.
- ``cronstore_alert``: one row per alert episode of a task (``kind``: ``failing`` or
  ``silent``), from when it opened to when it was resolved, with its delivery state.
  ``open_key`` (``<task id>:<kind>`` while open, NULL once resolved) is unique: one open
  episode per task and kind, whichever beat opens it.
- ``cronstore_audit``: who changed what, from which window, when (kept as long as the
  ledger: ``cronstore_history_days``).

Plain ``ADD COLUMN`` and ``CREATE TABLE``: no table rewrite anywhere. The downgrade drops
them all.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from celery_cronstore.store.types import UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column("cronstore_periodic_task", sa.Column("alert_after", sa.String(32), nullable=True))
    op.add_column("cronstore_fire", sa.Column("detail", sa.Text, nullable=True))
    op.create_table(
        "cronstore_alert",
        sa.Column("id", _BigId, primary_key=True, autoincrement=True),
        sa.Column(
            "periodic_task_id",
            _BigId,
            sa.ForeignKey("cronstore_periodic_task.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("open_key", sa.String(64), nullable=True),
        sa.Column("opened_at", UTCDateTime, nullable=False),
        sa.Column("resolved_at", UTCDateTime, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("sent_at", UTCDateTime, nullable=True),
        sa.Column("resolve_sent_at", UTCDateTime, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at", UTCDateTime, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.UniqueConstraint("open_key", name="uq_cronstore_alert_open"),
        sa.Index("ix_cronstore_alert_task", "periodic_task_id", "opened_at"),
        sa.Index("ix_cronstore_alert_due", "next_attempt_at"),
    )
    op.create_table(
        "cronstore_audit",
        sa.Column("id", _BigId, primary_key=True, autoincrement=True),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("window", sa.String(16), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("task_name", sa.String(200), nullable=False),
        sa.Column("detail", sa.Text, nullable=True),
        sa.Index("ix_cronstore_audit_at", "at"),
        sa.Index("ix_cronstore_audit_task", "task_name", "at"),
    )


def downgrade() -> None:
    op.drop_table("cronstore_audit")
    op.drop_table("cronstore_alert")
    op.drop_column("cronstore_fire", "detail")
    op.drop_column("cronstore_periodic_task", "alert_after")
