"""A per-task policy for fires whose worker went silent; the ledger counts their re-runs.

Revision ID: 0006
Revises: 0005

- ``cronstore_periodic_task.abandon_policy`` (``leave`` or ``rerun``, default ``leave``):
  what beat does with a started fire whose worker stopped heartbeating for
  ``cronstore_abandon_after`` seconds. ``leave`` records it ``abandoned`` (as before this
  revision, so existing rows keep their behaviour); ``rerun`` publishes it again, once,
  under the same task id, when the rule in ``policy/abandon.py`` allows it.
- ``cronstore_fire.reruns`` (default 0): how many times the fire was published again that
  way, so a re-run that is abandoned in turn is never re-run a second time, and the
  worker's end-of-run records are fenced on the run they belong to.

Both are plain ``ADD COLUMN`` with a constant default: no table rewrite on PostgreSQL 11+
or MariaDB 10.3+, and SQLite adds them in place (no batch copy, so the re-plan trigger
of 0001/0002 stays). The downgrade drops both (SQLite 3.35+ drops a column in place).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "cronstore_periodic_task",
        sa.Column("abandon_policy", sa.String(16), nullable=False, server_default="leave"),
    )
    op.add_column(
        "cronstore_fire",
        sa.Column("reruns", sa.Integer, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_column("cronstore_fire", "reruns")
    op.drop_column("cronstore_periodic_task", "abandon_policy")
