"""The admin's forms: the edit form, built from the field table and written through the
``Store`` API, and the pause and resume actions' (:class:`PauseForm`, :class:`ResumeForm`).

Its fields come from :mod:`celery_cronstore.fields` (:func:`build_form`, called for every
admin request), and each value is parsed and checked there: a bad value gets the message
every other window gives. The store then refuses what needs the database or the Celery
app (the timer's zone, an unknown task, args that do not fit, a one-off instant already
past) and plans the next fire. Its write happens while the form validates
(``_post_clean``), so a refusal is shown next to the field it names, as a form error,
instead of a server error after validation.
"""

from __future__ import annotations

from typing import Any

from django import forms

from celery_cronstore import fields
from celery_cronstore.contrib.django import conf
from celery_cronstore.contrib.django.models import PeriodicTask
from celery_cronstore.errors import DuplicateTaskError, EditConflictError, TimerError
from celery_cronstore.policy.pause import NOTE_CHARS, RESUMES
from celery_cronstore.records import PeriodicTask as TaskRecord
from celery_cronstore.timers import edit_kind

__all__ = [
    "PauseForm",
    "PeriodicTaskForm",
    "ResumeForm",
    "build_form",
    "edited",
    "field_of",
    "form_fields",
]

#: Model fields the form edits besides the table's (the owner, as two columns).
OWNER = ("owner_type", "owner_id")
_TIMER = ("timer", "timer_kind", "tz")
#: Help for the timer beyond the table's (the admin has no live preview).
_TIMER_HELP = (
    "systemd calendar (Mon..Fri 09:00), cron (0 9 * * 1-5), interval (every 5m) or one "
    "instant (2026-05-01 09:00)."
)


def edited() -> tuple[str, ...]:
    """Return the form's field names: the table's (as model columns) and the owner's."""
    return (*(f.key for f in fields.table() if f.name != "owner"), *OWNER)


def field_of(exc: Exception) -> str | None:
    """Return the form field a store error is about (``None``: the whole form)."""
    text = str(exc)
    if isinstance(exc, DuplicateTaskError):
        return "name"
    if isinstance(exc, fields.FieldValueError):
        spec = fields.by_name().get(exc.field)
        if spec is not None:
            return "owner_id" if spec.name == "owner" else spec.key
    if isinstance(exc, TimerError):
        return "tz" if "time zone" in text else "timer"
    for key in edited():
        if text.startswith(f"{key} ") or text.startswith(f"{key}:"):
            return key
    return None


def _json_widget() -> forms.Textarea:
    return forms.Textarea(attrs={"rows": 2, "cols": 60, "class": "vLargeTextField"})


class PeriodicTaskForm(forms.ModelForm):  # type: ignore[misc]  # Django ships no types
    """Add or edit a periodic task; a valid form has been written through the store."""

    #: Who writes, for the audit trail (the admin sets it per request: ``build_form``).
    actor = "admin"

    #: The ``version`` the change page was opened on: the store saves only over it.
    loaded_version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = PeriodicTask
        fields = (*(f.name for f in PeriodicTask._meta.fields if f.name in edited()),)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The name the task had when the form opened (``None`` when adding).
        self.original_name: str | None = self.instance.name if self.instance.pk else None
        #: The timer and kind as stored (the model instance takes the posted values
        #: before the write): an edit's kind is decided against them.
        self.stored_timer: tuple[str, str] = (self.instance.timer, self.instance.timer_kind)
        if self.original_name is not None:
            self.fields["loaded_version"].initial = self.instance.version
            self.fields["loaded_version"].required = True
        #: What the store wrote, once the form is valid.
        self.record: TaskRecord | None = None

    def clean(self) -> dict[str, Any]:
        """Parse and check every table field as the other windows do (one message)."""
        data: dict[str, Any] = super().clean()
        for spec in fields.table():
            if spec.key not in data or spec.name == "owner":
                continue
            raw = data[spec.key]
            try:
                data[spec.key] = spec.parse(raw) if isinstance(raw, str) else spec.check(raw)
            except ValueError as exc:
                self.add_error(spec.key, str(exc))
        if data.get("tz", "") is None:
            data["tz"] = "UTC"
        owner = (data.get("owner_type") or "", data.get("owner_id") or "")
        if bool(owner[0]) != bool(owner[1]):
            self.add_error(
                "owner_id" if owner[0] else "owner_type",
                "an owner needs both a type and an id (or neither)",
            )
        elif owner[0]:
            try:
                fields.field("owner").check(owner)
            except ValueError as exc:
                self.add_error("owner_id", str(exc))
        return data

    def validate_unique(self) -> None:
        """Leave uniqueness to the store (its ``DuplicateTaskError`` names the field)."""

    def _post_clean(self) -> None:
        # The model's own checks (max_length, ...) first, then the store's write.
        super()._post_clean()
        if not self.errors:
            self._write()

    def _write(self) -> None:
        data = self.cleaned_data
        values: dict[str, Any] = {
            f.name: data[f.key] for f in fields.table() if f.key in data and f.name != "owner"
        }
        values["owner"] = (data["owner_type"], data["owner_id"]) if data.get("owner_type") else None
        # Recorded in the audit trail as the admin user's (``build_form(actor=...)``).
        store = conf.checked_store().acting(self.actor, "admin")
        try:
            if self.original_name is None:
                self.record = store.add(values.pop("name"), force=False, **values)
            else:
                # Store.update(name, **changes) takes the name positionally: a rename
                # cannot be passed, so the change page shows the name read-only.
                values.pop("name", None)
                self.record = store.update(
                    self.original_name,
                    expected_version=data["loaded_version"],
                    force=False,
                    **self._changes(values),
                )
        except EditConflictError as exc:  # another edit was saved since this page opened
            self.add_error(None, str(exc))
        except (TimerError, ValueError) as exc:
            self.add_error(field_of(exc), str(exc))

    def _changes(self, values: dict[str, Any]) -> dict[str, Any]:
        changed = set(self.changed_data)
        keys = {f.name: f.key for f in fields.table()}
        changes = {k: v for k, v in values.items() if keys.get(k, k) in changed}
        if changed & set(_TIMER):
            # A timer is validated (and re-planned) as a whole: expression, kind and zone.
            # The kind select shows the stored kind: left so while the expression changed,
            # it is detected again, as every window does (timers.edit_kind).
            timer, kind = self.stored_timer
            changes.update(
                timer=values["timer"],
                kind=edit_kind(
                    values["kind"] or None,
                    stored=kind,
                    shown=kind,
                    timer_changed=values["timer"] != timer,
                ),
                tz=values["tz"],
            )
        if changed & {"owner_type", "owner_id"}:
            changes["owner"] = values["owner"]
        return changes


def form_field(spec: fields.Field) -> forms.Field:
    """Return the Django form field of one table field (text parsed by the table)."""
    common: dict[str, Any] = {
        "label": "Timer" if spec.name == "timer" else spec.title,
        "help_text": _TIMER_HELP if spec.name == "timer" else spec.help,
        "required": False,  # the table says what is missing, in every window's words
    }
    if spec.type is bool:
        return forms.BooleanField(initial=spec.default, **common)
    if spec.choices:
        blank = [("", "detect from the expression" if spec.name == "kind" else "-")]
        options = [*(blank if spec.optional else []), *((c, c) for c in spec.choices)]
        return forms.CharField(widget=forms.Select(choices=options), initial=spec.default, **common)
    if spec.is_json:
        widget = forms.Textarea(attrs={"rows": 2, "cols": 60, "class": "vLargeTextField"})
        initial = spec.text(spec.default)
        return forms.CharField(widget=widget, initial=initial, strip=False, **common)
    if spec.type is str and spec.max_chars is None:
        return forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), strip=False, **common)
    initial = "UTC" if spec.name == "tz" else spec.text(spec.default)
    # The length as a browser hint only: the table refuses more, in its own words.
    widget = forms.TextInput(attrs={"maxlength": spec.max_chars} if spec.max_chars else {})
    return forms.CharField(widget=widget, initial=initial, **common)


def form_fields(exclude: tuple[str, ...] = ()) -> dict[str, forms.Field]:
    """Return the form fields of the table as it is now, by form name (``timer_kind``)."""
    return {
        f.key: form_field(f) for f in fields.table() if f.name != "owner" and f.key not in exclude
    }


def build_form(exclude: tuple[str, ...] = (), actor: str = "admin") -> type[PeriodicTaskForm]:
    """Return the admin form with one field per table entry (read now), but ``exclude``
    (the read-only ones), writing as ``actor`` (a class made per request: one user's)."""
    metaclass: Any = type(PeriodicTaskForm)
    form: type[PeriodicTaskForm] = metaclass(
        "PeriodicTaskForm", (PeriodicTaskForm,), {**form_fields(exclude), "actor": actor}
    )
    return form


class PauseForm(forms.Form):  # type: ignore[misc]  # Django ships no types
    """What the "Pause selected" action asks. Text only, as the command line takes it: the
    store (and ``--until``'s reader) refuse a bad value in every window's words."""

    note = forms.CharField(
        label="Note",
        required=False,
        strip=False,  # as given, like `cronstore pause --note`: the store measures and strips
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60, "maxlength": NOTE_CHARS}),
        help_text="Why they are paused (shown in every window).",
    )
    until = forms.CharField(
        label="Until",
        required=False,
        help_text="Resume by itself at this instant: ISO-8601 (2026-03-01T09:00, or with an "
        "offset or Z); without an offset it is read in each task's zone. Empty: until resumed.",
    )
    resume = forms.CharField(
        label="Then",
        required=False,
        initial=RESUMES[0],
        widget=forms.Select(choices=[(r, r) for r in RESUMES]),
        help_text="On resume: skip the fires the pause held back (recorded missed), or send "
        "the newest of them once.",
    )


class ResumeForm(forms.Form):  # type: ignore[misc]  # Django ships no types
    """What the "Resume selected" action asks: what becomes of the fires held back."""

    mode = forms.CharField(
        label="Fires held back",
        required=False,
        widget=forms.Select(choices=[("", "as chosen when paused"), *((r, r) for r in RESUMES)]),
    )
