"""Alembic environment for celery-cronstore's own tables (own version table)."""

from __future__ import annotations

from alembic import context

from celery_cronstore.store.schema import VERSION_TABLE, metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
