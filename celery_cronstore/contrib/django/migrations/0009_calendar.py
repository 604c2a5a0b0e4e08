"""Django's view of store migration 0013's calendar table: ``cronstore_calendar``. State only.

The model is ``managed = False``: ``manage.py migrate`` records this migration and creates
nothing (the store's Alembic revision 0013 creates the table: ``manage.py
cronstore_migrate``). Kept so that ``makemigrations`` finds no changes.
"""

from django.db import migrations, models

from celery_cronstore.contrib.django.models import UTCDateTimeField


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("cronstore", "0008_exclude")]

    operations = [
        migrations.CreateModel(
            name="Calendar",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=100, unique=True)),
                ("entries", models.TextField(default="[]")),
                ("holidays", models.CharField(blank=True, max_length=16, null=True)),
                ("description", models.TextField(blank=True, default="")),
                ("updated_at", UTCDateTimeField(verbose_name="updated")),
            ],
            options={
                "verbose_name": "exclusion calendar",
                "db_table": "cronstore_calendar",
                "ordering": ("name",),
                "managed": False,
            },
        ),
    ]
