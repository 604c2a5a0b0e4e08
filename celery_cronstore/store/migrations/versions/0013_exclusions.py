"""Exclusion calendars.

Revision ID: 0013
Revises: 0012

The ``cronstore_calendar`` table (a name, its days/spans/windows as a JSON list, a
country's or region's public holidays, a description) and
``cronstore_periodic_task.exclude``: the calendars a task skips, by name
(:mod:`celery_cronstore.policy.exclusions`). A new table and a plain ``ADD COLUMN``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from celery_cronstore.store.types import UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "cronstore_calendar",
        sa.Column("id", _BigId, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("entries", sa.Text, nullable=False, server_default="[]"),
        sa.Column("holidays", sa.String(16), nullable=True),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.UniqueConstraint("name", name="uq_cronstore_calendar_name"),
    )
    op.add_column("cronstore_periodic_task", sa.Column("exclude", sa.String(500), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cronstore_periodic_task") as table:
        table.drop_column("exclude")
    op.drop_table("cronstore_calendar")
