"""Pause with a note, and pause until.

Revision ID: 0012
Revises: 0011

Five columns on ``cronstore_periodic_task``, set while a task is paused
(:mod:`celery_cronstore.policy.pause`): ``paused_at``, ``paused_by``, ``paused_note``,
``paused_until`` (NULL: until resumed) and ``paused_resume`` (``skip`` or ``newest``:
what resuming does with the fires held back). Plain ``ADD COLUMN``\\ s: no task is paused.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from celery_cronstore.store.types import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_TABLE = "cronstore_periodic_task"


def upgrade() -> None:
    op.add_column(_TABLE, sa.Column("paused_at", UTCDateTime, nullable=True))
    op.add_column(_TABLE, sa.Column("paused_by", sa.String(200), nullable=True))
    op.add_column(_TABLE, sa.Column("paused_note", sa.Text, nullable=True))
    op.add_column(_TABLE, sa.Column("paused_until", UTCDateTime, nullable=True))
    op.add_column(
        _TABLE,
        sa.Column("paused_resume", sa.String(16), nullable=False, server_default="skip"),
    )


def downgrade() -> None:
    with op.batch_alter_table(_TABLE) as table:
        for column in ("paused_resume", "paused_until", "paused_note", "paused_by", "paused_at"):
            table.drop_column(column)
