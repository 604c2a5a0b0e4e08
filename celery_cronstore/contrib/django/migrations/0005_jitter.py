"""Django's view of store migration 0010: a task's ``jitter``. State only.

The model is ``managed = False``: ``manage.py migrate`` records this migration and alters
nothing (the store's Alembic revision 0010 adds the column: ``manage.py
cronstore_migrate``). Kept so that ``makemigrations`` finds no changes.
"""

from django.db import migrations, models


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("cronstore", "0004_max_runs")]

    operations = [
        migrations.AddField(
            model_name="periodictask",
            name="jitter",
            field=models.FloatField(blank=True, null=True, verbose_name="jitter"),
        ),
    ]
