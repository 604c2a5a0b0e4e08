"""What a request handler gets: the request's :class:`Ctx` and the :class:`Site` it runs in.

The pages (``app.py``) and the handlers that write or log in (``writes.py``, ``login.py``)
both use these; keeping them here lets the handlers name the site's type without
importing the app that imports them (no import circle, type-only ones included).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from werkzeug.routing import MapAdapter
from werkzeug.wrappers import Request, Response

from celery_cronstore.errors import StoreUnavailableError
from celery_cronstore.store import Store
from celery_cronstore.store.failures import Summary
from celery_cronstore.web.auth import Credentials, Identity, Signer
from celery_cronstore.web.guard import LoginLimiter

__all__ = ["LIVE_EVERY", "LIVE_HEADER", "LIVE_PAGES", "Ctx", "Site", "SummaryLine"]


#: The header ``static/live.js`` marks its refreshes with: such a request is never sent to
#: the login page (a lapsed session answers 401, and the script stops and says so).
LIVE_HEADER = "X-Cronstore-Live"
#: The pages that refresh themselves (``live.js``): the task list, a task, the problems.
LIVE_PAGES = frozenset({"tasks.html", "task.html", "problems.html"})
#: Seconds between two refreshes of a live page.
LIVE_EVERY = 10


class SummaryLine:
    """The summary line's numbers, read at most once per ``ttl`` seconds per process.

    Every page shows it and the live pages ask again every few seconds: without the cache
    each open tab would count the tasks table (and a window of the ledger) that often.
    ``ttl=0`` reads every time (tests). A database that does not answer gives ``None``
    (no line): the page itself says what is wrong.
    """

    def __init__(self, ttl: float = 5.0) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._cached: tuple[float, Summary] | None = None

    def for_page(
        self, store: Store, ctx: Ctx, template: str, login_possible: bool
    ) -> Summary | None:
        """Return the numbers for a page: only to who may see the store (as its URL in the
        footer), and not on the login page or the "store unavailable" one."""
        if template in ("login.html", "unavailable.html"):
            return None
        if ctx.identity is None and login_possible:
            return None
        return self.get(store, ctx.now)

    def get(self, store: Store, now: datetime) -> Summary | None:
        """Return the summary at about ``now`` (at most ``ttl`` seconds old), or ``None``."""
        with self._lock:
            cached = self._cached
        if cached is not None and time.monotonic() - cached[0] < self.ttl:
            return cached[1]
        try:
            found = store.summary(now)
        except StoreUnavailableError:
            return None
        with self._lock:
            self._cached = (time.monotonic(), found)
        return found


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

    def run_now(self, name: str, store: Store | None = None) -> None:
        """Send one fire of the task now (through ``store``, if given)."""
        ...
