"""Django's view of store migration 0007: ``alert_after`` and a fire's ``detail``. State only.

Both models are ``managed = False``: ``manage.py migrate`` records this migration and
alters nothing (the store's Alembic revision 0007 adds the columns and the alert and audit
tables: ``manage.py cronstore_migrate``). Kept so that ``makemigrations`` finds no changes.
"""

from django.db import migrations, models


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no types
    dependencies = [("cronstore", "0002_abandon_policy")]

    operations = [
        migrations.AddField(
            model_name="periodictask",
            name="alert_after",
            field=models.CharField(
                blank=True, max_length=32, null=True, verbose_name="alert after"
            ),
        ),
        migrations.AddField(
            model_name="fire",
            name="detail",
            field=models.TextField(null=True),
        ),
    ]
