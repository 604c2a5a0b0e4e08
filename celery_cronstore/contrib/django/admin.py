"""The Django admin of periodic tasks: what a django-celery-beat user expects, kept cheap.

* **Reads** of the list and the fire history go through the dashboard's read model
  (:mod:`celery_cronstore.store.read`): one page (``LIMIT per_page + 1``) along an index,
  no ``COUNT(*)``, so a page costs the same with 1,000 or 1,000,000 tasks. The list
  filters, search and sort are translated into its :class:`~.read.TaskQuery`.
* **Writes** go through the :class:`~celery_cronstore.store.Store` API (the form, the
  actions, delete), never through ``Model.save()``; "run now" claims then publishes, as
  ``celery -A app cronstore run-now`` does.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any, TypeVar, cast
from zoneinfo import ZoneInfo

from django.contrib import admin, messages
from django.contrib.admin.views.main import PAGE_VAR, ChangeList
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connections
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from celery_cronstore import actions
from celery_cronstore.contrib.django import conf
from celery_cronstore.contrib.django.forms import PeriodicTaskForm
from celery_cronstore.contrib.django.models import PeriodicTask
from celery_cronstore.errors import CronstoreError
from celery_cronstore.store.read import MAX_SEARCH, TaskQuery, TaskRow, fire_page, task_page
from celery_cronstore.timers import KINDS, parse_timer

__all__ = ["PeriodicTaskAdmin", "run_now"]

#: Next fire times the change page shows.
UPCOMING = 10
HISTORY_PAGE = 50
#: How many distinct owner types the owner filter offers.
OWNER_TYPES = 50
#: list_display column -> read-model sort key (each backed by an index).
SORTS = {"name": "name", "task": "task", "owner": "owner", "next_fire": "next"}

# Distinct owner types by a skip scan of the (owner_type, owner_id) index: one seek per
# type, instead of SELECT DISTINCT over every row. A constant: nothing is interpolated.
_OWNER_TYPES_SQL = """
WITH RECURSIVE t(v) AS (
    SELECT MIN(owner_type) FROM cronstore_periodic_task
    UNION ALL
    SELECT (SELECT MIN(owner_type) FROM cronstore_periodic_task WHERE owner_type > t.v)
    FROM t WHERE t.v IS NOT NULL
)
SELECT v FROM t WHERE v IS NOT NULL LIMIT %s
"""


_F = TypeVar("_F", bound=Callable[..., Any])


def display(**kwargs: Any) -> Callable[[_F], _F]:
    """Return ``admin.display(**kwargs)``, typed (Django ships no types)."""
    return cast(Callable[[_F], _F], admin.display(**kwargs))


def action(**kwargs: Any) -> Callable[[_F], _F]:
    """Return ``admin.action(**kwargs)``, typed (Django ships no types)."""
    return cast(Callable[[_F], _F], admin.action(**kwargs))


def html(template: str, *args: Any) -> str:
    """Return ``format_html(template, *args)``: every argument escaped, the result safe."""
    return cast(str, format_html(template, *args))


# -- formatting -----------------------------------------------------------------------------


def local(instant: datetime | None, tz: str) -> str:
    """Return ``2026-05-01 14:00:00 CEST``: ``instant`` as the task's zone shows it."""
    if instant is None:
        return "-"
    try:
        zone: Any = ZoneInfo(tz)
    except (ValueError, LookupError):  # a zone the row should not have: show UTC
        zone = timezone.utc
    moment = instant.astimezone(zone)
    return f"{moment:%Y-%m-%d %H:%M:%S} {moment.tzname() or tz}"


@functools.lru_cache(maxsize=4096)
def describe(timer: str, kind: str, tz: str) -> str:
    """Return a timer's description, or why it cannot be read."""
    try:
        return parse_timer(timer, kind=kind, tz=tz).describe()
    except (CronstoreError, ValueError) as exc:
        return f"invalid: {exc}"


# -- run now --------------------------------------------------------------------------------


def run_now(name: str, *, store: Any = None, app: Any = None) -> str:
    """Claim and publish one extra fire of ``name`` now; return its Celery task id.

    The path of ``celery -A app cronstore run-now`` (:func:`celery_cronstore.actions.run_now`).
    """
    store = store if store is not None else conf.get_store()
    app = app if app is not None else conf.celery_app()
    node = f"django-admin@{socket.gethostname()}:{os.getpid()}"
    claim = actions.run_now(app, store, name, node=node)
    return str(claim.task_id)


# -- list filters ---------------------------------------------------------------------------


class _Choice(admin.SimpleListFilter):  # type: ignore[misc]  # Django ships no types
    """A filter whose value is one TaskQuery field; its ORM half serves the actions."""

    options: tuple[tuple[str, str], ...] = ()

    def lookups(self, request: HttpRequest, model_admin: Any) -> Iterable[tuple[str, str]]:
        return self.options

    def query_value(self) -> Any:
        """Return the value for :class:`TaskQuery` (``None``: not filtered)."""
        value = self.value()
        return {"yes": True, "no": False}.get(value) if value is not None else None


class EnabledFilter(_Choice):
    title = "enabled"
    parameter_name = "enabled"
    options = (("yes", "Yes"), ("no", "No"))

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.query_value()
        return queryset if value is None else queryset.filter(enabled=value)


class ErrorFilter(_Choice):
    title = "in error"
    parameter_name = "error"
    options = (("yes", "Yes"), ("no", "No"))

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.query_value()
        return queryset if value is None else queryset.filter(error__isnull=not value)


class KindFilter(_Choice):
    title = "timer kind"
    parameter_name = "kind"
    options = tuple((kind, kind) for kind in KINDS)

    def query_value(self) -> Any:
        return self.value() or None

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.value()
        return queryset.filter(timer_kind=value) if value else queryset


class OwnerTypeFilter(_Choice):
    title = "owner type"
    parameter_name = "owner_type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> Iterable[tuple[str, str]]:
        with connections[conf.database()].cursor() as cursor:
            cursor.execute(_OWNER_TYPES_SQL, [OWNER_TYPES])
            return [(row[0], row[0]) for row in cursor.fetchall()]

    def query_value(self) -> Any:
        return self.value() or None

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.value()
        return queryset.filter(owner_type=value) if value else queryset


# -- the list page --------------------------------------------------------------------------


class _PageOnly(Paginator):  # type: ignore[misc]  # Django ships no types
    """A paginator over one fetched page: the count is what is known, never a COUNT(*)."""

    def __init__(self, rows: list[Any], page: int, per_page: int, has_next: bool) -> None:
        super().__init__(rows, per_page)
        self.known = (page - 1) * per_page + len(rows) + (1 if has_next else 0)

    @property
    def count(self) -> int:
        return self.known


def _to_model(row: TaskRow) -> PeriodicTask:
    task = PeriodicTask(
        id=row.id,
        name=row.name,
        task=row.task,
        timer_kind=row.timer_kind,
        timer=row.timer,
        tz=row.tz,
        enabled=row.enabled,
        owner_type=row.owner_type,
        owner_id=row.owner_id,
        next_run=row.next_run,
        last_fire=row.last_fire,
        error=row.error,
    )
    task.last_state = row.last_state
    return task


class TaskChangeList(ChangeList):  # type: ignore[misc]  # Django ships no types
    """The change list, one page read through :func:`~.read.task_page` (no counting)."""

    has_next = False

    def task_query(self) -> TaskQuery:
        """Return the read-model query for this request's filters, search, sort and page."""
        filters = {
            spec.parameter_name: spec.query_value()
            for spec in self.filter_specs
            if isinstance(spec, _Choice)
        }
        sort, descending = "name", False
        for index, direction in self.get_ordering_field_columns().items():
            column = self.list_display[index] if isinstance(index, int) else None
            if column in SORTS:
                sort, descending = SORTS[column], direction == "desc"
                break
        return TaskQuery(
            search=(self.query or "")[:MAX_SEARCH],
            enabled=filters.get("enabled"),
            in_error=filters.get("error"),
            owner_type=filters.get("owner_type"),
            kind=filters.get("kind"),
            sort=sort,
            descending=descending,
            page=max(1, self.page_num),
            per_page=self.list_per_page,
        )

    def get_results(self, request: HttpRequest) -> None:
        query = self.task_query()
        with conf.get_store().engine.connect() as conn:
            page = task_page(conn, query)
        rows = [_to_model(row) for row in page.rows]
        self.has_next = page.has_next
        self.result_list = rows
        # No COUNT(*): "select all N" is never offered (N would be a guess), and the
        # pagination template shows previous / next instead of a page count.
        self.result_count = len(rows)
        self.full_result_count = None
        self.show_full_result_count = False
        self.show_admin_actions = True
        self.can_show_all = False
        self.multi_page = page.has_next or query.page > 1
        self.paginator = _PageOnly(rows, query.page, query.per_page, page.has_next)

    def page_url(self, page: int) -> str:
        """Return the query string of another page of this list."""
        return str(self.get_query_string({PAGE_VAR: page}))


# -- the admin ------------------------------------------------------------------------------


def _outcome(state: str | None) -> str:
    return state or "-"


class PeriodicTaskAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django ships no types
    """Periodic tasks: list, filters, search, actions, edit with validation, fire history."""

    form = PeriodicTaskForm
    list_display = (
        "name",
        "task",
        "timer_column",
        "tz",
        "enabled",
        "owner",
        "next_fire",
        "last_fire_column",
        "last_outcome",
        "error_column",
    )
    list_display_links = ("name",)
    #: Only the columns the read model sorts along an index.
    sortable_by = tuple(SORTS)
    list_filter = (EnabledFilter, ErrorFilter, KindFilter, OwnerTypeFilter)
    search_fields = ("name", "task", "owner_id")
    search_help_text = (
        "Name, task or owner id contains the text; TYPE:ID finds the tasks of one owner."
    )
    ordering = ("name",)
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # facets count every filter choice
    actions = ("enable_tasks", "disable_tasks", "run_tasks_now", "delete_selected")
    save_as = False
    readonly_fields = (
        "upcoming",
        "next_fire_detail",
        "last_fire_detail",
        "last_run_detail",
        "total_run_count",
        "error_detail",
        "source",
        "version",
        "recent_fires",
    )
    fieldsets = (
        (None, {"fields": ("name", "task", "enabled", "description")}),
        ("Timer", {"fields": ("timer", "timer_kind", "tz", "upcoming")}),
        ("Arguments", {"fields": ("args", "kwargs", "options")}),
        (
            "Policies",
            {
                "fields": (
                    ("misfire_policy", "misfire_limit"),
                    ("overlap_policy", "start_deadline"),
                    ("tolerance", "max_retries"),
                )
            },
        ),
        ("Owner", {"fields": (("owner_type", "owner_id"),)}),
        (
            "State",
            {
                "fields": (
                    "next_fire_detail",
                    "last_fire_detail",
                    "last_run_detail",
                    "total_run_count",
                    "error_detail",
                    ("source", "version"),
                    "recent_fires",
                )
            },
        ),
    )

    # -- where the rows are -------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).using(conf.database())

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return TaskChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: Any, search_term: str
    ) -> tuple[Any, bool]:
        """Filter as the read model does (the ORM half serves the actions)."""
        from django.db.models import Q

        text = search_term.strip()[:MAX_SEARCH]
        if not text:
            return queryset, False
        owner_type, sep, owner_id = text.partition(":")
        if sep and owner_type and owner_id and " " not in owner_type:
            return queryset.filter(owner_type=owner_type, owner_id=owner_id), False
        match = Q(name__icontains=text) | Q(task__icontains=text) | Q(owner_id__icontains=text)
        return queryset.filter(match), False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # The name is the key the store updates by; renaming is not part of its API.
        return ("name", *self.readonly_fields) if obj is not None else ()

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is not None:
            return self.fieldsets
        # Adding: nothing to show yet but the editable fields.
        add: list[tuple[str | None, dict[str, Any]]] = []
        for title, opts in self.fieldsets:
            if title == "State":
                continue
            fields = [f for f in opts["fields"] if f not in self.readonly_fields]
            add.append((title, {**opts, "fields": tuple(fields)}))
        return tuple(add)

    # -- list columns -------------------------------------------------------------------

    @display(description="timer")
    def timer_column(self, obj: PeriodicTask) -> str:
        return html(
            "<code>{}</code><br><small>{}</small>",
            obj.timer,
            describe(obj.timer, obj.timer_kind, obj.tz),
        )

    @display(description="owner", ordering="owner_type")
    def owner(self, obj: PeriodicTask) -> str:
        return "-" if obj.owner is None else f"{obj.owner_type}:{obj.owner_id}"

    @display(description="next fire (task's zone)", ordering="next_run")
    def next_fire(self, obj: PeriodicTask) -> str:
        if not obj.enabled:
            return "disabled"
        return local(obj.next_run, obj.tz)

    @display(description="last fire")
    def last_fire_column(self, obj: PeriodicTask) -> str:
        return local(obj.last_fire, obj.tz)

    @display(description="last outcome")
    def last_outcome(self, obj: PeriodicTask) -> str:
        return _outcome(obj.last_state)

    @display(description="error")
    def error_column(self, obj: PeriodicTask) -> str:
        return obj.error or ""

    # -- change page, read-only parts -----------------------------------------------------

    @display(description="next fire times (task's zone)")
    def upcoming(self, obj: PeriodicTask) -> str:
        if not obj.enabled:
            return "disabled: no fire times"
        try:
            times = conf.get_store().next_runs(obj.name, UPCOMING)
        except (CronstoreError, ValueError) as exc:
            return f"cannot compute: {exc}"
        if not times:
            return "fires no more"
        return html(
            "<ol class='cronstore-upcoming'>{}</ol>",
            format_html_join("", "<li>{}</li>", ((local(t, obj.tz),) for t in times)),
        )

    @display(description="next run")
    def next_fire_detail(self, obj: PeriodicTask) -> str:
        return self.next_fire(obj)

    @display(description="last fire")
    def last_fire_detail(self, obj: PeriodicTask) -> str:
        return local(obj.last_fire, obj.tz)

    @display(description="last run")
    def last_run_detail(self, obj: PeriodicTask) -> str:
        return local(obj.last_run, obj.tz)

    @display(description="error")
    def error_detail(self, obj: PeriodicTask) -> str:
        return obj.error or "-"

    @display(description="recent fires")
    def recent_fires(self, obj: PeriodicTask) -> str:
        with conf.get_store().engine.connect() as conn:
            page = fire_page(conn, obj.pk, per_page=10)
        url = reverse("admin:cronstore_periodictask_fires", args=[obj.pk])
        if not page.rows:
            return "no fires yet"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (local(f.fire_time, obj.tz), f.state, f.node or f.claimed_by or "-", f.reason or "")
                for f in page.rows
            ),
        )
        return html(
            "<table><thead><tr><th>fire time</th><th>state</th><th>node</th><th>reason</th>"
            "</tr></thead><tbody>{}</tbody></table><p><a href='{}'>All fires, newest first</a>"
            "</p>",
            rows,
            url,
        )

    # -- writes: through the Store --------------------------------------------------------

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # Not in transaction.atomic() as ModelAdmin does: the store writes on its own
        # connection, and an ORM transaction opened first (a read snapshot on SQLite WAL)
        # could not write the admin log entry after the store's commit.
        return self._changeform_view(request, object_id, form_url, extra_context)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self._delete_view(request, object_id, extra_context)  # see changeform_view

    def save_model(self, request: HttpRequest, obj: PeriodicTask, form: Any, change: bool) -> None:
        """Take what the form's store write returned (the form wrote; nothing saves here)."""
        record = form.record
        obj.pk = record.id
        obj.name = record.name
        obj.enabled = record.enabled
        obj.next_run = record.next_run
        if record.enabled and record.next_run is not None:
            when = local(record.next_run, record.tz)
            self.message_user(request, f"{record.name} fires next at {when}.", messages.INFO)

    def delete_model(self, request: HttpRequest, obj: PeriodicTask) -> None:
        conf.get_store().remove(obj.name)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        store = conf.get_store()
        for name in queryset.values_list("name", flat=True):
            store.remove(name)

    def _each(
        self,
        request: HttpRequest,
        queryset: Any,
        act: Callable[[str], object],
        done: str,
    ) -> None:
        changed, failed = [], []
        for obj in queryset.only("pk", "name"):
            try:
                act(obj.name)
            except (CronstoreError, ValueError, LookupError) as exc:
                failed.append(f"{obj.name}: {exc}")
            else:
                changed.append(obj.name)
                self.log_change(request, obj, done)
        if changed:
            self.message_user(request, f"{done}: {', '.join(changed)}.", messages.SUCCESS)
        for problem in failed:
            self.message_user(request, problem, messages.ERROR)

    @action(description="Enable selected periodic tasks", permissions=["change"])
    def enable_tasks(self, request: HttpRequest, queryset: Any) -> None:
        self._each(request, queryset, conf.get_store().enable, "Enabled")

    @action(description="Disable selected periodic tasks", permissions=["change"])
    def disable_tasks(self, request: HttpRequest, queryset: Any) -> None:
        self._each(request, queryset, conf.get_store().disable, "Disabled")

    @action(description="Run selected periodic tasks now", permissions=["change"])
    def run_tasks_now(self, request: HttpRequest, queryset: Any) -> None:
        try:
            app = conf.celery_app()
        except (conf.NoCeleryApp, ImportError) as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        store = conf.get_store()
        self._each(request, queryset, lambda name: run_now(name, store=store, app=app), "Sent")

    # -- the fire history ---------------------------------------------------------------

    def get_urls(self) -> list[Any]:
        fires = path(
            "<path:object_id>/fires/",
            self.admin_site.admin_view(self.fires_view),
            name="cronstore_periodictask_fires",
        )
        return [fires, *super().get_urls()]

    def fires_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Show a task's ledger, newest fire first, one page at a time (read-only)."""
        obj = self.get_object(request, object_id)
        if obj is None:
            raise Http404(f"no periodic task with id {object_id!r}")
        if not self.has_view_or_change_permission(request, obj):
            raise PermissionDenied
        try:
            number = max(1, int(request.GET.get("p", "1")))
        except ValueError:
            number = 1
        with conf.get_store().engine.connect() as conn:
            page = fire_page(conn, obj.pk, page=number, per_page=HISTORY_PAGE)
        rows = [
            {
                "fire": f,
                "fire_time": local(f.fire_time, obj.tz),
                "fire_until": local(f.fire_until, obj.tz) if f.fire_until else "",
                "published": local(f.published_at, obj.tz),
                "started": local(f.started_at, obj.tz),
                "finished": local(f.finished_at, obj.tz),
                "lateness": "-" if f.lateness is None else f"{f.lateness:.3f} s",
            }
            for f in page.rows
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": f"Fires of {obj.name}",
            "subtitle": None,
            "opts": self.opts,
            "original": obj,
            "page": page,
            "rows": rows,
            "zone": obj.tz,
            "has_view_permission": True,
        }
        return TemplateResponse(request, "admin/cronstore/periodictask/fires.html", context)


admin.site.register(PeriodicTask, PeriodicTaskAdmin)
