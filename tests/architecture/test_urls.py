"""Messages for database URLs and drivers that will not work name the fix."""

from __future__ import annotations

import importlib.util

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import NoSuchModuleError

from celery_cronstore.store.urls import driver_hint, url_problem

SECRET = "s3cret-pw"


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///cronstore.sqlite",
        "sqlite:////var/lib/app/cronstore.sqlite",
        "sqlite://",
        "sqlite:///:memory:",
        f"postgresql+psycopg://app:{SECRET}@db:5432/app",
        f"mysql+pymysql://root:{SECRET}@127.0.0.1/test",
    ],
)
def test_good_urls_have_no_problem(url: str) -> None:
    assert url_problem(url) is None


@pytest.mark.parametrize("url", [f"postgres://app:{SECRET}@db/app", "postgres+psycopg://db/app"])
def test_postgres_scheme_names_the_sqlalchemy_one(url: str) -> None:
    # What SQLAlchemy itself says for it: a plugin name, not the fix.
    with pytest.raises(NoSuchModuleError):
        sa.create_engine(url)
    message = url_problem(url)
    assert message is not None
    assert "postgresql+psycopg://" in message
    assert "celery-cronstore[postgres]" in message
    assert SECRET not in message


def test_sqlite_url_with_a_host_says_how_many_slashes() -> None:
    message = url_problem("sqlite://var/demo/cronstore.sqlite")
    assert message == (
        "sqlite://var/... names a host, which SQLite has none of: write "
        "sqlite:///var/demo/cronstore.sqlite for a path relative to the working directory "
        "or sqlite:////absolute/path.sqlite"
    )


@pytest.mark.parametrize("url", ["", "   ", "cronstore.sqlite", f"app:{SECRET}@db/app"])
def test_url_without_scheme(url: str) -> None:
    message = url_problem(url)
    assert message is not None
    assert "sqlite:///cronstore.sqlite" in message
    assert SECRET not in message


def _import_error_of(url: str, module: str) -> ImportError:
    """Build an engine for ``url`` for real and return the ImportError SQLAlchemy raises."""
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here: nothing fails to import")
    with pytest.raises(ImportError) as caught:
        sa.create_engine(url)
    return caught.value


def test_psycopg2_url_gets_the_psycopg3_one() -> None:
    # Also what a bare postgresql:// means before SQLAlchemy 2.1 (psycopg2 its default).
    url = f"postgresql+psycopg2://app:{SECRET}@db/app"
    message = driver_hint(_import_error_of(url, "psycopg2"), url)
    assert message == (
        "postgresql+psycopg2:// needs the psycopg2 driver, which celery-cronstore does not "
        "install: "
        "write postgresql+psycopg://... instead and pip install 'celery-cronstore[postgres]'"
    )


def test_bare_mysql_url_wants_mysqlclient_and_the_hint_says_pymysql() -> None:
    url = f"mysql://root:{SECRET}@db/app"
    message = driver_hint(_import_error_of(url, "MySQLdb"), url)
    assert "write mysql+pymysql://..." in message
    assert "celery-cronstore[mysql]" in message
    assert SECRET not in message


@pytest.mark.parametrize(
    ("module", "extra"),
    [("psycopg", "postgres"), ("pymysql", "mysql"), ("redis", "redis"), ("packaging", "redis")],
)
def test_missing_module_names_the_extra(module: str, extra: str) -> None:
    exc = ModuleNotFoundError(f"No module named '{module}'", name=module)
    message = driver_hint(exc, f"redis://:{SECRET}@cache:6379/0")
    assert message.endswith(f"pip install 'celery-cronstore[{extra}]'")
    assert f"'{module}'" in message
    assert SECRET not in message


def test_unknown_module_and_plain_import_error() -> None:
    unknown = ModuleNotFoundError("No module named 'oracledb'", name="oracledb")
    assert driver_hint(unknown, "oracle+oracledb://db/x") == (
        "oracle+oracledb:// needs the Python module 'oracledb', which is not installed: "
        "pip install it"
    )
    # An ImportError without .name: the module is read from the message.
    plain = ImportError("No module named 'pymysql.cursors'")
    assert "celery-cronstore[mysql]" in driver_hint(plain, "mysql+pymysql://db/x")
