"""Django's view of store migration 0011: a task's ``start_at`` and ``end_at``. State only.

The model is ``managed = False``: ``manage.py migrate`` records this migration and alters
nothing (the store's Alembic revision 0011 adds the columns: ``manage.py
cronstore_migrate``). Kept so that ``makemigrations`` finds no changes.
"""

from django.db import migrations

from celery_cronstore.contrib.django.models import UTCDateTimeField


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("cronstore", "0005_jitter")]

    operations = [
        migrations.AddField(
            model_name="periodictask",
            name="start_at",
            field=UTCDateTimeField(blank=True, null=True, verbose_name="start at"),
        ),
        migrations.AddField(
            model_name="periodictask",
            name="end_at",
            field=UTCDateTimeField(blank=True, null=True, verbose_name="end at"),
        ),
    ]
