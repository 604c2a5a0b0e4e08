"""Schema versioning through the package's own Alembic migrations.

Migrations run under a database-wide migration lock, so several ``cronstore migrate`` at
once (one per replica, as Kubernetes init containers start) take turns: the first applies
the migrations, the others wait for it, then find the schema at the revision asked for
and do nothing. Without the lock two of them created the same table at the same instant
and one failed (PostgreSQL: "duplicate key value violates unique constraint
pg_type_typname_nsp_index"; MariaDB: "Table ... already exists").

- PostgreSQL: ``pg_advisory_xact_lock`` on the migration's own connection, taken as the
  migration's transaction begins and released by its commit (or rollback, or the
  connection's end: a killed migrator leaves no lock behind). The version row becomes
  visible at the same commit, so the next one reads it. The lock and the wait's limits
  (``set_config(..., true)``) live and die with that one transaction, so migrating
  through a transaction pooler (PgBouncer) leaves nothing on a server session another
  client gets next.
- MySQL/MariaDB: ``GET_LOCK`` on the migration's connection (named after the database:
  the lock is server-wide), released once the migrations are done. DDL commits by itself
  there, so the lock, not a transaction, is what keeps the next migrator out.
- SQLite: the migration runs in one ``BEGIN IMMEDIATE`` transaction, the file's write
  lock, waited for up to the same timeout.

A migrator waits at most :data:`MIGRATION_LOCK_TIMEOUT` seconds for the lock, then fails
with :class:`~celery_cronstore.errors.StoreError` naming the wait.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from celery_cronstore.errors import SchemaVersionError, StoreError
from celery_cronstore.store.schema import VERSION_TABLE
from celery_cronstore.store.sqlite import WRITE_OPTION

__all__ = [
    "MIGRATION_LOCK_TIMEOUT",
    "UNKNOWN_APP",
    "app_argument",
    "check_schema",
    "current_revision",
    "fix",
    "head_revision",
    "upgrade",
]

_MIGRATIONS = Path(__file__).with_name("migrations")

#: Seconds a migration waits for another one on the same database to finish. Long enough
#: for migration 0004's index on a ledger of millions of rows; a migrator that waited
#: this long fails and says so (its init container restarts and waits again).
MIGRATION_LOCK_TIMEOUT = 600.0

#: The advisory lock key (PostgreSQL locks are per database): a fixed 64-bit number of
#: our own, so no other application's advisory lock is taken by mistake.
_PG_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"celery_cronstore.migrate").digest()[:8], "big", signed=True
)
#: MySQL/MariaDB lock names are at most 64 characters and server-wide.
_LOCK_NAME_MAX = 64


#: What the migrate hint names when nobody said what ``-A`` was given.
UNKNOWN_APP = "<your -A module>"


def fix(app_name: str | None = None) -> str:
    """Return the command that creates or upgrades the schema, naming the ``-A`` module
    (``app_name``: what the operator typed) if known, else a placeholder. Never the
    app's own name (``Celery("...")``): that is often not importable."""
    return f"run `celery -A {app_name or UNKNOWN_APP} cronstore migrate` (or Store.upgrade())"


def app_argument(argv: Sequence[str] | None = None) -> str | None:
    """Return the ``-A``/``--app`` value this process was started with (``sys.argv``:
    ``celery -A proj beat``, ``celery --app=proj worker``), if any."""
    args = list(sys.argv if argv is None else argv)
    for i, arg in enumerate(args):
        if arg in ("-A", "--app") and i + 1 < len(args):
            return args[i + 1] or None
        if arg.startswith("--app="):
            return arg.split("=", 1)[1] or None
        if arg.startswith("-A") and len(arg) > 2:
            return arg[2:]
    return None


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


def upgrade(
    engine: sa.Engine,
    revision: str = "head",
    *,
    downgrade: bool = False,
    lock_timeout: float = MIGRATION_LOCK_TIMEOUT,
) -> None:
    """Apply the package's migrations up to ``revision`` (or down to it), holding the
    migration lock (see the module's docstring): concurrent callers take turns, and the
    later ones find nothing left to do.

    Raise :class:`StoreError` if the lock is not free within ``lock_timeout`` seconds.
    """
    from alembic import command

    if lock_timeout <= 0:
        raise ValueError(f"lock_timeout must be a positive number of seconds, got {lock_timeout!r}")
    # Alembic logs its dialect banner at INFO on every start; beat logs at INFO too.
    logging.getLogger("alembic").setLevel(logging.WARNING)

    with engine.connect() as conn, _migration_lock(conn, lock_timeout):
        (command.downgrade if downgrade else command.upgrade)(_config(conn), revision)


@contextmanager
def _migration_lock(conn: sa.Connection, timeout: float) -> Iterator[None]:
    """Hold the migration lock and a transaction on ``conn`` while the block runs (the
    transaction commits when the block ends without an error)."""
    name = conn.dialect.name
    if name == "postgresql":
        with conn.begin():
            _pg_lock(conn, timeout)
            yield
    elif name in ("mysql", "mariadb"):
        with _named_lock(conn, timeout), conn.begin():
            yield
    elif name == "sqlite":
        with _sqlite_wait(conn, timeout):
            try:
                transaction = conn.begin()  # BEGIN IMMEDIATE: waits for the write lock
            except (sa.exc.SQLAlchemyError, StoreError) as exc:
                if "locked" in str(exc):
                    raise _held_too_long(timeout, "database is locked") from exc
                raise
            with transaction:
                yield
    else:  # a dialect we do not test: its own transaction only
        with conn.begin():
            yield


def _held_too_long(timeout: float, detail: str) -> StoreError:
    return StoreError(
        f"another migration of this database held the migration lock for more than "
        f"{timeout:g} s ({detail}); try again once it is done"
    )


#: PostgreSQL's lock_not_available and query_canceled: the wait for the lock timed out.
_PG_WAIT_ENDED = ("55P03", "57014")


def _pg_lock(conn: sa.Connection, timeout: float) -> None:
    """Take the transaction-level advisory lock, waiting up to ``timeout`` seconds (the
    session's own lock and statement limits, if any, apply again after the wait)."""
    saved = conn.execute(
        sa.text("SELECT current_setting('lock_timeout'), current_setting('statement_timeout')")
    ).one()
    millis = str(max(1, int(timeout * 1000)))
    _pg_limits(conn, millis, millis)
    try:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
    except (sa.exc.SQLAlchemyError, StoreError) as exc:
        # The engine turns a lock or statement timeout into StoreUnavailableError; the
        # driver's error (its SQLSTATE) is in the chain either way.
        cause: BaseException | None = exc
        while cause is not None and getattr(cause, "sqlstate", None) is None:
            cause = getattr(cause, "orig", None) or cause.__cause__
        if getattr(cause, "sqlstate", None) in _PG_WAIT_ENDED:
            raise _held_too_long(timeout, str(cause).strip().splitlines()[0]) from exc
        raise
    _pg_limits(conn, str(saved[0]), str(saved[1]))


def _pg_limits(conn: sa.Connection, lock: str, statement: str) -> None:
    """Set the transaction's lock and statement timeouts (``SET LOCAL``)."""
    conn.execute(
        sa.text(
            "SELECT set_config('lock_timeout', :lock, true),"
            " set_config('statement_timeout', :statement, true)"
        ),
        {"lock": lock, "statement": statement},
    )


@contextmanager
def _named_lock(conn: sa.Connection, timeout: float) -> Iterator[None]:
    """Hold ``GET_LOCK`` (named after the database) on ``conn`` while the block runs."""
    database = str(conn.execute(sa.text("SELECT DATABASE()")).scalar_one())
    lock = f"cronstore-migrate:{database}"
    if len(lock) > _LOCK_NAME_MAX:
        lock = f"cronstore-migrate:{hashlib.sha256(database.encode()).hexdigest()[:40]}"
    got = conn.execute(
        sa.text("SELECT GET_LOCK(:name, :timeout)"), {"name": lock, "timeout": timeout}
    ).scalar()
    conn.commit()
    if got != 1:
        raise _held_too_long(timeout, f"GET_LOCK({lock!r}) returned {got!r}")
    try:
        yield
    finally:
        try:
            conn.rollback()  # a failed migration's transaction, if any, before the release
            conn.execute(sa.text("SELECT RELEASE_LOCK(:name)"), {"name": lock})
            conn.commit()
        except Exception:
            # The lock lives as long as the session: end the session rather than pool it.
            conn.invalidate()
            raise


@contextmanager
def _sqlite_wait(conn: sa.Connection, timeout: float) -> Iterator[None]:
    """Run the block's transaction as ``BEGIN IMMEDIATE`` (the file's write lock, so one
    migrator at a time), waiting up to ``timeout`` seconds for it."""
    raw = conn.connection.dbapi_connection
    if raw is None:  # pragma: no cover - a checked-out connection always has one
        raise StoreError("the SQLite connection is closed")
    saved = raw.execute("PRAGMA busy_timeout").fetchone()[0]
    raw.execute(f"PRAGMA busy_timeout = {max(1, int(timeout * 1000))}")
    conn.execution_options(**{WRITE_OPTION: True})
    try:
        yield
    finally:
        raw.execute(f"PRAGMA busy_timeout = {int(saved)}")


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
