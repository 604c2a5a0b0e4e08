"""The dashboard's login and logout pages: check a token or a password, set the session.

The checks themselves (constant-time comparison, signed sessions) are in :mod:`.auth`;
the attempt limit and the redirect check in :mod:`.guard`.
"""

from __future__ import annotations

from werkzeug.utils import redirect
from werkzeug.wrappers import Response

from celery_cronstore.web.auth import SESSION_COOKIE
from celery_cronstore.web.context import Ctx, Site
from celery_cronstore.web.guard import retry_after, safe_next, unsafe_next

__all__ = ["login", "logout", "safe_next", "too_many"]


def login(app: Site, ctx: Ctx) -> Response:
    """Show the login form (GET), or check it and set the session cookie (POST)."""
    default = ctx.urls.build("tasks")
    target = ctx.request.values.get("next", "") or default
    why = unsafe_next(target)
    if why is not None:
        return app.plain(400, f"bad next (where to go after logging in): {why}; e.g. /")
    if not app.credentials.configured:
        return app.render(ctx, "login.html", error="no credentials are configured", target=target)
    if ctx.request.method == "GET":
        return app.render(ctx, "login.html", error=None, target=target)
    wait = app.limiter.take(ctx.request.remote_addr)
    if wait:
        return too_many(app, wait)
    form = ctx.request.form
    name = None
    if form.get("token") and app.credentials.check_token(form["token"]):
        name = "token"
    elif form.get("user") and app.credentials.check_user(form["user"], form.get("password", "")):
        name = form["user"]
    if name is None:
        return app.render(ctx, "login.html", 403, error="wrong token or password", target=target)
    app.limiter.give_back(ctx.request.remote_addr)
    response = redirect(target, 303)
    response.set_cookie(
        SESSION_COOKIE,
        app.signer.session(name),
        httponly=True,
        samesite="Strict",
        secure=ctx.request.scheme == "https",
        path=ctx.request.script_root or "/",
    )
    return response


def too_many(app: Site, wait: float) -> Response:
    """Return the 429 answer to a client out of login attempts."""
    seconds = retry_after(wait)
    response = app.plain(
        429,
        f"too many login attempts from your address: try again in {seconds} s "
        "(each address has a few attempts, then one every few seconds)",
    )
    response.headers["Retry-After"] = seconds
    return response


def logout(app: Site, ctx: Ctx) -> Response:
    """Drop the session cookie and go to the login page."""
    response = redirect(ctx.urls.build("login"), 303)
    response.delete_cookie(SESSION_COOKIE, path=ctx.request.script_root or "/")
    return response
