"""``celery -A app cronstore web``: serve the dashboard (the ``web`` extra, docs/web.md)."""

from __future__ import annotations

import ipaddress
import os
import secrets

import click

from celery_cronstore.cli.base import BadInputError, Command, get_app, get_settings, get_store
from celery_cronstore.cli.group import cronstore

__all__ = ["web"]


def is_loopback(host: str) -> bool:
    """Return whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@cronstore.command(cls=Command)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--read-only", is_flag=True, help="Serve the pages only: refuse every write.")
@click.option(
    "--token",
    envvar="CRONSTORE_WEB_TOKEN",
    help="Token that logs in (16+ characters). Prefer the CRONSTORE_WEB_TOKEN variable.",
)
@click.option(
    "--users",
    envvar="CRONSTORE_WEB_USERS",
    help="Basic-auth users as user:password[,user:password]. Prefer CRONSTORE_WEB_USERS.",
)
@click.pass_context
def web(
    ctx: click.Context,
    host: str,
    port: int,
    read_only: bool,
    token: str | None,
    users: str | None,
) -> None:
    """Serve the web dashboard: tasks, history, problems; edits with a login.

    Bound to 127.0.0.1 by default. Any other address needs a token or users. On
    127.0.0.1 without either (and without --read-only) a one-time token is printed.
    """
    try:
        from werkzeug.serving import run_simple

        from celery_cronstore.web import create_app
        from celery_cronstore.web.auth import parse_users
    except ImportError as exc:
        raise BadInputError(
            f"the dashboard needs the web extra: pip install 'celery-cronstore[web]' ({exc})"
        ) from None
    user_map = parse_users(users or "")
    if not is_loopback(host) and not (token or user_map):
        raise BadInputError(
            f"refusing to listen on {host} without credentials: set CRONSTORE_WEB_TOKEN "
            "or CRONSTORE_WEB_USERS (or bind to 127.0.0.1)"
        )
    if not (token or user_map or read_only):
        token = secrets.token_urlsafe(24)
        click.echo(f"one-time login token (this run only): {token}", err=True)
    app = get_app(ctx)
    store = get_store(ctx)
    dashboard = create_app(
        store,
        token=token,
        users=user_map,
        read_only=read_only,
        celery_app=app,
        secrets=get_settings(ctx).secrets,
        metrics=_has_prometheus(),
    )
    mode = "read-only" if dashboard.read_only else "read-write with login"
    click.echo(f"cronstore dashboard on http://{host}:{port}/ ({mode}); store {store.url}")
    run_simple(host, port, dashboard, threaded=True, use_reloader=False)


def _has_prometheus() -> bool:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return os.environ.get("CRONSTORE_WEB_METRICS", "1") != "0"
