"""The dashboard for a production WSGI server: ``celery_cronstore.web.wsgi:application``.

::

    CRONSTORE_APP=proj CRONSTORE_WEB_USERS='ann:pw1,bob:pw2:viewer' \\
        gunicorn -w 2 -b 0.0.0.0:8000 celery_cronstore.web.wsgi:application
    CRONSTORE_APP=proj waitress-serve --port 8000 celery_cronstore.web.wsgi:application

``celery -A app cronstore web`` runs Werkzeug's development server (one process, no
worker management); this module is what a real server loads. Everything comes from the
environment, read once per process when the server first asks for ``application``:

=============================== ==========================================================
``CRONSTORE_APP``               the Celery app, as given to ``celery -A`` (``proj``,
                                ``proj.celery:app``); required
``CRONSTORE_WEB_TOKEN``         a token that logs in as an operator (16+ characters)
``CRONSTORE_WEB_USERS``         ``user:password[:role][,...]``; role ``operator`` (default)
                                or ``viewer``
``CRONSTORE_WEB_READ_ONLY``     ``1``: refuse every write; without a token or users this
                                must be set, and the pages are shown to anyone who reaches
                                the server
``CRONSTORE_WEB_SECRET_KEY``    signs sessions and CSRF tokens (see :func:`secret_key`)
``CRONSTORE_WEB_ALLOWED_HOSTS`` ``Host`` names served besides localhost (added to the
                                ``cronstore_web_allowed_hosts`` setting)
``CRONSTORE_WEB_METRICS``       ``0`` turns ``/metrics`` off
=============================== ==========================================================

A missing or wrong setting stops the server at start with one line naming the variable
and the fix, never a page that fails later. The store is opened at start and its schema
checked: an out-of-date schema stops it too (run ``celery -A <CRONSTORE_APP> cronstore
migrate``), a database that does not answer yet does not (the pages and ``/healthz``
answer 503 until it does).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from celery_cronstore.errors import SchemaVersionError, StoreUnavailableError
from celery_cronstore.secrets import app_passwords
from celery_cronstore.store import Store
from celery_cronstore.web import allowed_hosts_of, create_app
from celery_cronstore.web.app import WebApp
from celery_cronstore.web.auth import parse_accounts
from celery_cronstore.web.guard import parse_hosts

__all__ = ["BOOT_FAILED", "ENV_APP", "WsgiConfigError", "find_celery_app", "load", "secret_key"]

logger = logging.getLogger("celery_cronstore.web")

#: The variable naming the Celery app (what ``celery -A`` would be given).
ENV_APP = "CRONSTORE_APP"
#: The exit status on a bad configuration: gunicorn's "worker failed to boot", on which
#: its arbiter stops instead of starting the worker again and again.
BOOT_FAILED = 3
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


class WsgiConfigError(ValueError):
    """The environment does not describe a dashboard that can start; says what to set."""


def find_celery_app(value: str) -> Any:
    """Return the Celery app ``value`` names, resolved as ``celery -A value`` resolves it
    (:func:`celery.app.utils.find_app`: ``proj`` finds ``proj.app``, ``proj.celery`` or
    the one app in the module; ``proj.celery:app`` names it); ``WsgiConfigError`` if not."""
    from celery import Celery
    from celery.app.utils import find_app

    value = value.strip()
    if not value:
        raise WsgiConfigError(
            f"{ENV_APP} is not set: set it to the module of your Celery app, as given to "
            f"`celery -A` (e.g. {ENV_APP}=proj or {ENV_APP}=proj.celery:app)"
        )
    # The server's working directory is where `celery -A` would look first.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = find_app(value)
    except (ImportError, AttributeError) as exc:
        raise WsgiConfigError(
            f"{ENV_APP}={value!r}: no Celery app found there ({type(exc).__name__}: {exc}); "
            "give what `celery -A` takes (e.g. proj or proj.celery:app), importable from "
            "the server's working directory"
        ) from None
    except Exception as exc:  # the module itself failed while importing
        raise WsgiConfigError(
            f"{ENV_APP}={value!r}: importing it failed ({type(exc).__name__}: {exc})"
        ) from None
    if not isinstance(found, Celery):
        raise WsgiConfigError(
            f"{ENV_APP}={value!r} names a {type(found).__name__}, not a Celery app: name the "
            "app (e.g. proj.celery:app)"
        )
    return found


def secret_key(environ: Mapping[str, str], token: str | None, users: Mapping[str, str]) -> bytes:
    """Return the key signing sessions: ``CRONSTORE_WEB_SECRET_KEY`` if set, else one
    derived from the credentials.

    Every worker process of the server must use the same key, or a session made by one is
    refused by the next. Derived, it is the same in every worker and across restarts, and
    changes (logging everyone out) when any credential does; forging a session with it
    needs every password and the token, which already let one in as anyone.
    """
    given = environ.get("CRONSTORE_WEB_SECRET_KEY", "")
    if given:
        if len(given) < 16:
            raise WsgiConfigError("CRONSTORE_WEB_SECRET_KEY must be at least 16 characters long")
        return given.encode("utf-8")
    material = "\n".join([token or "", *(f"{u}:{p}" for u, p in sorted(users.items()))])
    return hmac.new(b"celery-cronstore web session key", material.encode(), hashlib.sha256).digest()


def load(environ: Mapping[str, str] | None = None) -> WebApp:
    """Build the dashboard the environment describes (see the module); raise
    :class:`WsgiConfigError` naming the variable to fix."""
    env = os.environ if environ is None else environ
    value = env.get(ENV_APP, "")
    celery_app = find_celery_app(value)
    token = env.get("CRONSTORE_WEB_TOKEN") or None
    try:
        users, roles = parse_accounts(env.get("CRONSTORE_WEB_USERS", ""))
    except ValueError as exc:
        raise WsgiConfigError(f"CRONSTORE_WEB_USERS: {exc}") from None
    read_only = _flag(env, "CRONSTORE_WEB_READ_ONLY")
    if not (token or users or read_only):
        raise WsgiConfigError(
            "no credentials: set CRONSTORE_WEB_TOKEN or CRONSTORE_WEB_USERS (a production "
            "server answers beyond this machine), or CRONSTORE_WEB_READ_ONLY=1 to show the "
            "pages, without writes, to anyone who reaches it"
        )
    try:
        hosts = [
            *allowed_hosts_of(celery_app),
            *parse_hosts(env.get("CRONSTORE_WEB_ALLOWED_HOSTS", "")),
        ]
    except ValueError as exc:
        raise WsgiConfigError(str(exc)) from None
    store = Store.from_app(celery_app, app_name=value.strip())
    try:
        store.check_schema()
    except SchemaVersionError as exc:
        raise WsgiConfigError(str(exc)) from None
    except StoreUnavailableError as exc:  # it may come up after the dashboard
        logger.warning("web: the store does not answer yet (%s); serving 503 until it does", exc)
    try:
        return create_app(
            store,
            token=token,
            users=users,
            roles=roles,
            read_only=read_only,
            celery_app=celery_app,
            secret_key=secret_key(env, token, users),
            secrets=app_passwords(celery_app),
            metrics=_metrics(env),
            allowed_hosts=hosts,
        )
    except ValueError as exc:  # a token too short, a role for nobody
        raise WsgiConfigError(f"CRONSTORE_WEB_TOKEN / CRONSTORE_WEB_USERS: {exc}") from None


def _flag(env: Mapping[str, str], name: str) -> bool:
    text = env.get(name, "").strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise WsgiConfigError(f"{name}={text[:40]!r}: give 1 or 0")


def _metrics(env: Mapping[str, str]) -> bool:
    if env.get("CRONSTORE_WEB_METRICS", "1").strip() == "0":
        return False
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


_lock = threading.Lock()
_loaded: dict[str, WebApp] = {}


def __getattr__(name: str) -> Any:
    """Build ``application`` when the server first asks for it (one per process: each
    forked worker opens its own connections). A bad configuration prints one line and
    exits with :data:`BOOT_FAILED`."""
    if name != "application":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _lock:
        if "application" not in _loaded:
            try:
                _loaded["application"] = load()
            except WsgiConfigError as exc:
                # One line on stderr (the server's error log), no traceback.
                print(f"celery-cronstore: {exc}", file=sys.stderr, flush=True)
                raise SystemExit(BOOT_FAILED) from None
        return _loaded["application"]
