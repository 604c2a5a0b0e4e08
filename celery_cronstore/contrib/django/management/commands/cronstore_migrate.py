"""``manage.py cronstore_migrate``: create or upgrade the store's tables (Alembic).

The cronstore tables have their own Alembic history and version table; Django's
``migrate`` never touches them (the app's models are ``managed = False``).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from celery_cronstore.contrib.django import conf
from celery_cronstore.errors import CronstoreError


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no types
    help = "Create or upgrade the celery-cronstore tables (its own Alembic migrations)."

    def handle(self, *args: Any, **options: Any) -> None:
        from celery_cronstore.store.migrate import head_revision

        try:
            store = conf.get_store()
            store.upgrade()
        except (CronstoreError, ValueError, ImportError) as exc:
            # One line, no traceback; the store's errors never show a password
            # (StoreUnavailableError names the database without it).
            raise CommandError(f"cannot migrate the cronstore tables: {exc}") from None
        self.stdout.write(f"{store.url}: schema at revision {head_revision()}")
