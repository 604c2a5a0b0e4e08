"""Django's view of the cronstore tables: state only, no DDL.

Both models are ``managed = False``: ``manage.py migrate`` records this migration and
creates, alters and drops nothing. The tables come from the store's own Alembic history
(``manage.py cronstore_migrate``). Kept so that ``makemigrations`` finds no changes here.
"""

from django.db import migrations, models

from celery_cronstore.contrib.django.models import UTCDateTimeField


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    initial = True

    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.CreateModel(
            name="Fire",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "fire_time",
                    UTCDateTimeField(verbose_name="fire time"),
                ),
                (
                    "fire_until",
                    UTCDateTimeField(null=True, verbose_name="fire until"),
                ),
                ("fire_count", models.IntegerField(default=1, verbose_name="fire count")),
                ("task_id", models.CharField(max_length=64, unique=True, verbose_name="task id")),
                ("state", models.CharField(max_length=16)),
                (
                    "claimed_by",
                    models.CharField(max_length=200, null=True, verbose_name="claimed by"),
                ),
                (
                    "lease_until",
                    UTCDateTimeField(null=True, verbose_name="lease until"),
                ),
                ("attempts", models.IntegerField(default=0)),
                (
                    "claimed_at",
                    UTCDateTimeField(null=True, verbose_name="claimed"),
                ),
                (
                    "published_at",
                    UTCDateTimeField(null=True, verbose_name="published"),
                ),
                (
                    "started_at",
                    UTCDateTimeField(null=True, verbose_name="started"),
                ),
                (
                    "finished_at",
                    UTCDateTimeField(null=True, verbose_name="finished"),
                ),
                ("node", models.CharField(max_length=200, null=True)),
                ("reason", models.TextField(null=True)),
                ("result", models.TextField(null=True)),
            ],
            options={
                "verbose_name": "fire",
                "db_table": "cronstore_fire",
                "ordering": ("-fire_time",),
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="PeriodicTask",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=200, unique=True)),
                ("task", models.CharField(db_index=True, max_length=200)),
                ("args", models.TextField(default="[]")),
                ("kwargs", models.TextField(default="{}")),
                ("options", models.TextField(default="{}")),
                ("timer_kind", models.CharField(max_length=16, verbose_name="timer kind")),
                ("timer", models.CharField(max_length=500)),
                ("tz", models.CharField(default="UTC", max_length=64, verbose_name="zone")),
                ("enabled", models.BooleanField(default=True)),
                (
                    "owner_type",
                    models.CharField(
                        blank=True, max_length=100, null=True, verbose_name="owner type"
                    ),
                ),
                (
                    "owner_id",
                    models.CharField(
                        blank=True, max_length=200, null=True, verbose_name="owner id"
                    ),
                ),
                ("description", models.TextField(blank=True, default="")),
                ("source", models.CharField(default="api", max_length=16)),
                (
                    "next_run",
                    UTCDateTimeField(null=True, verbose_name="next run"),
                ),
                (
                    "last_fire",
                    UTCDateTimeField(null=True, verbose_name="last fire"),
                ),
                (
                    "last_run",
                    UTCDateTimeField(null=True, verbose_name="last run"),
                ),
                ("total_run_count", models.IntegerField(default=0, verbose_name="runs")),
                (
                    "misfire_policy",
                    models.CharField(
                        default="run_once", max_length=16, verbose_name="misfire policy"
                    ),
                ),
                ("misfire_limit", models.IntegerField(default=100, verbose_name="misfire limit")),
                (
                    "start_deadline",
                    models.FloatField(blank=True, null=True, verbose_name="start deadline"),
                ),
                (
                    "overlap_policy",
                    models.CharField(default="allow", max_length=16, verbose_name="overlap policy"),
                ),
                ("tolerance", models.FloatField(blank=True, null=True)),
                ("max_retries", models.IntegerField(default=0, verbose_name="max retries")),
                ("resume_state", models.TextField(null=True)),
                ("error", models.TextField(null=True)),
                ("version", models.IntegerField(default=1)),
                (
                    "created_at",
                    UTCDateTimeField(verbose_name="created"),
                ),
                (
                    "updated_at",
                    UTCDateTimeField(verbose_name="updated"),
                ),
            ],
            options={
                "verbose_name": "periodic task",
                "db_table": "cronstore_periodic_task",
                "ordering": ("name",),
                "managed": False,
            },
        ),
    ]
