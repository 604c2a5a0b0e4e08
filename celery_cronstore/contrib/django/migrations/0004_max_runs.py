"""Django's view of store migration 0009: a task's ``max_runs``. State only.

The model is ``managed = False``: ``manage.py migrate`` records this migration and alters
nothing (the store's Alembic revision 0009 adds the column: ``manage.py
cronstore_migrate``). Kept so that ``makemigrations`` finds no changes.
"""

from django.db import migrations, models


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("cronstore", "0003_operators")]

    operations = [
        migrations.AddField(
            model_name="periodictask",
            name="max_runs",
            field=models.IntegerField(blank=True, null=True, verbose_name="max runs"),
        ),
    ]
