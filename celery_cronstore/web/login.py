"""The dashboard's login and logout pages: check a token or a password, set the session.

The checks themselves (constant-time comparison, signed sessions) are in :mod:`.auth`.
"""

from __future__ import annotations

from werkzeug.utils import redirect
from werkzeug.wrappers import Response

from celery_cronstore.web.auth import SESSION_COOKIE
from celery_cronstore.web.context import Ctx, Site

__all__ = ["login", "logout", "safe_next"]


def login(app: Site, ctx: Ctx) -> Response:
    """Show the login form (GET), or check it and set the session cookie (POST)."""
    target = safe_next(ctx.request.values.get("next", ""), ctx.urls.build("tasks"))
    if not app.credentials.configured:
        return app.render(ctx, "login.html", error="no credentials are configured", target=target)
    if ctx.request.method == "GET":
        return app.render(ctx, "login.html", error=None, target=target)
    form = ctx.request.form
    name = None
    if form.get("token") and app.credentials.check_token(form["token"]):
        name = "token"
    elif form.get("user") and app.credentials.check_user(form["user"], form.get("password", "")):
        name = form["user"]
    if name is None:
        return app.render(ctx, "login.html", 403, error="wrong token or password", target=target)
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


def logout(app: Site, ctx: Ctx) -> Response:
    """Drop the session cookie and go to the login page."""
    response = redirect(ctx.urls.build("login"), 303)
    response.delete_cookie(SESSION_COOKIE, path=ctx.request.script_root or "/")
    return response


def safe_next(target: str, default: str) -> str:
    """Return ``target`` if it is a path on this site (no open redirect), else ``default``."""
    if target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return default
