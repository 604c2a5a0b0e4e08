"""The Django integration against real databases: URLs from DATABASES, owner ties.

Django is configured once per process, by ``django_setup.configure()`` (shared with the
admin tests): SQLite as ``default``, plus ``postgres`` and ``mysql`` aliases on the scratch
databases of conftest.py when those servers are up. The models of these tests belong to
the app ``django_setup`` installs (so that Django sees the foreign key and cascades); they
are declared once Django is set up and their tables are created with the schema editor.
The store lives in the same database as the app tables, as in a real project, but
through its own SQLAlchemy engine built from ``store_url_from_django(alias)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from conftest import MYSQL_URL, POSTGRES_URL, need_service
from django_setup import APP, configure

from celery_cronstore.contrib import sweep_orphans
from celery_cronstore.contrib.django import (
    owner_of,
    store_url_from_django,
    tie_owner,
    url_from_settings,
)
from celery_cronstore.store import Store

# -- the URL mapping, as a table (no Django configuration needed) --------------------------

PG = "django.db.backends.postgresql"
MY = "django.db.backends.mysql"
LITE = "django.db.backends.sqlite3"

URL_CASES = [
    pytest.param(
        {"ENGINE": LITE, "NAME": Path("/srv/app/db.sqlite3")},
        {},
        "sqlite:////srv/app/db.sqlite3",
        id="sqlite-path",
    ),
    pytest.param(
        {"ENGINE": LITE, "NAME": "db.sqlite3"}, {}, "sqlite:///db.sqlite3", id="sqlite-rel"
    ),
    pytest.param({"ENGINE": LITE, "NAME": ":memory:"}, {}, "sqlite://", id="sqlite-memory"),
    pytest.param(
        {"ENGINE": LITE, "NAME": "file:memorydb_default?mode=memory&cache=shared"},
        {},
        "sqlite:///file:memorydb_default?mode=memory&cache=shared&uri=true",
        id="sqlite-test-uri",
    ),
    pytest.param(
        {
            "ENGINE": PG,
            "NAME": "app",
            "USER": "app",
            "PASSWORD": "p@ss:w/rd",
            "HOST": "db.example",
            "PORT": "5433",
            # Django's own keys (isolation_level, pool, server_side_binding) stay behind.
            "OPTIONS": {
                "sslmode": "require",
                "application_name": "web",
                "connect_timeout": 5,
                "isolation_level": 3,
                "pool": {"min_size": 2},
                "server_side_binding": True,
            },
        },
        {},
        "postgresql+psycopg://app:p%40ss%3Aw%2Frd@db.example:5433/app"
        "?application_name=web&connect_timeout=5&sslmode=require",
        id="postgres-full",
    ),
    pytest.param(
        {"ENGINE": PG, "NAME": "app", "USER": "app", "HOST": "/var/run/postgresql", "PORT": ""},
        {},
        "postgresql+psycopg://app@/app?host=%2Fvar%2Frun%2Fpostgresql",
        id="postgres-socket",
    ),
    pytest.param(
        {"ENGINE": PG, "NAME": "", "OPTIONS": {"service": "billing", "passfile": "/etc/pgpass"}},
        {},
        "postgresql+psycopg://?passfile=%2Fetc%2Fpgpass&service=billing",
        id="postgres-service",
    ),
    pytest.param(
        {"ENGINE": PG, "NAME": None, "HOST": "db", "PORT": 5432},
        {},
        "postgresql+psycopg://db:5432/postgres",
        id="postgres-name-none",
    ),
    pytest.param(
        {"ENGINE": "django.contrib.gis.db.backends.postgis", "NAME": "geo", "HOST": "db"},
        {},
        "postgresql+psycopg://db/geo",
        id="postgis",
    ),
    pytest.param(
        {"ENGINE": PG, "NAME": "app", "HOST": "db"},
        {"drivername": "postgresql+psycopg2"},
        "postgresql+psycopg2://db/app",
        id="postgres-driver-override",
    ),
    pytest.param(
        {
            "ENGINE": MY,
            "NAME": "app",
            "USER": "root",
            "PASSWORD": "pw",
            "HOST": "127.0.0.1",
            "PORT": 3306,
            "OPTIONS": {
                "charset": "utf8mb4",
                "init_command": "SET sql_mode='STRICT_TRANS_TABLES'",
                "isolation_level": "read committed",
                "ssl": {"ca": "/etc/ca.pem", "check_hostname": False, "unknown": "x"},
            },
        },
        {},
        "mysql+pymysql://root:pw@127.0.0.1:3306/app"
        "?charset=utf8mb4&ssl_ca=%2Fetc%2Fca.pem&ssl_check_hostname=False",
        id="mysql-full",
    ),
    pytest.param(
        {"ENGINE": MY, "NAME": "app", "USER": "app", "HOST": "/run/mysqld/mysqld.sock"},
        {},
        "mysql+pymysql://app@/app?unix_socket=%2Frun%2Fmysqld%2Fmysqld.sock",
        id="mysql-socket",
    ),
    pytest.param(
        {"ENGINE": MY, "NAME": "app", "HOST": "db"},
        {"drivername": "mariadb+pymysql"},
        "mariadb+pymysql://db/app",
        id="mariadb-driver-override",
    ),
]


@pytest.mark.parametrize(("db", "kwargs", "expected"), URL_CASES)
def test_url_from_settings_maps_each_setting(
    db: dict[str, Any], kwargs: dict[str, Any], expected: str
) -> None:
    assert url_from_settings(db, **kwargs) == expected


def test_driver_receives_the_mapped_options() -> None:
    """What reaches the DBAPI connect() call, not only the URL text."""
    mysql = sa.create_engine(
        url_from_settings(
            {
                "ENGINE": MY,
                "NAME": "app",
                "USER": "app",
                "PASSWORD": "s3cr:t@",
                "HOST": "/run/mysqld/mysqld.sock",
                "OPTIONS": {"charset": "utf8mb4", "ssl": {"ca": "/etc/ca.pem"}},
            }
        )
    )
    _, kwargs = mysql.dialect.create_connect_args(mysql.url)
    assert kwargs["password"] == "s3cr:t@"
    assert kwargs["unix_socket"] == "/run/mysqld/mysqld.sock"
    assert kwargs["ssl"] == {"ca": "/etc/ca.pem"}
    assert kwargs["charset"] == "utf8mb4"
    pg = sa.create_engine(
        url_from_settings(
            {
                "ENGINE": PG,
                "NAME": "app",
                "USER": "app",
                "HOST": "/var/run/postgresql",
                "OPTIONS": {"sslmode": "verify-full", "target_session_attrs": "read-write"},
            }
        )
    )
    _, kwargs = pg.dialect.create_connect_args(pg.url)
    assert {k: kwargs[k] for k in ("dbname", "user", "host", "sslmode")} == {
        "dbname": "app",
        "user": "app",
        "host": "/var/run/postgresql",
        "sslmode": "verify-full",
    }
    assert kwargs["target_session_attrs"] == "read-write"
    mysql.dispose()
    pg.dispose()


def test_bad_settings_are_named() -> None:
    with pytest.raises(
        ValueError, match=r"DATABASES\['default'\] ENGINE 'django.db.backends.oracle' has no"
    ):
        url_from_settings({"ENGINE": "django.db.backends.oracle", "NAME": "x"})
    with pytest.raises(ValueError, match=r"DATABASES\['replica'\] PORT must be a port number"):
        url_from_settings({"ENGINE": PG, "NAME": "x", "PORT": "fivefour"}, alias="replica")
    with pytest.raises(ValueError, match="PORT must be a port number, got 70000"):
        url_from_settings({"ENGINE": PG, "NAME": "x", "PORT": 70000})


# -- Django configured once for this module ---------------------------------------------------


@dataclass
class Env:
    """The configured Django: reachable aliases and the model classes."""

    aliases: set[str]
    channel: type[Any]
    mailbox: type[Any]
    archived: type[Any]


def _define_models() -> tuple[type[Any], type[Any], type[Any]]:
    # Models can only be declared once the app registry is ready (after django.setup()).
    from django.db import models

    class MailChannel(models.Model):
        name = models.CharField(max_length=50)

        class Meta:
            app_label = APP

    class Mailbox(models.Model):
        """Owned by a channel in the app (cascade), and itself the owner of tasks."""

        channel = models.ForeignKey(MailChannel, on_delete=models.CASCADE)
        address = models.CharField(max_length=100)

        class Meta:
            app_label = APP

    class ArchivedChannel(MailChannel):
        class Meta:
            app_label = APP
            proxy = True

    return MailChannel, Mailbox, ArchivedChannel


@pytest.fixture(scope="module")
def django_env(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    from django.db import connections

    databases = configure(request, tmp_path_factory)
    channel, mailbox, archived = _define_models()
    for alias in databases:
        with connections[alias].schema_editor() as editor:
            editor.create_model(channel)
            editor.create_model(mailbox)
    yield Env(set(databases), channel, mailbox, archived)
    for alias in databases:
        with connections[alias].schema_editor() as editor:
            editor.delete_model(mailbox)
            editor.delete_model(channel)
    connections.close_all()


@pytest.fixture(
    params=[
        pytest.param("default"),
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ]
)
def alias(request: pytest.FixtureRequest, django_env: Env) -> str:
    """A Django database alias (SQLite, PostgreSQL, MariaDB) with empty app tables."""
    from django.db import connections

    if request.param == "postgres":
        need_service("PostgreSQL", POSTGRES_URL, 5432)
    elif request.param == "mysql":
        need_service("MariaDB", MYSQL_URL, 3306)
    if request.param not in django_env.aliases:
        pytest.fail(f"{request.param} came up after Django was configured; rerun")
    with connections[request.param].cursor() as cursor:
        for model in (django_env.mailbox, django_env.channel):
            cursor.execute(f"DELETE FROM {model._meta.db_table}")
    return str(request.param)


@pytest.fixture
def db_url(alias: str) -> str:
    """The store's URL: ``store_url_from_django(alias)``, its tables emptied.

    Replaces conftest.py's ``db_url`` in this module, so the shared ``store`` fixture
    opens the project's own database.
    """
    url = store_url_from_django(alias)
    s = Store(url)
    try:
        with s.begin() as conn:
            for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
                conn.exec_driver_sql(f"DELETE FROM {table}")
    finally:
        s.close()
    return url


@pytest.fixture
def tie(store: Store, django_env: Env) -> Iterator[Callable[..., Callable[[], None]]]:
    unties: list[Callable[[], None]] = []

    def make(model: type[Any] | None = None, **kwargs: Any) -> Callable[[], None]:
        kwargs.setdefault("store", store)
        if model is None:
            model = django_env.channel
            kwargs.setdefault("owner_type", "mail_channel")
        untie = tie_owner(model, **kwargs)
        unties.append(untie)
        return untie

    yield make
    for untie in unties:
        untie()


def add_channels(env: Env, alias: str, *ids: int) -> None:
    env.channel.objects.using(alias).bulk_create(
        [env.channel(id=i, name=f"channel {i}") for i in ids]
    )


def schedule(store: Store, *ids: int) -> None:
    """Give each channel two tasks, and add one task of another owner type and one unowned."""
    for i in ids:
        store.add(f"poll-{i}", task="mail.poll", timer="*:0/5", owner=("mail_channel", i))
        store.add(f"purge-{i}", task="mail.purge", timer="daily", owner=("mail_channel", i))
    store.add("report-7", task="report", timer="hourly", owner=("user", 7))
    store.add("housekeeping", task="clean", timer="daily")


def names(store: Store) -> list[str]:
    return [t.name for t in store.list()]


def channel(env: Env, alias: str, pk: int) -> Any:
    return env.channel.objects.using(alias).get(pk=pk)


# -- the URL on a live Django configuration -----------------------------------------------------


def test_store_url_from_django_opens_the_projects_database(
    django_env: Env, alias: str, store: Store
) -> None:
    from django.db import connections

    store.add("poll-1", task="mail.poll", timer="*:0/5", owner=("mail_channel", 1))
    # The row the store wrote is in the database Django's own connection sees.
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT name, owner_id FROM cronstore_periodic_task")
        assert [tuple(row) for row in cursor.fetchall()] == [("poll-1", "1")]
    expected = {"default": "sqlite", "postgres": "postgresql", "mysql": "mysql"}[alias]
    assert store.engine.dialect.name == expected
    assert "p@" not in store.url


def test_unknown_alias_is_named(django_env: Env) -> None:
    with pytest.raises(ValueError, match="DATABASES has no alias 'replica' \\(configured: "):
        store_url_from_django("replica")


# -- owner ties ---------------------------------------------------------------------------------


def test_committed_delete_removes_only_that_owners_tasks(
    django_env: Env, alias: str, store: Store, tie: Callable[..., Any]
) -> None:
    tie()
    add_channels(django_env, alias, 1, 2)
    schedule(store, 1, 2)
    channel(django_env, alias, 1).delete()
    assert names(store) == ["housekeeping", "poll-2", "purge-2", "report-7"]


def test_rolled_back_delete_keeps_the_tasks(
    django_env: Env, alias: str, store: Store, tie: Callable[..., Any]
) -> None:
    from django.db import transaction

    tie()
    add_channels(django_env, alias, 1)
    schedule(store, 1)

    def failed_request() -> None:
        with transaction.atomic(using=alias):
            channel(django_env, alias, 1).delete()
            assert "poll-1" in names(store), "released before the commit"
            raise RuntimeError("request failed")

    with pytest.raises(RuntimeError, match="request failed"):
        failed_request()
    assert django_env.channel.objects.using(alias).filter(pk=1).exists()
    # A later commit on the same connection must not release the rolled-back owner.
    add_channels(django_env, alias, 9)
    channel(django_env, alias, 9).delete()
    assert "poll-1" in names(store)


def test_delete_in_a_rolled_back_savepoint_keeps_the_tasks(
    django_env: Env, alias: str, store: Store, tie: Callable[..., Any]
) -> None:
    from django.db import transaction

    tie()
    add_channels(django_env, alias, 1, 2)
    schedule(store, 1, 2)
    with transaction.atomic(using=alias):
        try:
            with transaction.atomic(using=alias):
                channel(django_env, alias, 1).delete()
                raise LookupError("undo channel 1")
        except LookupError:
            pass
        with transaction.atomic(using=alias):  # released savepoint: counts at commit
            channel(django_env, alias, 2).delete()
        assert "poll-2" in names(store), "released before the outermost commit"
    assert names(store) == ["housekeeping", "poll-1", "purge-1", "report-7"]


def test_queryset_delete_releases_every_deleted_owner(
    django_env: Env, alias: str, store: Store, tie: Callable[..., Any]
) -> None:
    tie()
    add_channels(django_env, alias, 1, 2, 3)
    schedule(store, 1, 2, 3)
    deleted, _ = django_env.channel.objects.using(alias).filter(pk__in=[1, 3]).delete()
    assert deleted == 2
    assert names(store) == ["housekeeping", "poll-2", "purge-2", "report-7"]


def test_django_cascade_releases_the_owned_rows_tasks_too(
    django_env: Env, alias: str, store: Store, tie: Callable[..., Any]
) -> None:
    tie()
    tie(django_env.mailbox, owner_type="mailbox")
    add_channels(django_env, alias, 1, 2)
    boxes = django_env.mailbox.objects.using(alias)
    ann = boxes.create(channel_id=1, address="ann@example.org")
    bob = boxes.create(channel_id=2, address="bob@example.org")
    store.add("fetch-ann", task="mail.fetch", timer="hourly", owner=owner_of(ann))
    store.add("fetch-bob", task="mail.fetch", timer="hourly", owner=owner_of(bob))
    channel(django_env, alias, 1).delete()  # on_delete=CASCADE removes ann's mailbox
    assert names(store) == ["fetch-bob"]


def test_on_delete_disable_keeps_disabled_tasks(
    django_env: Env, alias: str, store: Store, tie: Callable[..., Any]
) -> None:
    tie(on_delete="disable")
    add_channels(django_env, alias, 1, 2)
    schedule(store, 1, 2)
    channel(django_env, alias, 1).delete()
    enabled = {t.name: t.enabled for t in store.list(owner_type="mail_channel")}
    assert enabled == {"poll-1": False, "purge-1": False, "poll-2": True, "purge-2": True}
    assert store.get("poll-1").next_run is None


def test_owner_of_names_the_tied_type_and_the_primary_key(
    django_env: Env, alias: str, store: Store, tie: Callable[..., Any]
) -> None:
    add_channels(django_env, alias, 42)
    ch = channel(django_env, alias, 42)
    assert owner_of(ch) == (f"{APP}.mailchannel", "42"), "untied: app_label.modelname"
    tie()
    assert owner_of(ch) == ("mail_channel", "42")
    assert owner_of(ch, "other") == ("other", "42")
    archived = django_env.archived.objects.using(alias).get(pk=42)
    assert owner_of(archived) == ("mail_channel", "42"), "a proxy inherits the tie's type"
    with pytest.raises(ValueError, match="MailChannel instance has no primary key; save it"):
        owner_of(django_env.channel(name="unsaved"))


def test_default_owner_type_is_the_model_label(
    django_env: Env, alias: str, store: Store, tie: Callable[..., Any]
) -> None:
    tie(django_env.channel, owner_type=None)
    add_channels(django_env, alias, 5)
    ch = channel(django_env, alias, 5)
    store.add("poll-5", task="mail.poll", timer="*:0/5", owner=owner_of(ch))
    assert store.get("poll-5").owner == (f"{APP}.mailchannel", "5")
    ch.delete()
    assert names(store) == []


def test_proxy_deletes_need_their_own_tie(
    django_env: Env, alias: str, store: Store, tie: Callable[..., Any]
) -> None:
    tie()
    add_channels(django_env, alias, 1, 2)
    schedule(store, 1, 2)
    django_env.archived.objects.using(alias).get(pk=1).delete()
    assert "poll-1" in names(store), "Django sends post_delete with the proxy as sender"
    tie(django_env.archived, owner_type="mail_channel")
    django_env.archived.objects.using(alias).get(pk=2).delete()
    assert "poll-2" not in names(store)


def test_store_source_may_be_a_function_called_at_release(
    django_env: Env, alias: str, store: Store, tie: Callable[..., Any]
) -> None:
    calls: list[int] = []

    def lazy() -> Store:
        calls.append(1)
        return store

    tie(store=lazy)
    add_channels(django_env, alias, 1)
    schedule(store, 1)
    assert calls == []
    channel(django_env, alias, 1).delete()
    assert calls == [1]
    assert "poll-1" not in names(store)


def test_bad_arguments_are_refused(django_env: Env, tie: Callable[..., Any]) -> None:
    from django.db import models

    tie()
    with pytest.raises(ValueError, match="already tied to owner type 'mail_channel'"):
        tie()
    with pytest.raises(ValueError, match="on_delete must be 'remove' or 'disable', got 'drop'"):
        tie(django_env.mailbox, on_delete="drop")
    with pytest.raises(ValueError, match="owner_type must be a non-empty string, got ''"):
        tie(django_env.mailbox, owner_type="")
    with pytest.raises(TypeError, match="is not a Django model class"):
        tie(dict)

    class Base(models.Model):
        class Meta:
            app_label = APP
            abstract = True

    with pytest.raises(TypeError, match="Base is abstract"):
        tie(Base)


def test_untie_stops_releasing(
    django_env: Env, alias: str, store: Store, tie: Callable[..., Any]
) -> None:
    untie = tie()
    untie()
    untie()  # twice is harmless
    add_channels(django_env, alias, 1)
    schedule(store, 1)
    channel(django_env, alias, 1).delete()
    assert "poll-1" in names(store)


def test_store_failure_after_commit_is_logged_and_swept_later(
    django_env: Env,
    alias: str,
    store: Store,
    tie: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> Store:
        raise ConnectionError("store is down")

    tie(store=broken)
    add_channels(django_env, alias, 1, 2)
    schedule(store, 1, 2)
    with caplog.at_level(logging.ERROR, logger="celery_cronstore.contrib"):
        channel(django_env, alias, 1).delete()  # the application's delete still succeeds
    assert "run sweep_orphans() later" in caplog.text
    live = django_env.channel.objects.using(alias).values_list("pk", flat=True)
    assert list(live) == [2]
    assert "poll-1" in names(store)
    assert sweep_orphans(store, "mail_channel", live) == 2
    assert sweep_orphans(store, "mail_channel", live) == 0
    assert names(store) == ["housekeeping", "poll-2", "purge-2", "report-7"]


def test_update_and_raw_sql_are_not_seen(
    django_env: Env, alias: str, store: Store, tie: Callable[..., Any]
) -> None:
    from django.db import connections

    tie()
    add_channels(django_env, alias, 1)
    schedule(store, 1)
    with connections[alias].cursor() as cursor:
        cursor.execute(f"DELETE FROM {django_env.channel._meta.db_table}")
    assert "poll-1" in names(store), "raw SQL sends no signal (documented)"
    assert sweep_orphans(store, "mail_channel", []) == 2
