"""The installable Django app: ``"celery_cronstore.contrib.django"`` in ``INSTALLED_APPS``."""

from __future__ import annotations

from django.apps import AppConfig


class CronstoreConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    """Admin pages over the store's tables; the tables themselves stay Alembic's."""

    name = "celery_cronstore.contrib.django"
    label = "cronstore"
    verbose_name = "Periodic tasks (cronstore)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from celery_cronstore.contrib.django import conf

        conf.connect_signals()
