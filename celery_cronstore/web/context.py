"""What a request handler gets: the request's :class:`Ctx` and the :class:`Site` it runs in.

The pages (``app.py``) and the handlers that write or log in (``writes.py``, ``login.py``)
both use these; keeping them here lets the handlers name the site's type without
importing the app that imports them (no import circle, type-only ones included).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from werkzeug.routing import MapAdapter
from werkzeug.wrappers import Request, Response

from celery_cronstore.store import Store
from celery_cronstore.web.auth import Credentials, Identity, Signer
from celery_cronstore.web.guard import LoginLimiter

__all__ = ["Ctx", "Site"]


@dataclass
class Ctx:
    """One request: who sent it, the URL builder and the store's now."""

    request: Request
    urls: MapAdapter
    identity: Identity | None
    now: datetime
    extra: dict[str, Any] = field(default_factory=dict)


class Site(Protocol):
    """What the write and login handlers use of the dashboard (``WebApp`` is one)."""

    store: Store
    credentials: Credentials
    signer: Signer
    limiter: LoginLimiter

    def scrub(self, text: str) -> str:
        """Return ``text`` with every known secret removed."""
        ...

    def render(self, ctx: Ctx, template: str, status: int = 200, **values: Any) -> Response:
        """Return a page rendered from ``template``."""
        ...

    def plain(self, status: int, message: str) -> Response:
        """Return a plain-text response."""
        ...

    def back_to_task(self, ctx: Ctx, name: str, done: str) -> Response:
        """Return a redirect to the task's page saying what was done."""
        ...

    def page_task(self, ctx: Ctx, status: int = 200, **extra: Any) -> Response:
        """Return the task's page."""
        ...

    def run_now(self, name: str) -> None:
        """Send one fire of the task now."""
        ...
