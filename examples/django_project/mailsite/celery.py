"""The Celery app: beat runs celery-cronstore on the project's own database.

Run from examples/django_project: ``celery -A mailsite worker -B --pool solo``.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

from celery import Celery

from celery_cronstore.contrib.django import store_url_from_django
from celery_cronstore.store import Store

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mailsite.settings")

app = Celery("mailsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def use_the_project_database(sender: Celery, source: Any, **_: Any) -> None:
    """Point the store at DATABASES["default"] unless CELERY_CRONSTORE_URL says otherwise.

    Done when Celery first reads its configuration, not at import: this module is
    imported while Django is still loading the settings.
    """
    if not source.get("cronstore_url"):
        source["cronstore_url"] = store_url_from_django()


@cache
def get_store() -> Store:
    """Return the store beat uses (one per process, opened at first use)."""
    return Store.from_app(app)
