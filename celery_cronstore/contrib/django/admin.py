"""The Django admin of periodic tasks: what a django-celery-beat user expects, kept cheap.

* **Reads** of the list and the fire history go through the dashboard's read model
  (:mod:`celery_cronstore.store.read`): one page (``LIMIT per_page + 1``) along an index,
  no ``COUNT(*)``, so a page costs the same with 1,000 or 1,000,000 tasks. The list
  filters, search and sort are translated into its :class:`~.read.TaskQuery`.
* **Writes** go through the :class:`~celery_cronstore.store.Store` API (the form, the
  actions, delete), never through ``Model.save()``; "run now" claims then publishes, as
  ``celery -A app cronstore run-now`` does.

This module holds the ModelAdmin and its registration; the list's filters are in
:mod:`.filters`, the counting-free change list in :mod:`.changelist`, the fire history
(recent fires and the ledger view) in :mod:`.history`, the add/change form in :mod:`.forms`,
pause and resume in :mod:`.pausing`, the display helpers in :mod:`.formatting` and the
exclusion calendars' admin in :mod:`.calendars_admin`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html_join

from celery_cronstore import actions
from celery_cronstore.contrib.django import conf, pausing
from celery_cronstore.contrib.django.calendars_admin import CalendarAdmin
from celery_cronstore.contrib.django.changelist import SORTS, TaskChangeList
from celery_cronstore.contrib.django.filters import (
    EnabledFilter,
    ErrorFilter,
    KindFilter,
    OwnerTypeFilter,
)
from celery_cronstore.contrib.django.formatting import (
    action,
    describe,
    display,
    html,
    in_zone,
    local,
    shown,
)
from celery_cronstore.contrib.django.forms import PeriodicTaskForm, build_form, edited
from celery_cronstore.contrib.django.history import HISTORY_PAGE, FireHistoryAdmin
from celery_cronstore.contrib.django.models import Calendar, PeriodicTask
from celery_cronstore.errors import CronstoreError
from celery_cronstore.store.read import MAX_SEARCH

__all__ = ["HISTORY_PAGE", "PeriodicTaskAdmin", "actor_of", "run_now", "writer"]

#: Next fire times the change page shows.
UPCOMING = 10
#: Characters of a task's error the list shows.
LIST_ERROR = 300


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


def actor_of(request: HttpRequest) -> str:
    """Return who makes an admin request, for the audit trail (``request.user``)."""
    user = getattr(request, "user", None)
    name = user.get_username() if user is not None and user.is_authenticated else ""
    return str(name) or "anonymous"


def writer(request: HttpRequest) -> Any:
    """Return the store writing as the request's user, from the ``admin`` window."""
    return conf.get_store().acting(actor_of(request), "admin")


# -- the admin ------------------------------------------------------------------------------


def _outcome(state: str | None) -> str:
    return state or "-"


class PeriodicTaskAdmin(FireHistoryAdmin):
    """Periodic tasks: list, filters, search, actions, edit with validation, fire history."""

    form = PeriodicTaskForm

    class Media:
        #: The list's layout: it fits a 1600 px window (static/cronstore/admin.css).
        css = {"all": ("cronstore/admin.css",)}

    list_display = (
        "name",
        "task",
        "timer_column",
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
    actions = (
        *("enable_tasks", "disable_tasks", "run_tasks_now", "pause_tasks", "resume_tasks"),
        "delete_selected",
    )
    save_as = False
    readonly_fields = (
        "pause_detail",
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
        # loaded_version: hidden, the version the page was opened on (the store refuses
        # to save over a newer one).
        (None, {"fields": ("name", "task", "enabled", "description", "loaded_version")}),
        (
            "Timer",
            {
                "fields": (
                    "timer",
                    "timer_kind",
                    "tz",
                    "start_at",
                    "end_at",
                    "max_runs",
                    "jitter",
                    "upcoming",
                )
            },
        ),
        ("Arguments", {"fields": ("args", "kwargs", "options")}),
        (
            "Policies",
            {
                "fields": (
                    ("misfire_policy", "misfire_limit"),
                    ("overlap_policy", "start_deadline"),
                    ("abandon_policy", "tolerance", "max_retries"),
                )
            },
        ),
        ("Owner", {"fields": (("owner_type", "owner_id"),)}),
        (
            "State",
            {
                "fields": (
                    "pause_detail",
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

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        # The form's fields come from the field table as it is now (not at import).
        readonly = tuple(self.get_readonly_fields(request, obj))
        kwargs["form"] = build_form(exclude=readonly, actor=actor_of(request))
        return super().get_form(request, obj, change, **kwargs)

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        shown = {
            name
            for _, opts in self.fieldsets
            for entry in opts["fields"]
            for name in ((entry,) if isinstance(entry, str) else entry)
        }
        more = tuple(key for key in edited() if key not in shown)
        if more:  # a field of the table this layout does not place yet
            return (*self._fieldsets(obj), ("More", {"fields": more}))
        return self._fieldsets(obj)

    def _fieldsets(self, obj: Any) -> Any:
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
        # The description names the zone where it decides the fire times, and none for
        # an interval; a zone column of its own would not fit a 1600 px window beside
        # the navigation and the filters.
        return html(
            "<code>{}</code><br><small>{}</small>",
            obj.timer,
            describe(obj.timer, obj.timer_kind, obj.tz),
        )

    @display(description="owner", ordering="owner_type")
    def owner(self, obj: PeriodicTask) -> str:
        return "-" if obj.owner is None else f"{obj.owner_type}:{obj.owner_id}"

    @display(description=in_zone("next fire"), ordering="next_run")
    def next_fire(self, obj: PeriodicTask) -> str:
        if not obj.enabled:
            return "disabled"
        paused: Any = obj.paused_at  # a model column: None until paused
        if paused is not None:  # planned for its resume, or for none
            return pausing.in_list(obj)
        return shown(obj.next_run)

    @display(description=in_zone("last fire"))
    def last_fire_column(self, obj: PeriodicTask) -> str:
        return shown(obj.last_fire)

    @display(description="last outcome")
    def last_outcome(self, obj: PeriodicTask) -> str:
        return _outcome(obj.last_state)

    @display(description="error")
    def error_column(self, obj: PeriodicTask) -> str:
        # The list shows the start; the change page shows all of it (up to a traceback).
        error = obj.error or ""
        if len(error) <= LIST_ERROR:
            return error
        return f"{error[:LIST_ERROR]}… ({len(error) - LIST_ERROR} more characters on its page)"

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

    @display(description="paused")
    def pause_detail(self, obj: PeriodicTask) -> str:
        return pausing.paused_of(obj)

    @display(description=in_zone("next run"))
    def next_fire_detail(self, obj: PeriodicTask) -> str:
        return self.next_fire(obj)

    @display(description=in_zone("last fire"))
    def last_fire_detail(self, obj: PeriodicTask) -> str:
        return shown(obj.last_fire)

    @display(description=in_zone("last run"))
    def last_run_detail(self, obj: PeriodicTask) -> str:
        return shown(obj.last_run)

    @display(description="error")
    def error_detail(self, obj: PeriodicTask) -> str:
        return obj.error or "-"

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
        writer(request).remove(obj.name)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        store = writer(request)
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
        self._each(request, queryset, writer(request).enable, "Enabled")

    @action(description="Disable selected periodic tasks", permissions=["change"])
    def disable_tasks(self, request: HttpRequest, queryset: Any) -> None:
        self._each(request, queryset, writer(request).disable, "Disabled")

    @action(description="Run selected periodic tasks now", permissions=["change"])
    def run_tasks_now(self, request: HttpRequest, queryset: Any) -> None:
        try:
            app = conf.celery_app()
        except (conf.NoCeleryApp, ImportError) as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        store = writer(request)
        self._each(request, queryset, lambda name: run_now(name, store=store, app=app), "Sent")

    @action(description="Pause selected periodic tasks", permissions=["change"])
    def pause_tasks(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return pausing.pause(self, request, queryset, writer(request))

    @action(description="Resume selected periodic tasks", permissions=["change"])
    def resume_tasks(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return pausing.resume(self, request, queryset, writer(request))


admin.site.register(PeriodicTask, PeriodicTaskAdmin)
admin.site.register(Calendar, CalendarAdmin)  # exclusion calendars: .calendars_admin
