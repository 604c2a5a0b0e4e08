"""Django integration: the store URL from ``DATABASES``, and tasks owned by model instances.

    # celery.py
    app.conf.cronstore_url = store_url_from_django()

    # apps.py, in AppConfig.ready()
    tie_owner(MailChannel, "mail_channel", store=get_store)

    # anywhere
    store.add("poll-42", task="mail.poll", timer="*:0/5", owner=owner_of(channel))
    channel.delete()   # once the transaction commits, poll-42 is removed

The tie listens to ``post_delete`` and defers the release with
``transaction.on_commit``: a delete that is rolled back (``atomic`` block, failed
request with ``ATOMIC_REQUESTS``, a rolled-back savepoint) releases nothing. The store has
its own connection, so the two commits are not atomic; a store failure after the commit is
logged and :func:`~celery_cronstore.contrib.sweep_orphans` repairs it. ``Model.delete()``,
``QuerySet.delete()`` and Django's ``on_delete=CASCADE`` send ``post_delete`` per object
and are covered (one short store transaction per deleted owner); ``QuerySet.update()``,
raw SQL and cascades done by the database itself are not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import PurePath
from typing import Any

from django.db import connections, transaction
from django.db.models import Model
from django.db.models.signals import post_delete
from sqlalchemy.engine import URL

from celery_cronstore.contrib import (
    OnDelete,
    StoreSource,
    check_on_delete,
    release_all,
    release_owner,
    sweep_orphans,
)

__all__ = [
    "OnDelete",
    "owner_of",
    "release_owner",
    "store_url_from_django",
    "sweep_orphans",
    "tie_owner",
    "url_from_settings",
]

#: Django ENGINE -> SQLAlchemy drivername (PostgreSQL through psycopg 3, MySQL through
#: PyMySQL: the drivers the package's ``postgres`` and ``mysql`` extras install).
ENGINES = {
    "django.db.backends.sqlite3": "sqlite",
    "django.contrib.gis.db.backends.spatialite": "sqlite",
    "django.db.backends.postgresql": "postgresql+psycopg",
    "django.contrib.gis.db.backends.postgis": "postgresql+psycopg",
    "django.db.backends.mysql": "mysql+pymysql",
    "django.contrib.gis.db.backends.mysql": "mysql+pymysql",
}

# OPTIONS entries that mean the same to the SQLAlchemy driver as to Django's; the others
# (pool, isolation_level, init_command, server_side_binding, ...) are Django's own, or
# driver objects, and are not carried over.
_OPTIONS = {
    "postgresql": frozenset(
        {
            "application_name",
            "channel_binding",
            "client_encoding",
            "connect_timeout",
            "gssencmode",
            "keepalives",
            "keepalives_count",
            "keepalives_idle",
            "keepalives_interval",
            "options",
            "passfile",
            "service",
            "sslcert",
            "sslcrl",
            "sslkey",
            "sslmode",
            "sslpassword",
            "sslrootcert",
            "target_session_attrs",
            "tcp_user_timeout",
        }
    ),
    "mysql": frozenset(
        {
            "charset",
            "connect_timeout",
            "read_default_file",
            "read_default_group",
            "read_timeout",
            "unix_socket",
            "write_timeout",
        }
    ),
    "sqlite": frozenset(),
}

# Django's (mysqlclient's) OPTIONS["ssl"] dict keys -> the PyMySQL dialect's query keys.
_MYSQL_SSL = {
    "ca": "ssl_ca",
    "cert": "ssl_cert",
    "key": "ssl_key",
    "capath": "ssl_capath",
    "cipher": "ssl_cipher",
    "check_hostname": "ssl_check_hostname",
}

_ties: dict[type[Any], str] = {}
_lock = threading.Lock()


def store_url_from_django(alias: str = "default", *, drivername: str | None = None) -> str:
    """Return a SQLAlchemy URL for the Django database ``alias`` (password included).

    Reads the live connection settings (``connections[alias].settings_dict``), so under
    Django's test runner it names the test database once that exists. See
    :func:`url_from_settings` for the mapping. The result contains the password: pass it
    on, never log it (``Store.url`` is the redacted form). Raise ``ValueError`` for an
    unknown alias or ENGINE.
    """
    if alias not in connections.settings:
        known = ", ".join(sorted(connections.settings))
        raise ValueError(f"DATABASES has no alias {alias!r} (configured: {known})")
    return url_from_settings(connections[alias].settings_dict, drivername=drivername, alias=alias)


def url_from_settings(
    db: Mapping[str, Any], *, drivername: str | None = None, alias: str = "default"
) -> str:
    """Return a SQLAlchemy URL for one ``DATABASES`` entry (a mapping; password included).

    Maps ``ENGINE``/``NAME``/``USER``/``PASSWORD``/``HOST``/``PORT`` and the driver-level
    ``OPTIONS`` (``sslmode``, ``charset``, the MySQL ``ssl`` dict, ...); a ``HOST``
    starting with ``/`` is a Unix socket directory (PostgreSQL) or socket file (MySQL).
    ``drivername`` overrides the driver (e.g. ``"postgresql+psycopg2"``); ``alias`` only
    names the entry in error messages. Raise ``ValueError`` for an unknown ENGINE or a
    non-numeric PORT.
    """
    engine = db.get("ENGINE") or ""
    driver = drivername or ENGINES.get(engine)
    if driver is None:
        known = ", ".join(sorted(ENGINES))
        raise ValueError(
            f"DATABASES[{alias!r}] ENGINE {engine!r} has no known SQLAlchemy driver "
            f"(known: {known}); pass drivername=... or set cronstore_url yourself"
        )
    backend = driver.split("+")[0]
    family = "mysql" if backend == "mariadb" else backend
    name = db.get("NAME")
    if isinstance(name, PurePath):
        name = str(name)
    if family == "sqlite":
        return _sqlite_url(driver, name or "")
    options: Mapping[str, Any] = db.get("OPTIONS") or {}
    query = {
        key: str(value)
        for key, value in options.items()
        if key in _OPTIONS.get(family, ()) and isinstance(value, (str, int))
    }
    if family == "mysql" and isinstance(options.get("ssl"), Mapping):
        for key, value in options["ssl"].items():
            if key in _MYSQL_SSL and isinstance(value, (str, int)):
                query[_MYSQL_SSL[key]] = str(value)
    host = db.get("HOST") or None
    if host is not None and host.startswith("/"):
        query["host" if family == "postgresql" else "unix_socket"] = host
        host = None
    if family == "postgresql" and name is None and "service" not in query:
        name = "postgres"  # as Django: NAME=None connects to the default database
    return URL.create(
        driver,
        username=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        host=host,
        port=_port(db.get("PORT"), alias),
        database=str(name) if name else None,
        query=query,
    ).render_as_string(hide_password=False)


def _port(value: Any, alias: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if not 0 < port < 65536:
        raise ValueError(f"DATABASES[{alias!r}] PORT must be a port number, got {value!r}")
    return port


def _sqlite_url(driver: str, name: str) -> str:
    if name in ("", ":memory:"):
        return f"{driver}://"
    if name.startswith("file:"):  # a URI filename (Django's in-memory test databases)
        return f"{driver}:///{name}{'&' if '?' in name else '?'}uri=true"
    return f"{driver}:///{name}"


def tie_owner(
    model: type[Any],
    owner_type: str | None = None,
    *,
    store: StoreSource,
    on_delete: OnDelete = "remove",
) -> Callable[[], None]:
    """Release an instance's periodic tasks once its deletion commits; return an untie.

    Instances own tasks as ``(owner_type, str(pk))`` -- :func:`owner_of` builds the pair.
    ``owner_type`` defaults to the model's ``app_label.modelname``. ``store`` may be a
    function returning the store, called at each release (return a cached store: the
    call at tie time opens no connection, so ``AppConfig.ready`` stays cheap).
    ``on_delete`` is ``"remove"`` or ``"disable"``. Proxy models send their own signals:
    tie each proxy that instances are deleted through. Multi-table children are covered
    by a tie on their parent (Django deletes the parent row too). Call it once per model,
    e.g. in ``AppConfig.ready()``; tying a model again is an error.
    """
    action = check_on_delete(on_delete)
    if not (isinstance(model, type) and issubclass(model, Model)):
        raise TypeError(f"{model!r} is not a Django model class")
    if model._meta.abstract:
        raise TypeError(
            f"{model.__name__} is abstract and is never deleted itself; tie its concrete models"
        )
    label = model._meta.label_lower
    kind = owner_type if owner_type is not None else label
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"owner_type must be a non-empty string, got {owner_type!r}")
    with _lock:
        if model in _ties:
            raise ValueError(f"{model.__name__} is already tied to owner type {_ties[model]!r}")
        _ties[model] = kind

    def on_post_delete(sender: Any, instance: Any, using: str, **_: Any) -> None:
        owners = [(kind, str(instance.pk))]
        transaction.on_commit(partial(release_all, store, owners, action), using=using)

    uid = f"celery_cronstore.tie_owner:{label}"
    post_delete.connect(on_post_delete, sender=model, weak=False, dispatch_uid=uid)

    def untie() -> None:
        post_delete.disconnect(sender=model, dispatch_uid=uid)
        with _lock:
            if _ties.get(model) == kind:
                del _ties[model]

    return untie


def owner_of(instance: Any, owner_type: str | None = None) -> tuple[str, str]:
    """Return the ``(owner_type, owner_id)`` pair to pass as ``store.add(owner=...)``.

    ``owner_type`` defaults to the type the instance's model (or a parent) was tied with,
    else to its ``app_label.modelname``. The instance must be saved (have a primary key).
    """
    if instance.pk is None:
        raise ValueError(f"{type(instance).__name__} instance has no primary key; save it first")
    if owner_type is None:
        owner_type = _tied_type(type(instance)) or str(instance._meta.label_lower)
    return owner_type, str(instance.pk)


def _tied_type(cls: type[Any]) -> str | None:
    for klass in cls.__mro__:
        kind = _ties.get(klass)
        if kind is not None:
            return kind
    return None
