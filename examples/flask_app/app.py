"""A Flask app whose mail channels each own a polling task (Flask-SQLAlchemy + CronStore).

    flask --app examples.flask_app.app cronstore migrate       # create the store's tables
    flask --app examples.flask_app.app run
    curl -X POST localhost:5000/channels -H 'content-type: application/json' \\
         -d '{"name": "support", "timer": "every 10s"}'
    curl -X DELETE localhost:5000/channels/1                  # its task is removed
    celery -A examples.flask_app.make_celery worker -B --pool solo

The app's table and the store share one SQLite file (``var/flask_app``, or the folder in
``FLASK_APP_VAR``); set ``CRONSTORE_URL`` and ``SQLALCHEMY_DATABASE_URI`` for a server.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Celery, shared_task
from flask import Flask, request
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import Mapped, mapped_column

from celery_cronstore import parse_timer
from celery_cronstore.contrib.flask import CronStore, owner_of

db = SQLAlchemy()
cronstore = CronStore()


class MailChannel(db.Model):  # type: ignore[name-defined,misc]
    __tablename__ = "mail_channel"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(db.String(100))


# Once, at import: deleting a channel (and committing) removes the tasks it owns.
cronstore.tie_owner(MailChannel, "mail_channel")


@shared_task(name="mail.poll")
def poll(channel_id: int) -> str:
    """Pretend to fetch new mail for one channel."""
    return f"polled channel {channel_id}"


def create_app(config: dict[str, Any] | None = None) -> Flask:
    """Build the app; ``config`` overrides the defaults (tests point it elsewhere)."""
    var = Path(os.environ.get("FLASK_APP_VAR", "var/flask_app")).resolve()
    var.mkdir(parents=True, exist_ok=True)
    app = Flask(__name__)
    database = f"sqlite:///{var / 'app.sqlite'}"
    app.config.update(
        SQLALCHEMY_DATABASE_URI=database,
        CRONSTORE_URL=database,
        CELERY={
            "broker_url": "filesystem://",
            "broker_transport_options": {
                "data_folder_in": str(var / "broker"),
                "data_folder_out": str(var / "broker"),
                "control_folder": str(var / "control"),
            },
            "broker_connection_retry_on_startup": True,
            "task_ignore_result": True,
            "beat_scheduler": "celery_cronstore.Scheduler",
        },
    )
    app.config.update(config or {})
    (var / "broker").mkdir(exist_ok=True)
    db.init_app(app)
    cronstore.init_app(app)
    celery_init_app(app)
    with app.app_context():
        db.create_all()
        # No SQLite connection may cross a fork (celery worker -B forks beat): a pooled
        # one confuses SQLite's locks in the child ("locking protocol").
        db.engine.dispose()

    @app.post("/channels")
    def add_channel() -> tuple[dict[str, Any], int]:
        body = request.get_json(force=True)
        timer = str(body.get("timer", "*:0/5"))
        try:  # validate before anything is committed: no channel without its polling task
            parse_timer(timer)
        except ValueError as exc:
            return {"error": f"bad timer: {exc}"}, 400
        channel = MailChannel(name=str(body["name"]))
        db.session.add(channel)
        db.session.commit()
        try:
            task = cronstore.store.add(
                f"poll-mail-channel-{channel.id}",
                task="mail.poll",
                timer=timer,
                args=[channel.id],
                owner=owner_of(channel),
            )
        except ValueError as exc:  # refused anyway: take the channel back
            db.session.delete(channel)
            db.session.commit()
            return {"error": str(exc)}, 400
        return {"id": channel.id, "task": task.name, "next_run": str(task.next_run)}, 201

    @app.delete("/channels/<int:channel_id>")
    def delete_channel(channel_id: int) -> tuple[str, int]:
        db.session.delete(db.get_or_404(MailChannel, channel_id))
        db.session.commit()
        return "", 204

    @app.get("/channels/<int:channel_id>/tasks")
    def channel_tasks(channel_id: int) -> list[str]:
        return [t.name for t in cronstore.store.list(owner=("mail_channel", channel_id))]

    return app


def celery_init_app(app: Flask) -> Celery:
    """Flask's Celery pattern; beat's store is the app's (same CRONSTORE_URL)."""
    celery = Celery(app.name)
    celery.config_from_object(app.config["CELERY"])
    celery.conf.cronstore_url = app.config["CRONSTORE_URL"]
    celery.set_default()
    app.extensions["celery"] = celery
    return celery
