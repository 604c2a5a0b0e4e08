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
ALLOWED_HOSTS: list[str] = []
INSTALLED_APPS = ["mailchannels"]
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
