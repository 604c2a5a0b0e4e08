"""Beats say whether they fire.

Revision ID: 0008
Revises: 0007

``cronstore_beat.firing``: ``false`` for a beat started with firing off
(``cronstore_fire = False`` or ``CRONSTORE_FIRE=0``: it claims and publishes nothing),
so that ``cronstore health`` and the dashboard can say so; ``true`` or NULL (beats from
before this revision) for one that fires. A plain ``ADD COLUMN``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("cronstore_beat") as table:
        table.add_column(sa.Column("firing", sa.Boolean, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cronstore_beat") as table:
        table.drop_column("firing")
