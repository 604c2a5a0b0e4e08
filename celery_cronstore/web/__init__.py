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

__all__ = ["Credentials", "WebApp", "create_app"]


def create_app(
    store: Store,
    *,
    token: str | None = None,
    users: Mapping[str, str] | None = None,
    read_only: bool = False,
    celery_app: Any = None,
    secret_key: bytes | None = None,
    secrets: Iterable[str] = (),
    metrics: bool = True,
) -> WebApp:
    """Return the dashboard over ``store`` as a WSGI application.

    ``token`` and/or ``users`` (``{name: password}``) let people log in; without either the
    dashboard is read-only. ``celery_app`` enables "run now" (it publishes through it).
    ``secret_key`` signs sessions and CSRF tokens (default: random per process, so a
    restart logs everyone out; pass one when several processes serve the dashboard).
    ``secrets`` are extra strings never to show in a page (e.g. broker passwords).
    """
    return WebApp(
        store,
        credentials=Credentials(token=token, users=dict(users or {})),
        read_only=read_only,
        celery_app=celery_app,
        secret_key=secret_key,
        secrets=secrets,
        metrics=metrics,
    )
