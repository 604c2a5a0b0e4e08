"""Make django-celery-beat's data with django-celery-beat itself (its migrations, its models).

Run as a script, never imported by pytest: Django's settings are process-global, and other
tests configure Django for our admin. Environment:

* ``DCB_DATABASE_URL``: where (a SQLAlchemy-style URL: ``sqlite:///path`` or
  ``postgresql+psycopg://user:pw@host:port/db``);
* ``DCB_TIME_ZONE``: Django's ``TIME_ZONE`` (default ``UTC``); ``USE_TZ`` is always on.

Standard input is JSON ``{"tasks": [...]}``; each task is ``{"name", "task", "schedule",
"fields", "force", "schedule_force"}``: ``schedule`` is ``{"crontab": {...}}``,
``{"interval": {...}}``, ``{"clocked": {...}}`` or ``{"solar": {...}}`` (model fields; or
null), ``fields`` go to ``PeriodicTask.objects.create``, ``force`` to a queryset
``update()`` afterwards (past ``save()``'s own rules, the way a bulk update or an old
version leaves rows) and ``schedule_force`` likewise to the schedule row (a zone name the
tz database no longer has). Datetimes are ISO-8601 text. Prints ``{name: id}`` as JSON.

With ``--disable NAME...`` it only disables those tasks (``save()``, as its admin does).
With ``--read`` it then reads everything back through cronstore's reader on the Django
ORM (``read(None, ...)``) and prints a summary of each row instead.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from typing import Any
from urllib.parse import unquote, urlsplit

DATETIMES = {"expires", "start_time", "last_run_at", "date_changed", "clocked_time"}


def database(url: str) -> dict[str, Any]:
    """Return Django's DATABASES["default"] for a SQLAlchemy-style URL."""
    if url.startswith("sqlite:///"):
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": url[len("sqlite:///") :]}
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgresql"):
        raise SystemExit(f"unsupported database URL {url!r}")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


def values(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: datetime.fromisoformat(v) if k in DATETIMES and v else v for k, v in raw.items()}


def main() -> None:
    import django
    from django.conf import settings

    settings.configure(
        DATABASES={"default": database(os.environ["DCB_DATABASE_URL"])},
        INSTALLED_APPS=["django_celery_beat"],
        USE_TZ=True,
        TIME_ZONE=os.environ.get("DCB_TIME_ZONE", "UTC"),
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
    )
    django.setup()

    from django.core.management import call_command
    from django.db import models, transaction
    from django.db.models.functions import Cast
    from django_celery_beat import models as dcb

    call_command("migrate", verbosity=0)
    if "--disable" in sys.argv[1:]:  # the switch: disable tasks the way its admin does
        for name in sys.argv[sys.argv.index("--disable") + 1 :]:
            task = dcb.PeriodicTask.objects.get(name=name)
            task.enabled = False
            task.save()
        return
    kinds = {
        "crontab": dcb.CrontabSchedule,
        "interval": dcb.IntervalSchedule,
        "clocked": dcb.ClockedSchedule,
        "solar": dcb.SolarSchedule,
    }
    spec = json.load(sys.stdin)
    made: dict[str, int] = {}
    with transaction.atomic():
        for item in spec["tasks"]:
            links: dict[str, Any] = {}
            for kind, fields in (item.get("schedule") or {}).items():
                model = kinds[kind]
                schedule = (
                    model.objects.get_or_create(**values(fields))[0]
                    if kind == "solar"
                    else model.objects.create(**values(fields))
                )
                forced = item.get("schedule_force") or {}
                if forced:
                    # Value(...) as text: past TimeZoneField's own check, as a zone
                    # the tz database has since dropped would be.
                    model.objects.filter(pk=schedule.pk).update(
                        **{k: Cast(models.Value(v), models.CharField()) for k, v in forced.items()}
                    )
                links[kind] = schedule
            task = dcb.PeriodicTask.objects.create(
                name=item["name"], task=item["task"], **links, **values(item.get("fields", {}))
            )
            if item.get("force"):
                dcb.PeriodicTask.objects.filter(pk=task.pk).update(**values(item["force"]))
            made[item["name"]] = task.pk
    if "--read" not in sys.argv[1:]:
        json.dump(made, sys.stdout)
        return
    from celery_cronstore.adopt.records import ReadContext, Refused
    from celery_cronstore.adopt.sources import django_celery_beat

    summary: dict[str, Any] = {}
    for read in django_celery_beat.read(None, ReadContext(zone="Europe/Berlin")):
        if isinstance(read, Refused):
            summary[read.name] = {"refused": read.reason, "origin": read.origin}
            continue
        summary[read.name] = {
            "values": dict(read.values),
            "origin": read.origin,
            "last_run_at": read.last_run_at,
            "start_at": read.start_at,
            "total_run_count": read.total_run_count,
            "notes": list(read.notes),
        }
    json.dump(summary, sys.stdout, default=str)


if __name__ == "__main__":
    main()
