"""django-celery-beat: Django models on a PostgreSQL database."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .base import HOUR, Driver, minute_of, minutes_used, task_name, task_of

#: Django's CONN_MAX_AGE (``--django-conn-max-age``; None: persistent connections).
CONN_MAX_AGE: int | None = 0


def setup(target: str) -> None:
    """Configure Django for django_celery_beat on the database ``target`` names."""
    import django
    from django.conf import settings
    from sqlalchemy.engine import make_url

    url = make_url(target)
    settings.configure(
        DEBUG=False,
        USE_TZ=True,
        TIME_ZONE="UTC",
        INSTALLED_APPS=["django_celery_beat"],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": url.database,
                "USER": url.username or "",
                "PASSWORD": url.password or "",
                "HOST": url.host or "",
                "PORT": str(url.port or ""),
                # Django's default is 0: beat's schedule check calls
                # close_old_connections() on every tick, so each tick reconnects.
                "CONN_MAX_AGE": CONN_MAX_AGE,
            }
        },
    )
    django.setup()


class Django(Driver):
    """django_celery_beat.schedulers.DatabaseScheduler on a PostgreSQL database."""

    key = "django"

    @staticmethod
    def fill(target: str, n: int, now: datetime) -> None:
        setup(target)
        from django.core.management import call_command
        from django.db import connection
        from django_celery_beat.models import CrontabSchedule, PeriodicTask, PeriodicTasks

        call_command("migrate", "django_celery_beat", verbosity=0)
        with connection.cursor() as cursor:
            cursor.execute(
                "TRUNCATE django_celery_beat_periodictask, django_celery_beat_crontabschedule,"
                " django_celery_beat_periodictasks RESTART IDENTITY CASCADE"
            )
        crons = {
            m: CrontabSchedule.objects.create(minute=str(m), hour="*", timezone="UTC")
            for m in minutes_used(n, now)
        }
        PeriodicTask.objects.bulk_create(
            (
                PeriodicTask(
                    name=task_name(i),
                    task=task_of(i),
                    crontab=crons[minute_of(i, now)],
                    last_run_at=now,
                )
                for i in range(n)
            ),
            batch_size=5000,
        )
        PeriodicTasks.update_changed()  # bulk_create sends no signals

    @staticmethod
    def fill_spread(target: str, fires: list[datetime], now: datetime) -> None:
        # Celery's interval schedule: due at last_run_at + every.
        setup(target)
        from django.core.management import call_command
        from django.db import connection
        from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks

        call_command("migrate", "django_celery_beat", verbosity=0)
        with connection.cursor() as cursor:
            cursor.execute(
                "TRUNCATE django_celery_beat_periodictask, django_celery_beat_intervalschedule,"
                " django_celery_beat_crontabschedule, django_celery_beat_periodictasks"
                " RESTART IDENTITY CASCADE"
            )
        hourly = IntervalSchedule.objects.create(every=HOUR, period=IntervalSchedule.SECONDS)
        PeriodicTask.objects.bulk_create(
            (
                PeriodicTask(
                    name=task_name(i),
                    task=task_of(i),
                    interval=hourly,
                    args=f"[{i}]",
                    last_run_at=at - timedelta(seconds=HOUR),
                )
                for i, at in enumerate(fires)
            ),
            batch_size=5000,
        )
        PeriodicTasks.update_changed()

    @staticmethod
    def edit_due(target: str, name: str, when: datetime) -> tuple[float, float]:
        # What an admin form does: switch the task to an hourly interval last run an hour
        # ago; save() bumps the change marker.
        import time

        from django.conf import settings

        if not settings.configured:
            setup(target)
        from django_celery_beat.models import IntervalSchedule, PeriodicTask

        before = time.time()
        hourly, _ = IntervalSchedule.objects.get_or_create(
            every=HOUR, period=IntervalSchedule.SECONDS
        )
        task = PeriodicTask.objects.get(name=name)
        task.crontab = None
        task.interval = hourly
        task.last_run_at = when - timedelta(seconds=HOUR)
        task.save()
        return before, time.time()

    @staticmethod
    def load(app: Any, target: str) -> Any:
        setup(target)
        from django_celery_beat.schedulers import DatabaseScheduler

        return DatabaseScheduler

    @staticmethod
    def make_due(app: Any, target: str, names: list[str], last_run: datetime) -> None:
        from django_celery_beat.models import PeriodicTask, PeriodicTasks

        # A queryset update sends no signals: bump the change marker as documented.
        PeriodicTask.objects.filter(name__in=names).update(last_run_at=last_run)
        PeriodicTasks.update_changed()
