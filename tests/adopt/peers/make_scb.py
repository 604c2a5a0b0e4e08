"""Make sqlalchemy-celery-beat's data with sqlalchemy-celery-beat itself (its session
manager, its models).

Run as a script (its declarative base warns under SQLAlchemy 2, which pytest turns into
errors; and nothing of it should linger in the test process). Environment:

* ``SCB_DATABASE_URL``: where (a SQLAlchemy URL);
* ``SCB_SCHEMA``: its ``beat_schema`` (optional; PostgreSQL).

Standard input is JSON ``{"tasks": [...]}``; each task is ``{"name", "task", "schedule",
"fields", "force", "schedule_force"}``: ``schedule`` is ``{"crontab": {...}}``,
``{"interval": {...}}``, ``{"clocked": {...}}`` or ``{"solar": {...}}`` (model fields, or
null), ``fields`` go to ``PeriodicTask(...)``, and ``force``/``schedule_force`` to an
ORM bulk ``update()`` afterwards, which skips the models' own checks (as the project's
README shows for bulk edits): a crontab or zone its checks would refuse. Datetimes are
ISO-8601 text. Prints ``{name: id}`` as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from datetime import datetime
from typing import Any

DATETIMES = {"expires", "start_time", "last_run_at", "date_changed", "clocked_time"}


def values(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: datetime.fromisoformat(v) if k in DATETIMES and v else v for k, v in raw.items()}


def main() -> None:
    warnings.simplefilter("ignore")
    from sqlalchemy import update
    from sqlalchemy_celery_beat import models as scb
    from sqlalchemy_celery_beat.session import SessionManager, session_cleanup

    kinds = {
        "crontab": scb.CrontabSchedule,
        "interval": scb.IntervalSchedule,
        "clocked": scb.ClockedSchedule,
        "solar": scb.SolarSchedule,
    }
    schema = os.environ.get("SCB_SCHEMA") or None
    manager = SessionManager()
    engine, factory = manager.create_session(os.environ["SCB_DATABASE_URL"], schema=schema)
    manager.prepare_models(engine, schema=schema)
    spec = json.load(sys.stdin)
    made: dict[str, int] = {}
    session = factory()
    with session_cleanup(session):
        for item in spec["tasks"]:
            schedule = None
            for kind, fields in (item.get("schedule") or {}).items():
                model = kinds[kind]
                schedule = model(**values(fields))
                session.add(schedule)
                session.flush()
                if item.get("schedule_force"):
                    session.execute(
                        update(model)
                        .where(model.id == schedule.id)
                        .values(**values(item["schedule_force"]))
                    )
            task = scb.PeriodicTask(
                name=item["name"], task=item["task"], **values(item.get("fields", {}))
            )
            if schedule is not None:
                task.schedule_model = schedule
            else:  # no schedule row: a dangling reference
                task.discriminator, task.schedule_id = "crontabschedule", 999_999
            session.add(task)
            session.flush()
            if item.get("force"):
                session.execute(
                    update(scb.PeriodicTask)
                    .where(scb.PeriodicTask.id == task.id)
                    .values(**values(item["force"]))
                )
            made[item["name"]] = task.id
        session.commit()
    engine.dispose()
    json.dump(made, sys.stdout)


if __name__ == "__main__":
    main()
