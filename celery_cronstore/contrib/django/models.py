"""Read-only Django models over ``cronstore_periodic_task``, ``cronstore_fire`` and
``cronstore_calendar``.

``managed = False``: Django never creates, alters or drops these tables (the store's
Alembic migrations own them: ``manage.py cronstore_migrate``), and nothing here saves
itself. The admin writes through :class:`~celery_cronstore.store.Store`, so validation and
planning stay in one place; :meth:`PeriodicTask.save` and ``delete`` refuse, to keep it so.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from django.db import models

from celery_cronstore.store.types import loads

__all__ = ["Calendar", "Fire", "PeriodicTask", "UTCDateTimeField"]


class UTCDateTimeField(models.DateTimeField):  # type: ignore[misc]  # Django ships no types
    """A column the store writes as naive UTC; read as an aware UTC datetime.

    PostgreSQL keeps it as ``timestamp without time zone`` (psycopg returns it naive),
    SQLite as text and MariaDB as ``DATETIME``: whatever ``USE_TZ`` says, Python sees UTC.
    """

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> datetime | None:
        if value is None:
            return None
        moment: datetime = datetime.fromisoformat(value) if isinstance(value, str) else value
        if moment.tzinfo is None:
            return moment.replace(tzinfo=timezone.utc)
        return moment.astimezone(timezone.utc)

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if isinstance(value, datetime) and value.tzinfo is not None:
            return value.astimezone(timezone.utc).replace(tzinfo=None)
        return value


class ReadOnlyError(RuntimeError):
    """Raised by ``save()`` and ``delete()``: write through the ``Store`` API instead."""


class _ReadOnly(models.Model):  # type: ignore[misc]  # Django ships no types
    def save(self, *args: Any, **kwargs: Any) -> None:
        raise ReadOnlyError(
            f"{type(self).__name__} rows are written through celery_cronstore.store.Store "
            "(add/update/enable/disable/remove), never through the ORM"
        )

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        self.save()

    class Meta:
        abstract = True


class PeriodicTask(_ReadOnly):
    """One row of ``cronstore_periodic_task`` (see ``celery_cronstore/store/schema.py``)."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=200, unique=True)
    task = models.CharField(max_length=200, db_index=True)
    args = models.TextField(default="[]")
    kwargs = models.TextField(default="{}")
    options = models.TextField(default="{}")
    timer_kind = models.CharField("timer kind", max_length=16)
    timer = models.CharField(max_length=500)
    tz = models.CharField("zone", max_length=64, default="UTC")
    enabled = models.BooleanField(default=True)
    owner_type = models.CharField("owner type", max_length=100, null=True, blank=True)
    owner_id = models.CharField("owner id", max_length=200, null=True, blank=True)
    description = models.TextField(blank=True, default="")
    source = models.CharField(max_length=16, default="api")
    next_run = UTCDateTimeField("next run", null=True)
    last_fire = UTCDateTimeField("last fire", null=True)
    last_run = UTCDateTimeField("last run", null=True)
    total_run_count = models.IntegerField("runs", default=0)
    misfire_policy = models.CharField("misfire policy", max_length=16, default="run_once")
    misfire_limit = models.IntegerField("misfire limit", default=100)
    start_deadline = models.FloatField("start deadline", null=True, blank=True)
    overlap_policy = models.CharField("overlap policy", max_length=16, default="allow")
    tolerance = models.FloatField(null=True, blank=True)
    max_retries = models.IntegerField("max retries", default=0)
    resume_state = models.TextField(null=True)
    error = models.TextField(null=True)
    version = models.IntegerField(default=1)
    created_at = UTCDateTimeField("created")
    updated_at = UTCDateTimeField("updated")
    abandon_policy = models.CharField("abandon policy", max_length=16, default="leave")
    alert_after = models.CharField("alert after", max_length=32, null=True, blank=True)
    max_runs = models.IntegerField("max runs", null=True, blank=True)
    jitter = models.FloatField("jitter", null=True, blank=True)
    start_at = UTCDateTimeField("start at", null=True, blank=True)
    end_at = UTCDateTimeField("end at", null=True, blank=True)
    paused_at = UTCDateTimeField("paused at", null=True, blank=True)
    paused_by = models.CharField("paused by", max_length=200, null=True, blank=True)
    paused_note = models.TextField("pause note", null=True, blank=True)
    paused_until = UTCDateTimeField("paused until", null=True, blank=True)
    paused_resume = models.CharField("on resume", max_length=16, default="skip")
    exclude = models.CharField("exclude", max_length=500, null=True, blank=True)

    #: The newest ledger state, set on the rows of an admin list page (the read model).
    last_state: str | None = None

    class Meta:
        managed = False
        db_table = "cronstore_periodic_task"
        verbose_name = "periodic task"
        ordering = ("name",)

    def __str__(self) -> str:
        return str(self.name)

    @property
    def owner(self) -> tuple[str, str] | None:
        """Return ``(owner_type, owner_id)`` or ``None``."""
        if self.owner_type is None or self.owner_id is None:
            return None
        return (self.owner_type, self.owner_id)

    def json(self, field: str) -> Any:
        """Return the parsed JSON of ``args``, ``kwargs`` or ``options``."""
        return loads(getattr(self, field), [] if field == "args" else {})


class Fire(_ReadOnly):
    """One row of the fire ledger ``cronstore_fire``: what became of one fire time."""

    id = models.BigAutoField(primary_key=True)
    # DO_NOTHING: the store removes a task's ledger itself (in batches), and Django's
    # deletion collector must never walk a ten-million-row history.
    periodic_task = models.ForeignKey(
        PeriodicTask, on_delete=models.DO_NOTHING, db_constraint=False, related_name="fires"
    )
    fire_time = UTCDateTimeField("fire time")
    fire_until = UTCDateTimeField("fire until", null=True)
    fire_count = models.IntegerField("fire count", default=1)
    task_id = models.CharField("task id", max_length=64, unique=True)
    state = models.CharField(max_length=16)
    claimed_by = models.CharField("claimed by", max_length=200, null=True)
    lease_until = UTCDateTimeField("lease until", null=True)
    attempts = models.IntegerField(default=0)
    claimed_at = UTCDateTimeField("claimed", null=True)
    published_at = UTCDateTimeField("published", null=True)
    started_at = UTCDateTimeField("started", null=True)
    finished_at = UTCDateTimeField("finished", null=True)
    node = models.CharField(max_length=200, null=True)
    reason = models.TextField(null=True)
    result = models.TextField(null=True)
    reruns = models.IntegerField("re-runs", default=0)
    detail = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = "cronstore_fire"
        verbose_name = "fire"
        ordering = ("-fire_time",)

    def __str__(self) -> str:
        return f"{self.periodic_task_id} @ {self.fire_time:%Y-%m-%d %H:%M:%S} UTC"


class Calendar(_ReadOnly):
    """One exclusion calendar of ``cronstore_calendar`` (written through
    ``Store.calendars``; the admin's is :mod:`.calendars_admin`)."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=100, unique=True)
    #: The entries, a JSON list of text (days, spans, windows).
    entries = models.TextField(default="[]")
    holidays = models.CharField(max_length=16, null=True, blank=True)
    description = models.TextField(blank=True, default="")
    updated_at = UTCDateTimeField("updated")

    class Meta:
        managed = False
        db_table = "cronstore_calendar"
        verbose_name = "exclusion calendar"
        ordering = ("name",)

    def __str__(self) -> str:
        return str(self.name)
