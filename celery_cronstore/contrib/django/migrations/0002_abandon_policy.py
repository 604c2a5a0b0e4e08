"""Django's view of store migration 0006: ``abandon_policy`` and ``reruns``. State only.

Both models are ``managed = False``: ``manage.py migrate`` records this migration and
alters nothing (the store's Alembic revision 0006 adds the columns:
``manage.py cronstore_migrate``). Kept so that ``makemigrations`` finds no changes here.
"""

from django.db import migrations, models


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("cronstore", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="periodictask",
            name="abandon_policy",
            field=models.CharField(default="leave", max_length=16, verbose_name="abandon policy"),
        ),
        migrations.AddField(
            model_name="fire",
            name="reruns",
            field=models.IntegerField(default=0, verbose_name="re-runs"),
        ),
    ]
