"""The Problems page: beats, tasks in error, and what ended badly in a chosen window.

``/problems?window=1h|24h|7d`` (default 24 h; anything else is 400 naming the choices).
The failures section groups the window's bad ends by task
(:meth:`~celery_cronstore.store.Store.failures`); the fires that did not run and the ones
published twice follow the same window.
"""

from __future__ import annotations

from werkzeug.wrappers import Response

from celery_cronstore.store.failures import WINDOWS, window_of
from celery_cronstore.store.read import problems
from celery_cronstore.web.context import Ctx, Site

__all__ = ["page"]


def page(site: Site, ctx: Ctx) -> Response:
    """Return the Problems page for the window the query string names."""
    try:
        window = window_of(ctx.request.args.get("window"))
    except ValueError as exc:
        return site.plain(400, str(exc))
    span = WINDOWS[window]
    with site.store.engine.connect() as conn:
        found = problems(conn, ctx.now, window=span)
    failed = site.store.failures(ctx.now, window=span)
    return site.render(
        ctx, "problems.html", problems=found, failures=failed, window=window, windows=WINDOWS
    )
