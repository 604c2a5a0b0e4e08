"""A task's jitter.

Revision ID: 0010
Revises: 0009

``cronstore_periodic_task.jitter`` (seconds, NULL: none): each fire is sent up to that
much after its nominal time, by a delay fixed per task and fire
(:mod:`celery_cronstore.policy.jitter`). A plain ``ADD COLUMN``: existing rows have none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("cronstore_periodic_task", sa.Column("jitter", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cronstore_periodic_task") as table:
        table.drop_column("jitter")
