"""Django's view of store migration 0012: a task's pause. State only.

The model is ``managed = False``: ``manage.py migrate`` records this migration and alters
nothing (the store's Alembic revision 0012 adds the columns: ``manage.py
cronstore_migrate``). Kept so that ``makemigrations`` finds no changes.
"""

from django.db import migrations, models

from celery_cronstore.contrib.django.models import UTCDateTimeField


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("cronstore", "0006_bounds")]

    operations = [
        migrations.AddField(
            model_name="periodictask",
            name="paused_at",
            field=UTCDateTimeField(blank=True, null=True, verbose_name="paused at"),
        ),
        migrations.AddField(
            model_name="periodictask",
            name="paused_by",
            field=models.CharField(blank=True, max_length=200, null=True, verbose_name="paused by"),
        ),
        migrations.AddField(
            model_name="periodictask",
            name="paused_note",
            field=models.TextField(blank=True, null=True, verbose_name="pause note"),
        ),
        migrations.AddField(
            model_name="periodictask",
            name="paused_until",
            field=UTCDateTimeField(blank=True, null=True, verbose_name="paused until"),
        ),
        migrations.AddField(
            model_name="periodictask",
            name="paused_resume",
            field=models.CharField(default="skip", max_length=16, verbose_name="on resume"),
        ),
    ]
