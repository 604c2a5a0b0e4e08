"""The Django admin of exclusion calendars (issue 25): ``cronstore calendar`` in the admin.

Every write goes through :attr:`Store.calendars <celery_cronstore.store.Store.calendars>`
as the admin user, from the ``admin`` window (the audit trail's actor), never through
``Model.save()``:

* the add and change form writes while it validates (``_post_clean``), so the store's
  parser decides and a refusal (a bad day, a window without offsets, unknown holidays,
  an empty calendar, a bad or taken name) is its own message on the field it names;
  entries are typed one per line; the change page replaces the calendar (its name is
  read-only, as ``cronstore calendar add NAME --replace``);
* delete (the change page's, or the "Remove selected" action) is ``remove(name)``: a
  calendar that tasks still exclude is refused with the store's message naming them
  (``messages.error``) unless "force" is ticked on the confirmation page, or the
  "Force remove selected" action is chosen (beat then puts those tasks in error).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from celery_cronstore.contrib.django import conf
from celery_cronstore.contrib.django.formatting import action, display
from celery_cronstore.contrib.django.models import Calendar
from celery_cronstore.errors import CronstoreError
from celery_cronstore.store.calendars import entries_of

__all__ = ["CalendarAdmin", "CalendarForm", "field_of"]

#: The form's fields, in the store's words.
FIELDS = ("name", "entries", "holidays", "description")


def _store(actor: str) -> Any:
    """The store writing as ``actor``, from the ``admin`` window."""
    return conf.get_store().acting(actor, "admin")


def _actor(request: HttpRequest) -> str:
    user = getattr(request, "user", None)
    name = user.get_username() if user is not None and user.is_authenticated else ""
    return str(name) or "anonymous"


def field_of(exc: Exception) -> str | None:
    """Return the form field a refusal of ``Calendars.add`` is about (``None``: the form)."""
    named = getattr(exc, "field", None)  # every refusal of the store names its field
    return named if isinstance(named, str) and named in FIELDS else None


class CalendarForm(forms.ModelForm):  # type: ignore[misc]  # Django ships no types
    """Add or replace a calendar; a valid form has been written through the store."""

    #: Who writes, for the audit trail (set per request by ``CalendarAdmin.get_form``).
    actor = "admin"

    # Text as typed, no lengths of Django's own: the store refuses in every window's words.
    name = forms.CharField(required=False)
    entries = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 6, "cols": 60, "class": "vLargeTextField"}),
        help_text="One per line: a day (2026-12-25) or a span of days (2026-12-24..2026-12-26), "
        "both read in each task's zone, or a window between two instants with offsets "
        "(2026-12-07T22:00:00Z..2026-12-08T02:00:00Z).",
    )
    holidays = forms.CharField(
        required=False,
        help_text="Also a country's or region's public holidays: US, US-CA, DE-BY (optional).",
    )
    description = forms.CharField(
        required=False, strip=False, widget=forms.Textarea(attrs={"rows": 2, "cols": 60})
    )

    class Meta:
        model = Calendar
        fields = FIELDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The calendar's name when the form opened (``None`` when adding).
        self.original_name: str | None = self.instance.name if self.instance.pk else None
        if self.original_name is not None:
            self.initial["entries"] = "\n".join(entries_of(self.instance))

    def validate_unique(self) -> None:
        """Leave uniqueness to the store (its message names the calendar)."""

    def _post_clean(self) -> None:
        # No model checks of Django's own: the store's parser alone decides.
        if not self.errors:
            self._write()

    def _write(self) -> None:
        data = self.cleaned_data
        name = self.original_name if self.original_name is not None else data.get("name", "")
        entries = [line.strip() for line in data.get("entries", "").splitlines() if line.strip()]
        try:
            _store(self.actor).calendars.add(
                name,
                entries=entries,
                holidays=data.get("holidays") or None,
                description=data.get("description", ""),
                replace=self.original_name is not None,
            )
        except (CronstoreError, ValueError) as exc:
            where = field_of(exc)
            self.add_error(where if where in self.fields else None, str(exc))
        else:
            self.instance.name = name


class CalendarAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django ships no types
    """Exclusion calendars: list, add, replace, remove (refused while in use unless forced)."""

    form = CalendarForm
    list_display = ("name", "excludes", "holidays", "description", "excluded_by", "updated_at")
    list_display_links = ("name",)
    search_fields = ("name", "description")
    ordering = ("name",)
    actions = ("remove_calendars", "force_remove_calendars")
    save_as = False

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).using(conf.database())

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # The name is the key the store replaces by; renaming is not part of its API.
        return ("name", "excluded_by", "updated_at") if obj is not None else ()

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return (*FIELDS, "excluded_by", "updated_at") if obj is not None else FIELDS

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        form.actor = _actor(request)  # a class made per request: this user's
        return form

    # -- columns ----------------------------------------------------------------------

    @display(description="excludes")
    def excludes(self, obj: Calendar) -> str:
        days = windows = 0
        for entry in entries_of(obj):
            windows, days = (windows + 1, days) if "T" in entry else (windows, days + 1)
        parts = [
            f"{days} day(s)/span(s)" if days else "",
            f"{windows} window(s)" if windows else "",
        ]
        return ", ".join(p for p in parts if p) or "-"

    @display(description="excluded by")
    def excluded_by(self, obj: Calendar) -> str:
        return ", ".join(self._users(obj.name)) or "-"

    def _users(self, name: str) -> list[str]:
        store = conf.get_store()
        with store.engine.connect() as conn:
            users: list[str] = store.calendars.users(conn, name)
        return users

    # -- writes: through the store ----------------------------------------------------

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # Not in transaction.atomic(): the store writes on its own connection (as the
        # periodic task admin does).
        return self._changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: Calendar, form: Any, change: bool) -> None:
        """Take the row the form's store write made (the form wrote; nothing saves here)."""
        found = self.get_queryset(request).only("pk", "name").get(name=obj.name)
        obj.pk = found.pk

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Ask (GET: which tasks exclude it, and "force"), or remove through the store."""
        obj = self.get_object(request, unquote(object_id))
        if request.method != "POST" or obj is None:
            users = self._users(obj.name) if obj is not None else []
            context = {**(extra_context or {}), "calendar_users": users}
            return self._delete_view(request, object_id, context)
        if not self.has_delete_permission(request, obj):
            raise PermissionDenied
        try:
            _store(_actor(request)).calendars.remove(
                obj.name, force=request.POST.get("force") == "on"
            )
        except (CronstoreError, ValueError, LookupError) as exc:
            self.message_user(request, str(exc), messages.ERROR)
            change = reverse("admin:cronstore_calendar_change", args=(obj.pk,))
            return HttpResponseRedirect(change)
        self.log_deletions(request, [obj])
        return self.response_delete(request, str(obj), obj.pk)

    def _remove(self, request: HttpRequest, queryset: Any, force: bool) -> None:
        store = _store(_actor(request))
        removed = []
        for obj in queryset.only("pk", "name"):
            try:
                store.calendars.remove(obj.name, force=force)
            except (CronstoreError, ValueError, LookupError) as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                removed.append(obj)
        if removed:
            self.log_deletions(request, removed)
            names = ", ".join(obj.name for obj in removed)
            self.message_user(request, f"Removed: {names}.", messages.SUCCESS)

    @action(
        description="Remove selected calendars (refused while tasks exclude one)",
        permissions=["delete"],
    )
    def remove_calendars(self, request: HttpRequest, queryset: Any) -> None:
        self._remove(request, queryset, force=False)

    @action(
        description="Force remove selected calendars (tasks that exclude them go in error)",
        permissions=["delete"],
    )
    def force_remove_calendars(self, request: HttpRequest, queryset: Any) -> None:
        self._remove(request, queryset, force=True)
