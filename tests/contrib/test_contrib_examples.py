"""Smoke tests of the framework examples: each configures itself, adds an owner-tied task
and deletes the owner, on SQLite in a temporary folder.

Each runs in its own interpreter: Django can be configured once per process, and the
examples tie their models at import.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DJANGO_CYCLE = """
import io
import django
django.setup()
from django.core.management import call_command
call_command("check", fail_level="WARNING", stdout=io.StringIO())
call_command("migrate", verbosity=0)

from mailchannels.models import MailChannel
from mailsite.celery import app, get_store

store = get_store()
store.upgrade()
assert app.conf.beat_scheduler == "celery_cronstore.Scheduler"
channel = MailChannel.objects.create(name="support")
task = channel.schedule_polling()
assert task.owner == ("mail_channel", str(channel.pk)), task.owner
MailChannel.objects.create(name="sales", poll_timer="every 10m").schedule_polling()
channel.delete()

# The admin of periodic tasks: the store's tables by the management command, the list page.
from django.contrib.auth.models import User
from django.test import Client
from django.test.utils import setup_test_environment

call_command("cronstore_migrate", stdout=io.StringIO())
setup_test_environment()
User.objects.create_superuser("admin", "admin@example.org", "pw")
web = Client()
assert web.login(username="admin", password="pw")
page = web.get("/admin/cronstore/periodictask/")
assert page.status_code == 200, page.status_code
assert b"poll-mail-channel-2" in page.content
print(store.url)
print(sorted(t.name for t in store.list()))
"""

FLASK_CYCLE = """
from examples.flask_app.app import create_app, cronstore

app = create_app()
migrated = app.test_cli_runner().invoke(args=["cronstore", "migrate"])
assert migrated.exit_code == 0, migrated.output
client = app.test_client()
created = client.post("/channels", json={"name": "support", "timer": "every 1h"})
assert created.status_code == 201, created.data
assert client.post("/channels", json={"name": "sales"}).status_code == 201
# A bad timer is refused before anything is stored (it was a 500 and a channel left
# without its polling task).
bad = client.post("/channels", json={"name": "ops", "timer": "every fortnight"})
assert bad.status_code == 400, bad.data
assert bad.json["error"].startswith("bad timer: ")
assert client.get("/channels/3/tasks").json == []
assert client.get("/channels/1/tasks").json == ["poll-mail-channel-1"]
assert client.delete("/channels/1").status_code == 204
assert app.extensions["celery"].conf.cronstore_url == app.config["CRONSTORE_URL"]
with app.app_context():
    print(cronstore.store.url)
    print(sorted(t.name for t in cronstore.store.list()))
"""


def run(script: str, cwd: Path, **env: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_django_example_removes_a_deleted_channels_task(tmp_path: Path) -> None:
    lines = run(
        DJANGO_CYCLE,
        ROOT / "examples" / "django_project",
        MAILSITE_VAR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="mailsite.settings",
    )
    # The store lives in the project's own database (DATABASES["default"]).
    assert lines == [f"sqlite:///{tmp_path / 'mailsite.sqlite3'}", "['poll-mail-channel-2']"]


def test_flask_example_removes_a_deleted_channels_task(tmp_path: Path) -> None:
    lines = run(FLASK_CYCLE, ROOT, FLASK_APP_VAR=str(tmp_path))
    assert lines == [f"sqlite:///{tmp_path / 'app.sqlite'}", "['poll-mail-channel-2']"]
