"""Where the admin finds the store and the Celery app (Django settings, read once).

``CRONSTORE_DATABASE``
    The ``DATABASES`` alias holding the cronstore tables (default ``"default"``); the
    admin's ORM reads go there.
``CRONSTORE_STORE``
    A :class:`~celery_cronstore.store.Store`, a function returning one, or the dotted
    path of either (``"proj.celery.get_store"``). Default: the store of the Celery app's
    ``cronstore_url`` when it sets one, else ``store_url_from_django(CRONSTORE_DATABASE)``.
``CRONSTORE_CELERY_APP``
    The Celery app "run now" publishes with, or its dotted path (``"proj.celery.app"``).
    Default: ``celery_app`` of the settings module's package (``proj/__init__.py`` in
    Celery's Django layout).

Both are resolved at first use and kept; ``override_settings`` clears them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib import import_module
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

from celery_cronstore.store import Store

__all__ = ["NoCeleryApp", "celery_app", "checked_store", "database", "get_store", "reset"]

_lock = threading.RLock()  # resolving the store may resolve the app
_cache: dict[str, Any] = {}


class NoCeleryApp(LookupError):
    """Raised when "run now" cannot find the project's Celery app; says how to name it."""


def database() -> str:
    """Return the ``DATABASES`` alias of the cronstore tables."""
    return str(getattr(settings, "CRONSTORE_DATABASE", "default"))


def _load(value: Any) -> Any:
    if isinstance(value, str):
        module, sep, attr = value.partition(":")
        if not sep:
            module, _, attr = value.rpartition(".")
        try:
            return getattr(import_module(module), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ImportError(f"cannot import {value!r}: {exc}") from None
    return value


def celery_app() -> Any:
    """Return the project's Celery app (:class:`NoCeleryApp` if there is none)."""
    return _cached("celery_app", _find_celery_app)


def _find_celery_app() -> Any:
    named = getattr(settings, "CRONSTORE_CELERY_APP", None)
    if named is not None:
        return _load(named)
    package = (getattr(settings, "SETTINGS_MODULE", None) or "").rpartition(".")[0]
    if package:
        try:
            app = getattr(import_module(package), "celery_app", None)
        except ImportError:
            app = None
        if app is not None:
            return app
    raise NoCeleryApp(
        "no Celery app found: set CRONSTORE_CELERY_APP = 'proj.celery.app' in the settings "
        "(or import it as celery_app in the settings' package, as Celery's Django guide does)"
    )


def get_store() -> Store:
    """Return the store the admin reads and writes (one per process)."""
    store: Store = _cached("store", _find_store)
    return store


def _find_store() -> Store:
    named = getattr(settings, "CRONSTORE_STORE", None)
    if named is not None:
        found = _load(named)
        store = found if isinstance(found, Store) else found()
        if not isinstance(store, Store):
            raise TypeError(f"CRONSTORE_STORE gave {store!r}, not a celery_cronstore Store")
        return store
    _cache["own_store"] = True  # built here: reset() closes it
    from celery_cronstore.catalog import TaskCatalog
    from celery_cronstore.contrib.django import store_url_from_django

    try:
        app = celery_app()
    except NoCeleryApp:
        return Store(store_url_from_django(database()))
    if app.conf.get("cronstore_url"):
        return Store.from_app(app)  # the configuration beat reads
    return Store(store_url_from_django(database()), seam=TaskCatalog(app))


def checked_store() -> Store:
    """Return the store the admin writes through, checking task names with the Celery
    app when the store was built without it (``CRONSTORE_STORE``): the admin refuses an
    unknown task and args that do not fit as the command line does."""
    from celery_cronstore.catalog import TaskCatalog
    from celery_cronstore.store.seam import NullSeam

    store = get_store()
    if not isinstance(store.seam, NullSeam):
        return store
    try:
        app = celery_app()
    except (NoCeleryApp, ImportError):
        return store
    return store.checked_by(TaskCatalog(app))


def _cached(key: str, make: Callable[[], Any]) -> Any:
    with _lock:
        if key not in _cache:
            _cache[key] = make()
        return _cache[key]


def reset() -> None:
    """Forget the resolved store and app (the next use resolves them again)."""
    with _lock:
        store = _cache.pop("store", None)
        own = _cache.pop("own_store", False)
        _cache.clear()
    if store is not None and own:
        store.close()  # built here, not handed in by CRONSTORE_STORE


def _on_setting_changed(setting: str, **_: Any) -> None:
    if setting.startswith("CRONSTORE_"):
        reset()


def connect_signals() -> None:
    """Forget the resolved store and app when a ``CRONSTORE_*`` setting changes (tests)."""
    setting_changed.connect(_on_setting_changed, dispatch_uid="celery_cronstore.django.conf")
