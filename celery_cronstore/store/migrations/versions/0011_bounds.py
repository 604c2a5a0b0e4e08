"""Bounds on a task's schedule.

Revision ID: 0011
Revises: 0010

``cronstore_periodic_task.start_at`` and ``end_at`` (instants, NULL: unbounded): no fire
before the first, none after the second (:mod:`celery_cronstore.policy.bounds`). Plain
``ADD COLUMN``\\ s: existing rows are unbounded.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from celery_cronstore.store.types import UTCDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("cronstore_periodic_task", sa.Column("start_at", UTCDateTime, nullable=True))
    op.add_column("cronstore_periodic_task", sa.Column("end_at", UTCDateTime, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cronstore_periodic_task") as table:
        table.drop_column("end_at")
        table.drop_column("start_at")
