"""The admin's edit form: shape checks here, everything else by the ``Store`` API.

The form parses JSON and numbers; the store validates the timer, the policies, lengths and
the call signature, and plans the next fire. Its write happens while the form validates
(``_post_clean``), so a refusal is shown next to the field it names, as a form error,
instead of a server error after validation.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from celery_cronstore.contrib.django import conf
from celery_cronstore.contrib.django.models import PeriodicTask
from celery_cronstore.errors import DuplicateTaskError, TimerError
from celery_cronstore.records import ABANDON_POLICIES
from celery_cronstore.records import PeriodicTask as TaskRecord
from celery_cronstore.timers import KINDS

__all__ = ["PeriodicTaskForm", "field_of"]

MISFIRE = ("run_once", "run_all", "skip")
OVERLAP = ("allow", "skip")
ABANDON = ABANDON_POLICIES
#: Store keywords the form edits (owner_type/owner_id become ``owner``).
EDITED = (
    "name",
    "task",
    "enabled",
    "timer",
    "timer_kind",
    "tz",
    "args",
    "kwargs",
    "options",
    "description",
    "misfire_policy",
    "misfire_limit",
    "overlap_policy",
    "abandon_policy",
    "start_deadline",
    "tolerance",
    "max_retries",
    "owner_type",
    "owner_id",
)
_TIMER = ("timer", "timer_kind", "tz")
_JSON: dict[str, type[list[Any]] | type[dict[str, Any]]] = {
    "args": list,
    "kwargs": dict,
    "options": dict,
}


def field_of(exc: Exception) -> str | None:
    """Return the form field a store error is about (``None``: the whole form)."""
    text = str(exc)
    if isinstance(exc, DuplicateTaskError):
        return "name"
    if isinstance(exc, TimerError):
        return "tz" if "time zone" in text else "timer"
    for key in EDITED:
        if text.startswith(f"{key} ") or text.startswith(f"{key}:"):
            return key
    return None


def _json_widget() -> forms.Textarea:
    return forms.Textarea(attrs={"rows": 2, "cols": 60, "class": "vLargeTextField"})


class PeriodicTaskForm(forms.ModelForm):  # type: ignore[misc]  # Django ships no types
    """Add or edit a periodic task; a valid form has been written through the store."""

    timer = forms.CharField(
        max_length=500,
        help_text="systemd calendar (Mon..Fri 09:00), cron (0 9 * * 1-5), "
        "interval (every 5m) or one instant (2026-05-01 09:00).",
    )
    timer_kind = forms.ChoiceField(
        label="Timer kind",
        choices=[("", "detect from the expression"), *((k, k) for k in KINDS)],
        required=False,
    )
    tz = forms.CharField(label="Zone", max_length=64, initial="UTC", required=False)
    args = forms.CharField(
        widget=_json_widget(), initial="[]", required=False, help_text="A JSON array."
    )
    kwargs = forms.CharField(
        widget=_json_widget(), initial="{}", required=False, help_text="A JSON object."
    )
    options = forms.CharField(
        widget=_json_widget(),
        initial="{}",
        required=False,
        help_text="A JSON object of Celery message options.",
    )
    misfire_policy = forms.ChoiceField(label="Misfire policy", choices=[(p, p) for p in MISFIRE])
    overlap_policy = forms.ChoiceField(label="Overlap policy", choices=[(p, p) for p in OVERLAP])
    abandon_policy = forms.ChoiceField(
        label="Abandon policy",
        choices=[(p, p) for p in ABANDON],
        initial="leave",
        help_text="A started fire whose worker went silent: leave it abandoned, or rerun it "
        "once under the same task id.",
    )

    class Meta:
        model = PeriodicTask
        fields = EDITED

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The name the task had when the form opened (``None`` when adding).
        self.original_name: str | None = self.instance.name if self.instance.pk else None
        #: What the store wrote, once the form is valid.
        self.record: TaskRecord | None = None

    def clean_timer_kind(self) -> str | None:
        return self.cleaned_data.get("timer_kind") or None

    def clean_tz(self) -> str:
        return (self.cleaned_data.get("tz") or "").strip() or "UTC"

    def _clean_json(self, field: str) -> Any:
        text = (self.cleaned_data.get(field) or "").strip()
        want = _JSON[field]
        try:
            value: object = json.loads(text) if text else want()
        except ValueError as exc:
            raise ValidationError(f"not valid JSON: {exc}") from None
        if not isinstance(value, want):
            raise ValidationError(f"must be a JSON {'array' if want is list else 'object'}")
        return value

    def clean_args(self) -> Any:
        return self._clean_json("args")

    def clean_kwargs(self) -> Any:
        return self._clean_json("kwargs")

    def clean_options(self) -> Any:
        return self._clean_json("options")

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean()
        owner = (data.get("owner_type") or "", data.get("owner_id") or "")
        if bool(owner[0]) != bool(owner[1]):
            self.add_error(
                "owner_id" if owner[0] else "owner_type",
                "an owner needs both a type and an id (or neither)",
            )
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
        skip = ("owner_type", "owner_id", "timer_kind")
        values: dict[str, Any] = {k: data[k] for k in EDITED if k in data and k not in skip}
        values["kind"] = data["timer_kind"]
        values["owner"] = (data["owner_type"], data["owner_id"]) if data.get("owner_type") else None
        store = conf.get_store()
        try:
            if self.original_name is None:
                self.record = store.add(values.pop("name"), **values)
            else:
                # Store.update(name, **changes) takes the name positionally: a rename
                # cannot be passed, so the change page shows the name read-only.
                values.pop("name", None)
                self.record = store.update(self.original_name, **self._changes(values))
        except (TimerError, ValueError) as exc:
            self.add_error(field_of(exc), str(exc))

    def _changes(self, values: dict[str, Any]) -> dict[str, Any]:
        changed = set(self.changed_data)
        changes = {k: v for k, v in values.items() if k in changed}
        if changed & set(_TIMER):
            # A timer is validated (and re-planned) as a whole: expression, kind and zone.
            changes.update(timer=values["timer"], kind=values["kind"], tz=values["tz"])
        if changed & {"owner_type", "owner_id"}:
            changes["owner"] = values["owner"]
        return changes
