"""Django's view of store migration 0013: a task's ``exclude``. State only.

The model is ``managed = False``: ``manage.py migrate`` records this migration and alters
nothing (the store's Alembic revision 0013 adds the column and the calendar table:
``manage.py cronstore_migrate``). Kept so that ``makemigrations`` finds no changes.
"""

from django.db import migrations, models


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("cronstore", "0007_pause")]

    operations = [
        migrations.AddField(
            model_name="periodictask",
            name="exclude",
            field=models.CharField(blank=True, max_length=500, null=True, verbose_name="exclude"),
        ),
    ]
