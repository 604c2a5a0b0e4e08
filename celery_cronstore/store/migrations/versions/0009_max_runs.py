"""A bound on a task's fires.

Revision ID: 0009
Revises: 0008

``cronstore_periodic_task.max_runs`` (integer, NULL: no limit): once the task's run
count (``total_run_count``, scheduled fires sent) reaches it, beat plans no further fire
(``next_run`` NULL); raising it plans the task again. A plain ``ADD COLUMN``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("cronstore_periodic_task", sa.Column("max_runs", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cronstore_periodic_task") as table:
        table.drop_column("max_runs")
