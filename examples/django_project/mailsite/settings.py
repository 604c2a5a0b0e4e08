"""Settings of the example project: one SQLite database for the app and the store."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
#: Where the database and the filesystem broker live (the smoke test points it elsewhere).
VAR_DIR = Path(os.environ.get("MAILSITE_VAR", BASE_DIR / "var")).resolve()
BROKER_DIR = VAR_DIR / "broker"
BROKER_DIR.mkdir(parents=True, exist_ok=True)  # the filesystem broker needs the folder

SECRET_KEY = "example-project-not-a-secret"
DEBUG = True
ALLOWED_HOSTS: list[str] = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # The admin of periodic tasks (/admin/cronstore/periodictask/). It finds the store and
    # the Celery app by itself: mailsite.celery_app (mailsite/__init__.py) and its
    # cronstore_url, derived from DATABASES["default"] in mailsite/celery.py.
    "celery_cronstore.contrib.django",
    "mailchannels",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "mailsite.urls"
TEMPLATES = [
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
]
STATIC_URL = "static/"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": VAR_DIR / "mailsite.sqlite3",
    }
}

# Celery reads the CELERY_* settings (mailsite/celery.py). The store URL is derived from
# DATABASES["default"] there; set CELERY_CRONSTORE_URL to keep the store elsewhere.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "data_folder_in": str(BROKER_DIR),
    "data_folder_out": str(BROKER_DIR),
    "control_folder": str(VAR_DIR / "control"),
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_BEAT_SCHEDULER = "celery_cronstore.Scheduler"
CELERY_CRONSTORE_POLL_INTERVAL = 2.0
