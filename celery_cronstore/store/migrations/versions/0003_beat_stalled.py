"""Beats record since when they have due fires they cannot claim or publish.

Revision ID: 0003
Revises: 0002

``cronstore_beat.stalled_since``: set by a beat that ticks but has due work it cannot do
(every due row locked by another process, or the broker refusing its messages), cleared
once it claims or publishes again. ``cronstore health`` reports a beat stalled for longer
than the lease as unhealthy. ``cronstore_beat.clock_offset``: the beat host's clock minus
the database's, in seconds, at its last heartbeat (``health`` shows it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from celery_cronstore.store.types import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("cronstore_beat") as table:
        table.add_column(sa.Column("stalled_since", UTCDateTime, nullable=True))
        table.add_column(sa.Column("clock_offset", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cronstore_beat") as table:
        table.drop_column("clock_offset")
        table.drop_column("stalled_since")
