"""Index what the overlap checks and the guard read; let PostgreSQL vacuum the ledger early.

Revision ID: 0004
Revises: 0003

``ix_cronstore_fire_task_state`` on ``cronstore_fire (periodic_task_id, state,
fire_time)``: beat's overlap check (``skip``: is a fire of this task claimed, started or
retrying?), the guard's (started or retrying?) and the pruner's (the oldest fire in
flight per task) each read a few index entries instead of walking the task's whole
history, which made a claim or a start cost seconds with ten million ledger rows. The
other reads of one task (its previous fire, a later fire that started, its history) use
the unique ``(periodic_task_id, fire_time)`` key; pruning walks the primary key. One
index, so claims, publishes and starts pay for one more entry and no more.

PostgreSQL: ``cronstore_fire`` is a queue-like table (rows inserted, updated a few
times, then pruned): vacuum and analyze it after 2% / 1% of its rows changed instead of
the default 20% / 10%, so dead rows from pruning are reclaimed and the planner's view of
the states stays fresh on a large ledger.

On a large ledger, building the index takes a while and (PostgreSQL, MariaDB) holds
writes to ``cronstore_fire`` until it is built: run ``cronstore migrate`` with beat
stopped, as for every release.
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_AUTOVACUUM = "autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.01"


def upgrade() -> None:
    op.create_index(
        "ix_cronstore_fire_task_state",
        "cronstore_fire",
        ["periodic_task_id", "state", "fire_time"],
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE cronstore_fire SET ({_AUTOVACUUM})")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE cronstore_fire RESET "
            "(autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor)"
        )
    op.drop_index("ix_cronstore_fire_task_state", table_name="cronstore_fire")
