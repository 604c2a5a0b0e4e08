"""The dashboard as a WSGI application: routing, access control, pages and actions.

Reads go through :mod:`celery_cronstore.store.read` (bounded, indexed queries); every
write goes through the :class:`~celery_cronstore.store.Store` API (or the claimer for
"run now", as ``cronstore run-now`` does), so validation and planning live in one place.
The write pages are in :mod:`.writes`, login and logout in :mod:`.login`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timezone
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.utils import redirect
from werkzeug.wrappers import Request, Response

from celery_cronstore import actions, policy
from celery_cronstore.catalog import TaskCatalog
from celery_cronstore.config import Config
from celery_cronstore.errors import (
    CronstoreError,
    StoreUnavailableError,
    TaskNotFoundError,
    TimerError,
)
from celery_cronstore.policy.outcomes import health
from celery_cronstore.secrets import scrub
from celery_cronstore.store import Store
from celery_cronstore.store.outcomes import health_facts
from celery_cronstore.store.read import (
    SORTS,
    fire_page,
    fire_series,
    task_page,
)
from celery_cronstore.store.seam import NullSeam
from celery_cronstore.timers import KINDS
from celery_cronstore.web import calendars, forms, login, ops, writes
from celery_cronstore.web.auth import SESSION_COOKIE, Credentials, Identity, Signer, from_header
from celery_cronstore.web.context import LIVE_EVERY, LIVE_HEADER, LIVE_PAGES, Ctx, SummaryLine
from celery_cronstore.web.guard import HostCheck, LoginLimiter
from celery_cronstore.web.problems import page as problems_page
from celery_cronstore.web.render import (
    describe_timer,
    environment,
    fmt_local,
    fmt_utc,
    lateness_chart,
    relative,
    states_in,
)

__all__ = ["CSP", "Ctx", "WebApp"]

logger = logging.getLogger("celery_cronstore.web")

#: No inline script or style anywhere; scripts, styles and fetches from this origin only.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_STATIC = {"app.css": "text/css", "timer.js": "text/javascript", "live.js": "text/javascript"}
#: Outcome messages after a write (a code in the redirect, never text from the URL).
DONE = {
    "enabled": "Enabled.",
    "disabled": "Disabled.",
    "run": "Sent one fire now; it is at the top of the history.",
    "saved": "Saved.",
    "added": "Added.",
    "removed": "Removed.",
    "paused": "Paused.",
    "resumed": "Resumed.",
}


class WebApp:
    """The dashboard; a WSGI callable (mount it anywhere: URLs follow ``SCRIPT_NAME``)."""

    def __init__(
        self,
        store: Store,
        *,
        credentials: Credentials | None = None,
        read_only: bool = False,
        celery_app: Any = None,
        secret_key: bytes | None = None,
        secrets: Iterable[str] = (),
        metrics: bool = True,
        allowed_hosts: Iterable[str] = (),
        bound_host: str | None = None,
        limiter: LoginLimiter | None = None,
        display_tz: str = "UTC",
    ) -> None:
        if celery_app is not None and isinstance(store.seam, NullSeam):
            # A store built without the app: refuse what beat would (an unknown task,
            # args that do not fit) as the command line does.
            store = store.checked_by(TaskCatalog(celery_app))
        self.store = store
        self.credentials = credentials or Credentials()
        #: Nobody writes without logging in: without credentials the dashboard only reads.
        self.read_only = read_only or not self.credentials.configured
        self.celery_app = celery_app
        #: The app's ``cronstore_*`` settings, read (and a bad one refused) at start.
        self.config = Config() if celery_app is None else Config.from_app(celery_app)
        self.signer = Signer(secret_key)
        self.secrets = [*secrets, *self.credentials.secrets()]
        self.metrics = metrics
        #: The ``Host`` names served (DNS rebinding); see :mod:`.guard`.
        self.hosts = HostCheck.build(allowed_hosts, bound_host)
        #: Attempts to log in (form or header) per client address.
        self.limiter = limiter if limiter is not None else LoginLimiter()
        self.node = f"web@{socket.gethostname()}:{os.getpid()}"
        # Pages list instants in one zone, named in the column headers.
        self.env = environment(display_tz)
        self.env.filters["scrub"] = lambda text: None if text is None else self.scrub(text)
        # The task form's fields, read from the table each time a form is drawn.
        self.env.globals["task_fields"] = forms.form_fields
        #: The summary line on every page (read at most every few seconds).
        self.summaries = SummaryLine()
        self.url_map = Map(
            [
                Rule("/", endpoint="tasks"),
                Rule("/task", endpoint="task"),
                Rule("/task/edit", endpoint="edit", methods=["GET", "POST"]),
                Rule("/task/new", endpoint="new", methods=["GET", "POST"]),
                Rule("/task/action", endpoint="action", methods=["POST"]),
                Rule("/problems", endpoint="problems"),
                Rule("/audit", endpoint="audit"),
                Rule("/calendars", endpoint="calendars"),
                Rule("/calendar", endpoint="calendar", methods=["POST"]),
                Rule("/api/preview", endpoint="preview"),
                Rule("/login", endpoint="login", methods=["GET", "POST"]),
                Rule("/logout", endpoint="logout", methods=["POST"]),
                Rule("/metrics", endpoint="metrics"),
                Rule("/static/<file>", endpoint="static"),
            ]
        )

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        request = Request(environ)
        response = self.respond(request)
        _harden(response, request)
        return response(environ, start_response)

    def scrub(self, text: str) -> str:
        """Return ``text`` without passwords (database URLs, our own credentials)."""
        return scrub(text, self.secrets)

    # -- dispatch ---------------------------------------------------------------------------

    def respond(self, request: Request) -> Response:
        try:
            return self.dispatch(request)
        except Exception:  # a bug: say so in one line, keep the traceback in the log
            logger.exception("web: %s %s failed", request.method, request.path)
            return self.plain(500, "internal error: the dashboard logged the details")

    def dispatch(self, request: Request) -> Response:
        if request.path == "/healthz":  # for probes: any Host, no login; it shows nothing
            return ops.healthz(self)
        refused = self.hosts.refusal(request.headers.get("Host"))
        if refused is not None:
            return self.plain(400, refused)
        urls = self.url_map.bind_to_environ(request.environ)
        try:
            endpoint, values = urls.match()
        except HTTPException as exc:
            return self.plain(exc.code or 404, exc.description or "not found")
        if endpoint == "static":
            return self.static(values["file"])
        header = request.headers.get("Authorization")
        if header and self.credentials.configured:
            wait = self.limiter.take(request.remote_addr)
            if wait:
                return login.too_many(self, wait)
        identity = self.identify(request)
        if header and identity is not None:
            self.limiter.give_back(request.remote_addr)
        live = bool(request.headers.get(LIVE_HEADER))  # live.js: never to the login page
        if self.credentials.configured and identity is None and endpoint != "login":
            if endpoint in ("preview", "metrics") or request.method == "POST" or live:
                response = self.plain(401, "authentication required")
                response.headers["WWW-Authenticate"] = 'Bearer realm="cronstore"'
                return response
            return redirect(urls.build("login", {"next": _local_path(request)}), 303)
        if endpoint in ops.WRITES and identity is not None and not identity.may_write:
            return ops.forbidden(self, Ctx(request, urls, identity, self.now()))
        if request.method == "POST" and endpoint not in ("login", "logout"):
            refused = self.write_refusal(request, identity)
            if refused is not None:
                return self.plain(403, refused)
        ctx = Ctx(request, urls, identity, self.now())
        try:
            handler: Callable[[Ctx], Response] = getattr(self, f"page_{endpoint}")
            return handler(ctx)
        except TaskNotFoundError as exc:
            return self.plain(404, self.scrub(str(exc)))
        except (NotFound, MethodNotAllowed) as exc:
            return self.plain(exc.code or 404, exc.description or "")
        except StoreUnavailableError as exc:
            return self.unavailable(ctx, exc)

    def now(self) -> datetime:
        """Return the store's now, or this host's while the database does not answer."""
        try:
            return self.store.now()
        except StoreUnavailableError:
            return datetime.now(timezone.utc)

    def unavailable(self, ctx: Ctx, exc: StoreUnavailableError) -> Response:
        """Return the 503 page for a database that does not answer."""
        logger.warning("web: %s", self.scrub(str(exc)))
        shown = ctx.identity is not None or not self.credentials.configured
        response = self.render(
            ctx, "unavailable.html", 503, reason=self.scrub(str(exc)) if shown else None
        )
        response.headers["Retry-After"] = "10"
        return response

    def identify(self, request: Request) -> Identity | None:
        """Return who sent ``request`` (header or session cookie), or ``None``."""
        if not self.credentials.configured:
            return None
        header, cookie = request.headers.get("Authorization"), request.cookies.get(SESSION_COOKIE)
        if header:
            found = from_header(header, self.credentials)
        else:
            found = None if cookie is None else self.signer.read_session(cookie)
        # The role is the configuration's now (a removed user's session is no longer valid).
        role = None if found is None else self.credentials.role_of(found.name)
        return None if found is None or role is None else replace(found, role=role)

    def write_refusal(self, request: Request, identity: Identity | None) -> str | None:
        """Return why a write must be refused, or ``None`` to let it through."""
        if self.read_only:
            if not self.credentials.configured:
                return "read-only: start the dashboard with a token or users to allow writes"
            return "read-only: the dashboard was started with --read-only"
        if identity is None:
            return "authentication required"
        if identity.via == "bearer":
            return None  # a browser never adds this header by itself: no CSRF risk
        origin = request.headers.get("Origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.host:
            return "cross-origin write refused"
        token = request.form.get("csrf", "")
        if not self.signer.check_csrf(identity, token):
            return "missing or wrong CSRF token: reload the page and try again"
        return None

    # -- responses --------------------------------------------------------------------------

    def render(self, ctx: Ctx, template: str, status: int = 200, **values: Any) -> Response:
        identity = ctx.identity
        html = self.env.get_template(template).render(
            url=lambda endpoint, **args: ctx.urls.build(endpoint, args),
            now=ctx.now,
            identity=identity,
            can_write=not self.read_only and identity is not None and identity.may_write,
            read_only=self.read_only,
            login_possible=self.credentials.configured,
            csrf=self.signer.csrf(identity) if identity is not None else "",
            # Nothing about the store before login (where one is possible; never on its page).
            store_url=(
                self.scrub(self.store.url)
                if identity is not None
                or not (self.credentials.configured or template == "login.html")
                else None
            ),
            local=fmt_local,
            relative=relative,
            utc=fmt_utc,
            describe=describe_timer,
            done=DONE.get(ctx.request.args.get("done", "")),
            summary=self.summaries.for_page(self.store, ctx, template, self.credentials.configured),
            live=LIVE_EVERY if template in LIVE_PAGES else 0,
            **values,
        )
        return Response(html, status, content_type="text/html; charset=utf-8")

    def plain(self, status: int, message: str) -> Response:
        return Response(message + "\n", status, content_type="text/plain; charset=utf-8")

    def static(self, name: str) -> Response:
        if name not in _STATIC:
            return self.plain(404, "not found")
        body = resources.files("celery_cronstore.web").joinpath("static", name).read_bytes()
        response = Response(body, content_type=f"{_STATIC[name]}; charset=utf-8")
        response.headers["Cache-Control"] = "public, max-age=300"
        return response

    def back_to_task(self, ctx: Ctx, name: str, done: str) -> Response:
        return redirect(ctx.urls.build("task", {"name": name, "done": done}), 303)

    # -- pages ------------------------------------------------------------------------------

    def page_tasks(self, ctx: Ctx) -> Response:
        args = ctx.request.args
        try:
            query = forms.task_query(args)
        except ValueError as exc:
            return self.plain(400, str(exc))
        with self.store.engine.connect() as conn:
            page = task_page(conn, query)
            facts = health_facts(conn, [t.id for t in page.rows])
        grace = self.config.misfire_grace
        healths = {i: health(f.facts, ctx.now, grace=grace) for i, f in facts.items()}
        return self.render(
            ctx,
            "tasks.html",
            page=page,
            query=query,
            sorts=SORTS,
            kinds=KINDS,
            args=args,
            healths=healths,
        )

    def page_task(self, ctx: Ctx, status: int = 200, **extra: Any) -> Response:
        name = ctx.request.args.get("name") or ctx.request.form.get("name", "")
        record = self.store.get(name)
        try:
            history_page = forms.page_number(ctx.request.args, "hp")
        except ValueError as exc:
            return self.plain(400, str(exc))
        try:
            upcoming = self.store.next_runs(name, 10, after=ctx.now)
            timer_error = None
        except (TimerError, ValueError) as exc:
            upcoming, timer_error = [], str(exc)
        with self.store.engine.connect() as conn:
            history = fire_page(conn, record.id, page=history_page, per_page=50)
            series = fire_series(conn, record.id, limit=200)
        return self.render(
            ctx,
            "task.html",
            status,
            task=record,
            upcoming=upcoming,
            timer_error=timer_error,
            ended=policy.ended(record, ctx.now),
            history=history,
            chart=lateness_chart(series),
            legend=states_in(series),
            can_run=self.celery_app is not None,
            **extra,
        )

    def page_problems(self, ctx: Ctx) -> Response:
        return problems_page(self, ctx)

    def page_preview(self, ctx: Ctx) -> Response:
        args = ctx.request.args
        result = forms.preview(
            args.get("timer", ""), args.get("kind") or None, args.get("tz") or None, ctx.now
        )
        return Response(json.dumps(result), content_type="application/json")

    def page_metrics(self, ctx: Ctx) -> Response:
        if not self.metrics:
            return self.plain(404, "metrics are off")
        from celery_cronstore.web.metrics import exposition

        body, content_type, error = exposition(
            self.store,
            ctx.now,
            max_tasks=self.config.metrics_max_tasks,
            grace=self.config.misfire_grace,
        )
        if error is not None:
            logger.warning("web: /metrics: %s", self.scrub(str(error)))
        return Response(body, content_type=content_type)

    def page_audit(self, ctx: Ctx) -> Response:
        return ops.audit_page(self, ctx)

    def page_login(self, ctx: Ctx) -> Response:
        return login.login(self, ctx)

    def page_logout(self, ctx: Ctx) -> Response:
        return login.logout(self, ctx)

    # -- writes (celery_cronstore.web.writes) -----------------------------------------------

    def page_action(self, ctx: Ctx) -> Response:
        return writes.action(self, ctx)

    def page_edit(self, ctx: Ctx) -> Response:
        return writes.edit(self, ctx)

    def page_new(self, ctx: Ctx) -> Response:
        return writes.new(self, ctx)

    page_calendars, page_calendar = calendars.page, calendars.write  # exclusion calendars

    def run_now(self, name: str, store: Store | None = None) -> None:
        """Claim and publish one extra fire of ``name`` (as ``cronstore run-now`` does),
        through ``store`` if given (one :meth:`Store.acting` as the user, for the audit)."""
        if self.celery_app is None:
            raise CronstoreError("run now needs the Celery app: create_app(store, celery_app=app)")
        actions.run_now(self.celery_app, store or self.store, name, node=self.node)


def _harden(response: Response, request: Request) -> None:
    headers = response.headers
    headers.setdefault("Content-Security-Policy", CSP)
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("X-Frame-Options", "DENY")
    headers.setdefault("Referrer-Policy", "same-origin")
    if request.path != "/static" and not request.path.startswith("/static/"):
        headers.setdefault("Cache-Control", "no-store")


def _local_path(request: Request) -> str:
    query = request.query_string.decode("latin-1")
    return request.script_root + request.path + (f"?{query}" if query else "")
