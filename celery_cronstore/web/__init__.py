"""The web dashboard: ``celery -A app cronstore web`` or a WSGI app to mount anywhere.

    from celery_cronstore.web import create_app
    dashboard = create_app(store, token="...", celery_app=app)
    # Flask: app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/cronstore": dashboard})

Needs the ``web`` extra (``pip install 'celery-cronstore[web]'``); see ``docs/web.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from celery_cronstore.store import Store
from celery_cronstore.web.app import WebApp
from celery_cronstore.web.auth import Credentials
from celery_cronstore.web.guard import LoginLimiter, parse_hosts

__all__ = [
    "SETTING_HOSTS",
    "Credentials",
    "LoginLimiter",
    "WebApp",
    "allowed_hosts_of",
    "create_app",
]

#: The Celery setting listing the ``Host`` names the dashboard answers besides localhost.
SETTING_HOSTS = "cronstore_web_allowed_hosts"


def allowed_hosts_of(celery_app: Any) -> list[str]:
    """Return ``cronstore_web_allowed_hosts`` of ``celery_app`` (a list or ``a,b`` text)."""
    if celery_app is None:
        return []
    value = celery_app.conf.get(SETTING_HOSTS)
    if value is not None and not isinstance(value, (str, list, tuple, set, frozenset)):
        raise ValueError(
            f"{SETTING_HOSTS} must be a list of host names or 'a.example,b.example' text, "
            f"got {type(value).__name__}"
        )
    return parse_hosts(value)


def create_app(
    store: Store,
    *,
    token: str | None = None,
    users: Mapping[str, str] | None = None,
    roles: Mapping[str, str] | None = None,
    read_only: bool = False,
    celery_app: Any = None,
    secret_key: bytes | None = None,
    secrets: Iterable[str] = (),
    metrics: bool = True,
    allowed_hosts: Iterable[str] | None = None,
    bound_host: str | None = None,
    limiter: LoginLimiter | None = None,
    display_tz: str = "UTC",
) -> WebApp:
    """Return the dashboard over ``store`` as a WSGI application.

    ``token`` and/or ``users`` (``{name: password}``) let people log in; without either the
    dashboard is read-only. ``roles`` (``{name: "viewer"}``) makes users viewers, who see
    every page and change nothing; the others, and the token, are operators.
    ``celery_app`` enables "run now" (it publishes through it).
    ``secret_key`` signs sessions and CSRF tokens (default: random per process, so a
    restart logs everyone out; pass one when several processes serve the dashboard).
    ``secrets`` are extra strings never to show in a page (e.g. broker passwords).
    ``allowed_hosts`` are the ``Host`` names served besides localhost and ``bound_host``
    (default: ``cronstore_web_allowed_hosts`` of ``celery_app``; ``"*"`` serves any, for
    a proxy that checks them itself; ``.example.com`` a domain and its subdomains).
    ``limiter`` limits login attempts per client (default: 10, then one every 6 s).
    ``display_tz`` is the one zone the pages list instants in (named in each header).
    """
    if allowed_hosts is None:
        allowed_hosts = allowed_hosts_of(celery_app)
    return WebApp(
        store,
        credentials=Credentials(token=token, users=dict(users or {}), roles=dict(roles or {})),
        read_only=read_only,
        celery_app=celery_app,
        secret_key=secret_key,
        secrets=secrets,
        metrics=metrics,
        allowed_hosts=allowed_hosts,
        bound_host=bound_host,
        limiter=limiter,
        display_tz=display_tz,
    )
