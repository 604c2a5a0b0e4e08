"""Schema versioning through the package's own Alembic migrations."""

from __future__ import annotations

import logging
from pathlib import Path

import sqlalchemy as sa
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from celery_cronstore.errors import SchemaVersionError
from celery_cronstore.store.schema import VERSION_TABLE

__all__ = ["check_schema", "current_revision", "fix", "head_revision", "upgrade"]

_MIGRATIONS = Path(__file__).with_name("migrations")


def fix(app_name: str | None = None) -> str:
    """Return the command that creates or upgrades the schema, naming the app if known."""
    return f"run `celery -A {app_name or '<app>'} cronstore migrate` (or Store.upgrade())"


def _config(conn: sa.Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    if conn is not None:
        config.attributes["connection"] = conn
    return config


def head_revision() -> str:
    """Return the newest schema revision this release ships."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    if head is None:  # pragma: no cover - the package always ships migrations
        raise SchemaVersionError("no migrations found in the package")
    return head


def current_revision(conn: sa.Connection) -> str | None:
    """Return the schema revision recorded in the database (``None``: no schema)."""
    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def upgrade(engine: sa.Engine, revision: str = "head", *, downgrade: bool = False) -> None:
    """Apply the package's migrations up to ``revision`` (or down to it)."""
    from alembic import command

    # Alembic logs its dialect banner at INFO on every start; beat logs at INFO too.
    logging.getLogger("alembic").setLevel(logging.WARNING)

    with engine.begin() as conn:
        (command.downgrade if downgrade else command.upgrade)(_config(conn), revision)


def check_schema(engine: sa.Engine, app_name: str | None = None) -> None:
    """Raise :class:`SchemaVersionError` unless the schema is at this release's head.

    A SQLite file that does not exist is reported as such, without creating it (a
    connection would leave an empty database file behind).
    """
    todo = fix(app_name)
    path = engine.url.database
    sqlite_file = engine.dialect.name == "sqlite" and path not in (None, "", ":memory:")
    if sqlite_file and not Path(str(path)).exists():
        raise SchemaVersionError(f"the store's database file {path} does not exist: {todo}")
    with engine.connect() as conn:
        current = current_revision(conn)
    head = head_revision()
    if current == head:
        return
    if current is None:
        raise SchemaVersionError(f"the cronstore tables do not exist yet: {todo}")
    known = {script.revision for script in ScriptDirectory.from_config(_config()).walk_revisions()}
    if current in known:
        raise SchemaVersionError(
            f"the cronstore schema is at revision {current}, this release needs {head}: {todo}"
        )
    raise SchemaVersionError(
        f"the cronstore schema is at revision {current}, which this release does not know "
        f"(newest known: {head}); upgrade celery-cronstore on this host"
    )
