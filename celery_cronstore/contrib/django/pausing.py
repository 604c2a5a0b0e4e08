"""The admin's pause and resume (issue 25): the two actions, the page each asks on, and
the pause on the change list's rows.

The list says a task is paused in its next-fire column (as ``cronstore list`` and the
dashboard do: "paused until" its end in the display zone, then by whom, the choice and
the note); a column of its own would not fit a 1600 px window. The change page shows
the sentence every window says (:func:`paused_of`).

Each action asks first, in Django's intermediate-page pattern (as "delete selected"
does): choosing it renders a small page with :class:`~.forms.PauseForm` (note, until,
then) or :class:`~.forms.ResumeForm` (what becomes of the fires held back) and the
selected rows; its submit posts the action again, with ``apply``. Each task then goes
through :meth:`Store.pause` or ``resume`` as the admin user (the store the admin passes:
:func:`.admin.writer`), one at a time: a refusal (an end not in the future, a note too
long, a task not paused) is the store's own message, shown with ``messages.error``, and
that task is left as it was while the others go ahead. "until" is read as
``cronstore pause --until`` reads it: ISO-8601, without an offset in the task's zone.
"""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any, cast

from django.contrib.admin import helpers
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from celery_cronstore.contrib.django.formatting import html, shown
from celery_cronstore.contrib.django.forms import PauseForm, ResumeForm
from celery_cronstore.contrib.django.models import PeriodicTask
from celery_cronstore.policy.backfill import read_instant
from celery_cronstore.policy.pause import paused_text
from celery_cronstore.records import PeriodicTask as TaskRecord

__all__ = ["PAUSE_COLUMNS", "in_list", "pause", "paused_of", "resume"]

#: The model's columns that say a task is paused, by whom, why, until when, then what.
PAUSE_COLUMNS = ("paused_at", "paused_by", "paused_note", "paused_until", "paused_resume")
TEMPLATE = "admin/cronstore/periodictask/pause.html"


def paused_of(obj: PeriodicTask) -> str:
    """Return the sentence every window says for a paused task (``-``: not paused)."""
    # paused_text reads only the pause's five attributes (here as the store reads them).
    pause = {column: _utc(getattr(obj, column)) for column in PAUSE_COLUMNS}
    return paused_text(cast(TaskRecord, SimpleNamespace(**pause))) or "-"


def in_list(obj: PeriodicTask) -> str:
    """Return the list's next-fire cell of a paused task: until when, by whom, then what
    and why."""
    until = _utc(obj.paused_until)
    when = "until resumed" if until is None else html("until {}", shown(until))
    who = f"by {obj.paused_by}, " if obj.paused_by else ""
    why = f": {obj.paused_note}" if obj.paused_note else ""
    return html(
        'paused {}<br><small class="cronstore-long">{}then {}{}</small>',
        when,
        who,
        obj.paused_resume,
        why,
    )


def _utc(value: Any) -> Any:
    # The model's pause columns are plain DateTimeFields: on PostgreSQL (the store writes
    # `timestamp without time zone`) they read naive. The store's instants are UTC.
    if not isinstance(value, datetime):
        return value
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def pause(admin: Any, request: HttpRequest, queryset: Any, store: Any) -> HttpResponse | None:
    """Ask for the note, the end and the choice; then pause each selected task."""
    form = PauseForm(request.POST if "apply" in request.POST else None)
    if not form.is_valid():
        return _ask(admin, request, queryset, form, "pause_tasks", "Pause")
    note, text = form.cleaned_data["note"], form.cleaned_data["until"].strip()
    then = form.cleaned_data["resume"] or "skip"

    def act(name: str) -> object:
        until = read_instant(text, store.get(name).tz, "until") if text else None
        return store.pause(name, note=note, until=until, resume=then)

    admin._each(request, queryset, act, "Paused")
    return None


def resume(admin: Any, request: HttpRequest, queryset: Any, store: Any) -> HttpResponse | None:
    """Ask what becomes of the fires held back; then resume each selected task."""
    form = ResumeForm(request.POST if "apply" in request.POST else None)
    if not form.is_valid():
        return _ask(admin, request, queryset, form, "resume_tasks", "Resume")
    mode = form.cleaned_data["mode"] or None
    admin._each(request, queryset, lambda name: store.resume(name, mode=mode), "Resumed")
    return None


def _ask(
    admin: Any, request: HttpRequest, queryset: Any, form: Any, action: str, verb: str
) -> HttpResponse:
    """Return the action's page: the form, and the selected tasks with their pause."""
    tasks = [
        {"pk": obj.pk, "name": obj.name, "paused": paused_of(obj)}
        for obj in queryset.only("pk", "name", *PAUSE_COLUMNS)
    ]
    context = {
        **admin.admin_site.each_context(request),
        "title": f"{verb} periodic tasks",
        "opts": admin.model._meta,
        "form": form,
        "tasks": tasks,
        "action": action,
        "verb": verb,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": admin.media,
    }
    request.current_app = admin.admin_site.name
    return TemplateResponse(request, TEMPLATE, context)
