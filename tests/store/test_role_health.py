"""``cronstore health`` says what of beat's housekeeping its database role cannot do.

A managed database (docs/production-databases.md, "On managed roles"): a fresh database
whose tables an owner role migrates, and an application role with only the documented
row privileges (the union of docs/security.md's beat and worker grants) and provider
timeouts set on the role. :func:`managed_database` builds one (also for
``tests/e2e/test_managed_role.py``); the tests here run ``health`` on the owner and on
application roles with fewer grants, and check the lines and that the exit status stays
the heartbeats'.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner, Result
from test_db_permissions import BEAT_GRANTS

from celery_cronstore.cli.group import cronstore
from celery_cronstore.store import Claimer, Store

#: The application role's grants: docs/security.md's beat grants (the worker's are a
#: subset of them), so one role runs beat, workers and the CLI's edits.
APP_GRANTS = BEAT_GRANTS
PG_SEQUENCES = (
    "cronstore_periodic_task_id_seq",
    "cronstore_fire_id_seq",
    "cronstore_alert_id_seq",
    "cronstore_audit_id_seq",
)
#: What a provider sets on the role (PostgreSQL ``ALTER ROLE ... SET``; MariaDB has the
#: per-account ``MAX_STATEMENT_TIME`` only).
PG_ROLE_SETTINGS = {"statement_timeout": "5s", "idle_in_transaction_session_timeout": "10s"}
#: The MariaDB account's ``MAX_STATEMENT_TIME`` (seconds).
MYSQL_STATEMENT_TIME = 5.0
MYSQL_HOSTS = ("%", "localhost", "127.0.0.1")
#: How health's role lines start (``policy.roles``).
ROLE_KINDS = ("scheduling: ", "prune: ", "vacuum: ")


@dataclass(frozen=True)
class Managed:
    """A managed database: its migrating owner's URL and the application role's."""

    owner_url: str
    app_url: str
    owner: str
    app: str
    database: str


@contextmanager
def managed_database(
    admin_url: str, grants: dict[str, str] | None = None, *, sequences: bool = True
) -> Iterator[Managed]:
    """Create a database, its owner (which migrates it) and an application role with
    ``grants`` (default :data:`APP_GRANTS`); drop them all on leaving.

    PostgreSQL: the owner role owns the database, so its ``public`` schema (PostgreSQL
    15's ``pg_database_owner``) and every table the migration makes; it grants the
    application role its rows, which gets neither ownership nor ``CREATE`` on the schema,
    and the provider timeouts :data:`PG_ROLE_SETTINGS`. MariaDB: no ownership; the owner
    account gets the DDL privileges docs/security.md names for migrate, the application
    account only the table grants (given by the admin) and a ``MAX_STATEMENT_TIME``.
    """
    grants = APP_GRANTS if grants is None else grants
    url = sa.make_url(admin_url)
    suffix = uuid.uuid4().hex[:8]
    owner, app, database = f"cs_own_{suffix}", f"cs_app_{suffix}", f"cs_managed_{suffix}"
    postgres = url.get_backend_name() == "postgresql"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    owner_url = url.set(username=owner, password=None, database=database)
    app_url = url.set(username=app, password=None, database=database)
    try:
        with admin.connect() as conn:
            if postgres:
                _pg_create(conn, owner, app, database)
            else:
                _mysql_create(conn, owner, app, database)
        store = Store(owner_url.render_as_string(hide_password=False))
        try:
            store.upgrade()  # by the owner
            if postgres:
                with store.begin() as conn:  # the owner grants its tables' rows
                    _pg_grant(conn, app, grants, sequences=sequences)
            else:
                with admin.connect() as conn:  # no owner: the admin grants
                    _mysql_grant(conn, app, database, grants)
        finally:
            store.close()
        yield Managed(
            owner_url.render_as_string(hide_password=False),
            app_url.render_as_string(hide_password=False),
            owner,
            app,
            database,
        )
    finally:
        with admin.connect() as conn:
            if postgres:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
                conn.exec_driver_sql(f"DROP ROLE IF EXISTS {app}")
                conn.exec_driver_sql(f"DROP ROLE IF EXISTS {owner}")
            else:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {database}")
                for user in (owner, app):
                    for host in MYSQL_HOSTS:
                        conn.exec_driver_sql("DROP USER IF EXISTS %s@%s", (user, host))
        admin.dispose()


def _pg_create(conn: sa.Connection, owner: str, app: str, database: str) -> None:
    conn.exec_driver_sql(f"CREATE ROLE {owner} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
    conn.exec_driver_sql(f"CREATE ROLE {app} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
    for name, value in PG_ROLE_SETTINGS.items():
        conn.exec_driver_sql(f"ALTER ROLE {app} SET {name} = '{value}'")
    conn.exec_driver_sql(f"CREATE DATABASE {database} OWNER {owner}")


def _pg_grant(conn: sa.Connection, app: str, grants: dict[str, str], *, sequences: bool) -> None:
    conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA public TO {app}")
    for table, privileges in grants.items():
        conn.exec_driver_sql(f"GRANT {privileges} ON {table} TO {app}")
    if sequences:
        conn.exec_driver_sql(f"GRANT USAGE ON SEQUENCE {', '.join(PG_SEQUENCES)} TO {app}")


def _mysql_create(conn: sa.Connection, owner: str, app: str, database: str) -> None:
    conn.exec_driver_sql(f"CREATE DATABASE {database}")
    ddl = "CREATE, ALTER, DROP, INDEX, REFERENCES, TRIGGER, SELECT, INSERT, UPDATE, DELETE"
    for host in MYSQL_HOSTS:
        conn.exec_driver_sql("CREATE USER %s@%s", (owner, host))
        conn.exec_driver_sql(f"GRANT {ddl} ON {database}.* TO %s@%s", (owner, host))
        conn.exec_driver_sql(
            f"CREATE USER %s@%s WITH MAX_STATEMENT_TIME {MYSQL_STATEMENT_TIME:g}", (app, host)
        )


def _mysql_grant(conn: sa.Connection, app: str, database: str, grants: dict[str, str]) -> None:
    for host in MYSQL_HOSTS:
        for table, privileges in grants.items():
            conn.exec_driver_sql(f"GRANT {privileges} ON {database}.{table} TO %s@%s", (app, host))


# -- the tests --------------------------------------------------------------------------


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ]
)
def admin_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


def health(url: str, *args: str) -> Result:
    """Run ``cronstore health`` in-process on a store at ``url``."""
    app = Celery(f"role-{uuid.uuid4().hex[:6]}", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = url
    result = CliRunner().invoke(
        cronstore, [*args, "health"], obj=CLIContext(app=app, no_color=True, workdir=None)
    )
    assert "Traceback" not in result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"health raised {result.exception!r}\n{result.output}")
    return result


def role_lines(output: str) -> list[str]:
    """The lines of health's output that say what the role cannot do (other lines, such
    as how beat reaches the database, are not this file's business)."""
    return [line for line in output.splitlines() if line.startswith(ROLE_KINDS)]


def tick(url: str) -> None:
    """Write a beat heartbeat through ``url``'s role (health is then healthy)."""
    store = Store(url)
    try:
        Claimer(store, "managed-beat").heartbeat(store.now())
    finally:
        store.close()


def test_health_names_the_housekeeping_a_dml_only_role_cannot_do(admin_url: str) -> None:
    postgres = admin_url.startswith("postgresql")
    with managed_database(admin_url) as managed:
        tick(managed.app_url)  # the application role can write heartbeats

        owner = health(managed.owner_url)
        assert owner.exit_code == 0, owner.output
        assert owner.output.startswith("healthy: beat managed-beat")
        assert role_lines(owner.output) == []
        got = json.loads(health(managed.owner_url, "--json").output)
        assert got["role"]["warnings"] == []

        app = health(managed.app_url)
        assert app.exit_code == 0, app.output  # informational: the exit status is the beats'
        assert app.output.startswith("healthy: beat managed-beat")
        notes = role_lines(app.output)
        if postgres:  # the owner owns the tables: the application role may not VACUUM
            assert notes == [
                f"vacuum: role {managed.app} is not the owner of cronstore_periodic_task, "
                "cronstore_fire; beat cannot VACUUM them (autovacuum or the owner must): "
                "see docs/production-databases.md#on-managed-roles"
            ]
        else:  # no ownership on MariaDB: every grant beat needs is there
            assert notes == []
        got = json.loads(health(managed.app_url, "--json").output)
        assert got["healthy"] is True
        assert got["role"]["missing"] == []
        assert got["role"]["breaks_scheduling"] is False
        expected = ["cronstore_periodic_task", "cronstore_fire"] if postgres else []
        assert got["role"]["not_owned"] == expected


def test_health_names_a_missing_delete_and_a_missing_insert(admin_url: str) -> None:
    """A role without DELETE on the ledger cannot prune it; without INSERT it cannot
    claim. Both are said; the exit status stays the heartbeats' and the backlog's."""
    grants = {**APP_GRANTS, "cronstore_fire": "SELECT, UPDATE", "cronstore_audit": "SELECT"}
    with managed_database(admin_url, grants) as managed:
        tick(managed.owner_url)
        result = health(managed.app_url)
        assert result.exit_code == 0, result.output
        text = result.output
        assert f"scheduling: role {managed.app}" in text  # MariaDB: user@host
        assert " lacks INSERT on cronstore_fire; a beat with this role cannot claim" in text
        assert "nothing fires" in text
        assert "prune: role" in text
        assert "DELETE on cronstore_fire, cronstore_audit; beat cannot prune the fire " in text
        got = json.loads(health(managed.app_url, "--json").output)
        assert got["role"]["breaks_scheduling"] is True
        assert ["cronstore_fire", "DELETE"] in got["role"]["missing"]


def test_an_unhealthy_store_says_the_role_lines_after_the_reason(admin_url: str) -> None:
    with managed_database(admin_url, {**APP_GRANTS, "cronstore_fire": "SELECT"}) as managed:
        result = health(managed.app_url)  # no beat ever ticked
        assert result.exit_code == 1
        assert result.stderr.startswith("Error: unhealthy: no beat has ever ticked")
        kinds = [line.split(":")[0] for line in role_lines(result.stderr)]
        postgres = admin_url.startswith("postgresql")
        assert kinds == ["scheduling", "prune", *(["vacuum"] if postgres else [])]
