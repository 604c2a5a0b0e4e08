"""One Django configuration per test process, shared by the Django test modules.

Django can be configured once per process, so every module that needs it calls
:func:`configure`, which configures it the first time: a SQLite ``default`` database in
a temporary folder, plus ``postgres`` and ``mysql`` aliases on the scratch databases of
conftest.py when those servers are up; the admin and its apps; the cronstore app; and
this module as the app of the owner-tie tests' models (label ``cronstore_django_tests``).
The store's tables are created in every alias by the store's own migrations; Django's
``migrate`` creates the auth/admin tables in ``default``.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from conftest import MYSQL_URL, POSTGRES_URL, reachable
from django.apps import AppConfig

from celery_cronstore.store import Store

APP = "cronstore_django_tests"
#: The admin's URLs (this module is the ROOT_URLCONF); filled in once Django is set up.
urlpatterns: list[Any] = []
_aliases: set[str] = set()


class TieTestsConfig(AppConfig):
    """The app of the owner-tie tests' models (declared in test_contrib_django.py)."""

    name = __name__
    label = APP
    default_auto_field = "django.db.models.BigAutoField"


def database_settings(url: str) -> dict[str, Any]:
    """Return a DATABASES entry for a PostgreSQL or MariaDB SQLAlchemy URL."""
    parts = sa.engine.make_url(url)
    postgres = parts.get_backend_name() == "postgresql"
    return {
        "ENGINE": "django.db.backends.postgresql" if postgres else "django.db.backends.mysql",
        "NAME": parts.database,
        "USER": parts.username or "",
        "PASSWORD": parts.password or "",
        "HOST": parts.host or "",
        "PORT": str(parts.port or ""),
    }


def configure(request: pytest.FixtureRequest, tmp: pytest.TempPathFactory) -> set[str]:
    """Configure Django once for this process; return the database aliases it has."""
    if _aliases:
        return _aliases
    import django
    from django.conf import settings
    from django.contrib import admin
    from django.core.management import call_command
    from django.test.utils import setup_test_environment
    from django.urls import path

    from celery_cronstore.contrib.django import store_url_from_django

    if settings.configured:
        pytest.fail("Django was configured outside django_setup.configure()")
    databases: dict[str, dict[str, Any]] = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": tmp.mktemp("django") / "app.sqlite3",
        }
    }
    # Every alias must be in the one settings.configure() call; a server that is down is
    # left out here and its tests skip (or fail under CI=true) through need_service().
    if reachable(POSTGRES_URL, 5432):
        databases["postgres"] = database_settings(request.getfixturevalue("postgres_url"))
    if reachable(MYSQL_URL, 3306):
        import pymysql

        pymysql.install_as_MySQLdb()  # Django's MySQL backend imports MySQLdb
        databases["mysql"] = database_settings(request.getfixturevalue("mysql_url"))
    settings.configure(
        DATABASES=databases,
        INSTALLED_APPS=[
            "django.contrib.admin",
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "celery_cronstore.contrib.django",
            f"{__name__}.TieTestsConfig",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.common.CommonMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
        ROOT_URLCONF=__name__,
        SECRET_KEY="tests-only-not-a-secret",
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    )
    django.setup()
    setup_test_environment()
    urlpatterns.append(path("admin/", admin.site.urls))
    call_command("migrate", database="default", verbosity=0)
    for alias in databases:
        store = Store(store_url_from_django(alias))
        store.upgrade()
        store.close()
    _aliases.update(databases)
    return _aliases
