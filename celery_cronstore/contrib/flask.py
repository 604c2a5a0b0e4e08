"""Flask integration: one store per application, and tasks owned by ORM rows.

    cronstore = CronStore()                      # extensions.py

    def create_app():
        app = Flask(__name__)
        app.config["CRONSTORE_URL"] = "postgresql+psycopg://app@db/app"
        db.init_app(app)                         # Flask-SQLAlchemy, if you use it
        cronstore.init_app(app)
        return app

    cronstore.tie_owner(MailChannel, "mail_channel")          # once, at import
    cronstore.store.add("poll-42", task="mail.poll", timer="*:0/5",
                        owner=owner_of(channel))              # in a request
    db.session.delete(channel); db.session.commit()           # poll-42 is removed

The store is opened at its first use and lives as long as the application: it holds a
connection pool, and each store method takes a connection for one short transaction and
gives it back, so nothing is kept per request or closed at app-context teardown.
:meth:`CronStore.close` releases the pool (tests, forked workers).

Where the URL comes from, first match wins: ``app.config["CRONSTORE_URL"]``, the
``url=`` given to :class:`CronStore`, the ``cronstore_url`` of the Celery app (``celery=``
or ``app.extensions["celery"]``, as Flask's Celery pattern stores it), else the
package default (a SQLite file in the working directory). Engine options come from
``app.config["CRONSTORE_ENGINE_OPTIONS"]`` over ``engine_options=`` (and over the Celery
app's ``cronstore_engine_options`` when its URL is used). They are read when the store is
first opened.

The owner tie is :mod:`celery_cronstore.contrib.sqlalchemy`'s (same release rules: after
the session's outermost commit, not for bulk ``DELETE``); it works with Flask-SQLAlchemy's
session, or any SQLAlchemy session, and releases into the store of the application whose
context is active when the session commits.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import click
import sqlalchemy as sa
from flask import Flask, current_app, has_app_context
from flask.cli import AppGroup
from sqlalchemy.orm import Mapper

from celery_cronstore.contrib import OnDelete, release_owner, sweep_orphans
from celery_cronstore.contrib import sqlalchemy as sa_contrib
from celery_cronstore.contrib.sqlalchemy import owner_of
from celery_cronstore.errors import CronstoreError
from celery_cronstore.store import DEFAULT_URL, Store

__all__ = ["CronStore", "OnDelete", "owner_of", "release_owner", "sweep_orphans"]

#: ``app.extensions`` key (and ``flask <group>`` name) of the extension.
EXTENSION = "cronstore"


@dataclass
class _AppState:
    """One application's store, opened at first use."""

    store: Store | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class CronStore:
    """The store as a Flask extension: ``CronStore(app)`` or ``CronStore()`` + ``init_app``.

    ``url`` and ``engine_options`` are defaults that ``CRONSTORE_URL`` and
    ``CRONSTORE_ENGINE_OPTIONS`` in ``app.config`` override; ``celery`` is the Celery app
    whose ``cronstore_*`` settings apply when neither names a URL (so the web app and beat
    use the same store). One extension may serve several apps (the factory pattern); each
    gets its own store.
    """

    def __init__(
        self,
        app: Flask | None = None,
        *,
        url: str | None = None,
        celery: Any = None,
        engine_options: Mapping[str, Any] | None = None,
    ) -> None:
        if url is not None and (not isinstance(url, str) or not url):
            raise ValueError(f"url must be a non-empty string, got {url!r}")
        self.url = url
        self.celery = celery
        self.engine_options = dict(engine_options or {})
        self._app = app
        self._states: weakref.WeakKeyDictionary[Flask, _AppState] = weakref.WeakKeyDictionary()
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Register on ``app``: ``app.extensions["cronstore"]`` and ``flask cronstore``."""
        if EXTENSION in app.extensions:
            raise RuntimeError(f"a CronStore is already registered on app {app.name!r}")
        self._states[app] = _AppState()
        app.extensions[EXTENSION] = self
        app.cli.add_command(cli)

    # -- the store -----------------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The store of the current application (opened at first use)."""
        return self.store_for(self._current_app())

    def store_for(self, app: Flask) -> Store:
        """Return ``app``'s store, opening it at the first call (thread-safe)."""
        state = self._state(app)
        with state.lock:
            if state.store is None:
                url, options = self.settings_for(app)
                state.store = Store(url, **options)
            return state.store

    def settings_for(self, app: Flask) -> tuple[str, dict[str, Any]]:
        """Return the store URL and engine options that apply to ``app`` (see the module)."""
        config_options = app.config.get("CRONSTORE_ENGINE_OPTIONS") or {}
        if not isinstance(config_options, Mapping):
            raise ValueError(
                f"CRONSTORE_ENGINE_OPTIONS must be a dict, got {type(config_options).__name__}"
            )
        options: dict[str, Any] = {}
        url = app.config.get("CRONSTORE_URL")
        if url is not None and (not isinstance(url, str) or not url):
            raise ValueError(f"CRONSTORE_URL must be a non-empty string, got {url!r}")
        url = url or self.url
        celery = self.celery if self.celery is not None else app.extensions.get("celery")
        if url is None and celery is not None:
            from celery_cronstore.config import Config

            config = Config.from_app(celery)
            url, options = config.url, dict(config.engine_options)
        options.update(self.engine_options)
        options.update(config_options)
        return url or DEFAULT_URL, options

    def close(self, app: Flask | None = None) -> None:
        """Release the connection pool of ``app``'s store (every app's if ``None``).

        The store opens again at its next use. Safe to call more than once.
        """
        states = [self._state(app)] if app is not None else list(self._states.values())
        for state in states:
            with state.lock:
                store, state.store = state.store, None
            if store is not None:
                store.close()

    # -- owner ties ----------------------------------------------------------------------

    def tie_owner(
        self,
        model: type[Any],
        owner_type: str | None = None,
        *,
        on_delete: OnDelete = "remove",
        id_of: Callable[[Any], Any] | None = None,
    ) -> Callable[[], None]:
        """Release an instance's periodic tasks once its deletion commits; return an untie.

        ``model`` is a mapped class (a Flask-SQLAlchemy ``db.Model`` or any declarative
        class); ``owner_type`` defaults to its table name. Tasks are released into the
        store of the app whose context is active at the commit (outside any context:
        the app given to ``CronStore(app)``). See
        :func:`celery_cronstore.contrib.sqlalchemy.tie_owner` for ``on_delete``,
        ``id_of`` and what the tie cannot see. Tie each model once, e.g. at import.
        """
        if owner_type is None:
            mapper = sa.inspect(model, raiseerr=False)
            table = mapper.local_table if isinstance(mapper, Mapper) else None
            owner_type = getattr(table, "name", None)
            if not isinstance(owner_type, str):
                raise TypeError(f"{model!r} is not a mapped SQLAlchemy class with a table")
        return sa_contrib.tie_owner(model, owner_type, self._release_store, on_delete, id_of=id_of)

    def _release_store(self) -> Store:
        return self.store

    # -- helpers -------------------------------------------------------------------------

    def _current_app(self) -> Flask:
        if has_app_context():
            app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]
            return app
        if self._app is not None:
            return self._app
        raise RuntimeError(
            "CronStore.store needs an application: use it inside `with app.app_context():` "
            "(or a request), call store_for(app), or pass the app to CronStore(app)"
        )

    def _state(self, app: Flask) -> _AppState:
        state = self._states.get(app)
        if state is None:
            raise RuntimeError(
                f"CronStore is not registered on app {app.name!r}; call init_app(app) first"
            )
        return state


@click.group(name=EXTENSION, cls=AppGroup)
def cli() -> None:
    """Manage the celery-cronstore store of this app."""


@cli.command("migrate")
def migrate_command() -> None:
    """Create or upgrade the cronstore tables to this release's schema."""
    from celery_cronstore.store.migrate import head_revision

    extension: CronStore = current_app.extensions[EXTENSION]
    try:
        store = extension.store
        store.upgrade()
        store.check_schema()
    except (CronstoreError, ValueError, OSError) as exc:  # StoreUnavailableError: unreachable
        from celery_cronstore.secrets import scrub

        raise click.ClickException(scrub(f"{type(exc).__name__}: {exc}")) from None
    click.echo(f"{store.url}: schema at revision {head_revision()}")
