"""The dashboard's write pages: the task actions, the edit form and the add form (pause
and resume, also task actions, are in :mod:`.pause`).

Every write goes through the :class:`~celery_cronstore.store.Store` API (or the claimer
for "run now"), so validation and planning live in one place. :class:`~.app.WebApp` has
already refused a write without a login, a CSRF token or a same-origin request, and
any write page to a viewer. Each write goes through the store acting as the logged-in
user (:func:`writer`), so the audit trail records who made it, from the ``web`` window.
"""

from __future__ import annotations

from collections.abc import Mapping

from werkzeug.utils import redirect
from werkzeug.wrappers import Response

from celery_cronstore.errors import (
    CronstoreError,
    EditConflictError,
    StoreUnavailableError,
    TaskNotFoundError,
)
from celery_cronstore.store import PeriodicTask, Store
from celery_cronstore.timers import KINDS
from celery_cronstore.web import forms, pause
from celery_cronstore.web.context import Ctx, Site

__all__ = ["ACTIONS", "action", "edit", "edit_form", "new", "writer"]

ACTIONS = ("enable", "disable", "run", "remove", *pause.ACTS)


def action(app: Site, ctx: Ctx) -> Response:
    """Enable, disable, run now, remove, pause or resume the task named in the form."""
    form = ctx.request.form
    name, act = form.get("name", ""), form.get("action", "")
    if act not in ACTIONS:
        return app.plain(400, f"unknown action; expected one of {', '.join(ACTIONS)}")
    store = writer(app, ctx)
    if act in pause.ACTS:
        return pause.write(app, ctx, store, act)
    try:
        if act == "enable":
            store.enable(name)
        elif act == "disable":
            store.disable(name)
        elif act == "remove":
            store.remove(name)
            return redirect(ctx.urls.build("tasks", {"done": "removed"}), 303)
        else:
            app.run_now(name, store)
    except (TaskNotFoundError, StoreUnavailableError):
        raise  # 404 / 503 pages (WebApp.respond)
    except (CronstoreError, ValueError) as exc:
        return app.page_task(ctx, 409, action_error=app.scrub(str(exc)))
    return app.back_to_task(ctx, name, {"enable": "enabled", "disable": "disabled"}.get(act, act))


def writer(app: Site, ctx: Ctx) -> Store:
    """Return the store writing as the request's user (``token`` for the token), from
    the ``web`` window (the audit trail's actor)."""
    return app.store.acting(ctx.identity.name if ctx.identity else "anonymous", "web")


def edit(app: Site, ctx: Ctx) -> Response:
    """Show the edit form (GET), or preview or save it (POST)."""
    name = ctx.request.values.get("name", "")
    record = app.store.get(name)
    if ctx.request.method == "GET":
        return edit_form(app, ctx, record, forms.values_of(record), {})
    values = forms.submitted(ctx.request.form)
    changes, errors = forms.changes(values, record)
    if errors or ctx.request.form.get("submit") == "preview":
        return edit_form(app, ctx, record, values, errors, status=400 if errors else 200)
    # The store writes only if the row is still at the version the form was opened on
    # (versions start at 1: a form without one never matches).
    loaded = int(values["version"]) if values["version"].isdigit() else 0
    try:
        writer(app, ctx).update(name, expected_version=loaded, force=False, **changes)
    except EditConflictError:
        current = app.store.get(name)
        return edit_form(app, ctx, current, forms.values_of(current), _CONFLICT, status=409)
    except StoreUnavailableError:
        raise
    except (CronstoreError, ValueError) as exc:
        return edit_form(app, ctx, record, values, forms.store_error(exc), status=400)
    return app.back_to_task(ctx, name, "saved")


_CONFLICT = {
    "_form": "someone changed this task since you opened the form; review the current "
    "definition below and save again"
}


def new(app: Site, ctx: Ctx) -> Response:
    """Show the add form (GET), or preview or add the task (POST)."""
    if ctx.request.method == "GET":
        return edit_form(app, ctx, None, forms.blank(), {})
    values = forms.submitted(ctx.request.form)
    changes, errors = forms.changes(values)
    name = values["name"]
    if not name.strip():
        errors["name"] = "a name is required"
    if errors or ctx.request.form.get("submit") == "preview":
        return edit_form(app, ctx, None, values, errors, status=400 if errors else 200)
    try:
        enabled = values.get("enabled") == "on"
        writer(app, ctx).add(name, enabled=enabled, force=False, **changes)
    except StoreUnavailableError:
        raise
    except (CronstoreError, ValueError) as exc:
        return edit_form(app, ctx, None, values, forms.store_error(exc), status=400)
    return app.back_to_task(ctx, name, "added")


def edit_form(
    app: Site,
    ctx: Ctx,
    record: PeriodicTask | None,
    values: Mapping[str, str],
    errors: Mapping[str, str],
    status: int = 200,
) -> Response:
    """Render the add/edit form with ``values``, ``errors`` and the timer's preview."""
    kind = forms.kind_of(values, record)
    preview = forms.preview(values["timer"], kind, values["tz"] or None, ctx.now)
    return app.render(
        ctx,
        "edit.html",
        status,
        task=record,
        values=values,
        errors={k: app.scrub(v) for k, v in errors.items()},
        preview=preview,
        kinds=KINDS,
        policies=forms.POLICIES,
    )
