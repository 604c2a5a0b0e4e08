"""The dashboard's operations pages: its own health, the audit trail, and the refusal a
viewer gets on a write page.

* ``/healthz`` is for a load balancer or a Kubernetes probe: no login and any ``Host``
  (a probe sends the pod's address), because it shows nothing but whether the store
  answers and its schema is this release's. 200 ``{"status": "ok"}``, else 503 with a
  fixed reason; never the URL, a driver's message or a credential.
* ``/audit`` lists who changed what, from which window, when (:mod:`.store.audit`),
  newest first, a page at a time, optionally for one task.
* A viewer (:data:`~.auth.VIEWER`) reaching a write page or action gets 403 and a page
  saying why and who can do it; the buttons are not drawn for viewers either.
"""

from __future__ import annotations

import json
import logging

from werkzeug.wrappers import Response

from celery_cronstore.errors import SchemaVersionError, StoreUnavailableError
from celery_cronstore.web import forms
from celery_cronstore.web.context import Ctx, Site

__all__ = ["AUDIT_PAGE", "MAX_PER_PAGE", "WRITES", "audit_page", "forbidden", "healthz"]

logger = logging.getLogger("celery_cronstore.web")

#: The endpoints that change something (or show a form that would): operators only.
WRITES = frozenset({"edit", "new", "action", "calendar"})
#: Entries per page of ``/audit``, and the most ``per_page`` may ask for.
AUDIT_PAGE = 100
MAX_PER_PAGE = 1000
#: The largest entry id ``before=`` takes (twelve digits, as every number in a URL here).
_MAX_ID = 10**12 - 1


def healthz(app: Site) -> Response:
    """Answer whether the store answers and its schema is current (see the module)."""
    try:
        app.store.check_schema()
    except SchemaVersionError:
        return _health(503, "schema", "the store's schema is not this release's: migrate it")
    except StoreUnavailableError:
        return _health(503, "unavailable", "the store does not answer")
    except Exception as exc:  # a permission refused, a driver missing: logged, not shown
        logger.warning("web: /healthz: %s", app.scrub(f"{type(exc).__name__}: {exc}"))
        return _health(503, "error", "the store could not be checked: see the dashboard's log")
    return _health(200, "ok", None)


def _health(status: int, word: str, reason: str | None) -> Response:
    body = {"status": word, **({"reason": reason} if reason else {})}
    response = Response(json.dumps(body), status, content_type="application/json")
    response.headers["Cache-Control"] = "no-store"
    return response


def audit_page(app: Site, ctx: Ctx) -> Response:
    """Show the audit trail, newest first; ``task=`` one task's, ``before=`` older ones."""
    args = ctx.request.args
    task = args.get("task") or None
    try:
        per_page = forms.page_number(args, "per_page", AUDIT_PAGE, MAX_PER_PAGE)
        before = forms.page_number(args, "before", 1, _MAX_ID) if args.get("before") else None
    except ValueError as exc:
        return app.plain(400, str(exc))
    entries = app.store.audit_trail(task=task, limit=per_page + 1, before=before)
    older = entries[per_page].id if len(entries) > per_page else None
    # The link to older entries starts below the last one shown.
    next_before = entries[per_page - 1].id if older is not None else None
    return app.render(
        ctx,
        "audit.html",
        entries=entries[:per_page],
        task=task,
        per_page=per_page,
        next_before=next_before,
    )


def forbidden(app: Site, ctx: Ctx) -> Response:
    """Return the 403 page a viewer gets for a write (nothing was changed)."""
    return app.render(ctx, "forbidden.html", 403)
