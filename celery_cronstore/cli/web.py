"""``celery -A app cronstore web``: serve the dashboard (the ``web`` extra, docs/web.md).

It runs Werkzeug's development server, which says so itself ("Do not use it in a
production deployment"): one process, enough for a few operators on a trusted network.
The help and the start line say so and name the production way,
``celery_cronstore.web.wsgi:application`` under gunicorn or waitress.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from typing import Any

import click

from celery_cronstore.cli.base import (
    BadInputError,
    Command,
    CommandError,
    app_argument,
    get_app,
    get_settings,
    get_store,
)
from celery_cronstore.cli.group import cronstore
from celery_cronstore.store.migrate import UNKNOWN_APP

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
    help="Basic-auth users as user:password[:role][,...], role operator (default) or "
    "viewer (sees everything, changes nothing). Prefer CRONSTORE_WEB_USERS.",
)
@click.option(
    "--allowed-hosts",
    envvar="CRONSTORE_WEB_ALLOWED_HOSTS",
    metavar="NAMES",
    help="Host names the dashboard answers besides localhost and --host, as "
    "a.example,.b.example (a leading dot: the domain and its subdomains). Added to the "
    "cronstore_web_allowed_hosts setting.",
)
@click.option("--check", is_flag=True, help="Check the options and the store, then exit.")
@click.pass_context
def web(
    ctx: click.Context,
    host: str,
    port: int,
    read_only: bool,
    token: str | None,
    users: str | None,
    allowed_hosts: str | None,
    check: bool,
) -> None:
    """Serve the web dashboard: tasks, history, problems; edits with a login.

    This is Werkzeug's development server (one process). In production serve
    celery_cronstore.web.wsgi:application with gunicorn or waitress instead, e.g.
    CRONSTORE_APP=proj gunicorn -w 2 celery_cronstore.web.wsgi:application (docs/web.md).

    Bound to 127.0.0.1 by default. Any other address needs a token or users. On
    127.0.0.1 without either (and without --read-only) a one-time token is printed.
    Pages are served only to the Host names localhost, the --host address and
    --allowed-hosts (DNS rebinding).
    """
    try:
        from werkzeug.serving import run_simple

        from celery_cronstore.web import allowed_hosts_of, create_app
        from celery_cronstore.web.auth import parse_accounts
        from celery_cronstore.web.guard import parse_hosts
    except ImportError as exc:
        raise BadInputError(
            f"the dashboard needs the web extra: pip install 'celery-cronstore[web]' ({exc})"
        ) from None
    try:
        user_map, roles = parse_accounts(users or "")
    except ValueError as exc:
        raise BadInputError(f"--users: {exc}") from None
    app = get_app(ctx)
    hosts = [*allowed_hosts_of(app), *_host_names(allowed_hosts or "", parse_hosts)]
    if not is_loopback(host) and not (token or user_map):
        raise BadInputError(
            f"refusing to listen on {host} without credentials: set CRONSTORE_WEB_TOKEN "
            "or CRONSTORE_WEB_USERS (or bind to 127.0.0.1)"
        )
    if not (token or user_map or read_only or check):
        token = secrets.token_urlsafe(24)
        click.echo(f"one-time login token (this run only): {token}", err=True)
    store = get_store(ctx)
    try:
        dashboard = create_app(
            store,
            token=token,
            users=user_map,
            roles=roles,
            read_only=read_only,
            celery_app=app,
            secrets=get_settings(ctx).secrets,
            metrics=_has_prometheus(),
            allowed_hosts=hosts,
            bound_host=host,
        )
    except ValueError as exc:  # a token too short, a user without a password
        raise BadInputError(str(exc)) from None
    mode = "read-only" if dashboard.read_only else "read-write with login"
    names = ", ".join(dashboard.hosts.allowed)
    where = f"http://{_url_host(host)}:{port}/"
    click.echo(f"cronstore dashboard on {where} ({mode}; Host names: {names}); store {store.url}")
    click.echo(
        "this is Werkzeug's development server; in production serve "
        f"celery_cronstore.web.wsgi:application with gunicorn or waitress "
        f"(CRONSTORE_APP={_app_hint(ctx)} gunicorn -w 2 -b {_url_host(host)}:{port} "
        "celery_cronstore.web.wsgi:application; see docs/web.md)",
        err=True,
    )
    if check:
        return
    try:
        run_simple(host, port, dashboard, threaded=True, use_reloader=False)
    except OSError as exc:  # the port is taken, the address is not this machine's
        raise CommandError(f"cannot listen on {host}:{port}: {exc}") from None


def _host_names(text: str, parse: Any) -> list[str]:
    names: list[str] = parse(text)
    for name in names:
        if name != "*" and not all(c.isalnum() or c in ".-:_" for c in name.lstrip(".")):
            raise BadInputError(
                f"--allowed-hosts: {name[:80]!r} is not a host name (letters, digits, . - :)"
            )
    return names


def _app_hint(ctx: click.Context) -> str:
    return app_argument(ctx) or UNKNOWN_APP.replace(" ", "")


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _has_prometheus() -> bool:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return os.environ.get("CRONSTORE_WEB_METRICS", "1") != "0"
