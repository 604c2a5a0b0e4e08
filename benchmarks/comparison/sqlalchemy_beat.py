"""sqlalchemy-celery-beat: its own SQLAlchemy models, ``beat_dburi`` on PostgreSQL."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .base import Driver, minute_of, minutes_used, task_name, task_of

#: Rows per INSERT of the fill.
CHUNK = 5000


class SQLAlchemyBeat(Driver):
    """sqlalchemy_celery_beat.schedulers.DatabaseScheduler on a PostgreSQL database."""

    key = "sqlalchemy"

    @staticmethod
    def fill(target: str, n: int, now: datetime) -> None:
        import sqlalchemy as sa
        from sqlalchemy_celery_beat.models import (
            CrontabSchedule,
            PeriodicTask,
            PeriodicTaskChanged,
        )
        from sqlalchemy_celery_beat.session import ModelBase, SessionManager

        manager = SessionManager()
        engine, session_factory = manager.create_session(target)
        manager.prepare_models(engine)
        tables = ", ".join(t.name for t in ModelBase.metadata.sorted_tables)
        with engine.begin() as conn:
            conn.exec_driver_sql(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
        session = session_factory()
        try:
            crons = {}
            for m in minutes_used(n, now):
                crons[m] = CrontabSchedule(minute=str(m), hour="*", timezone="UTC")
                session.add(crons[m])
            session.commit()
            for start in range(0, n, CHUNK):
                session.execute(
                    sa.insert(PeriodicTask),
                    [
                        {
                            "name": task_name(i),
                            "task": task_of(i),
                            "args": "[]",
                            "kwargs": "{}",
                            "headers": "{}",
                            "discriminator": "crontabschedule",
                            "schedule_id": crons[minute_of(i, now)].id,
                            "enabled": True,
                            "one_off": False,
                            "last_run_at": now,
                            "total_run_count": 0,
                            "date_changed": now,
                            "description": "",
                        }
                        for i in range(start, min(n, start + CHUNK))
                    ],
                )
            session.commit()
            PeriodicTaskChanged.update_from_session(session)  # bulk inserts skip the hook
        finally:
            session.close()
        engine.dispose()

    @staticmethod
    def load(app: Any, target: str) -> Any:
        app.conf.beat_dburi = target
        from sqlalchemy_celery_beat.schedulers import DatabaseScheduler

        return DatabaseScheduler

    @staticmethod
    def make_due(app: Any, target: str, names: list[str], last_run: datetime) -> None:
        import sqlalchemy as sa
        from sqlalchemy_celery_beat.models import PeriodicTask, PeriodicTaskChanged
        from sqlalchemy_celery_beat.session import SessionManager

        engine, session_factory = SessionManager().create_session(target)
        session = session_factory()
        try:
            session.execute(
                sa.update(PeriodicTask)
                .where(PeriodicTask.name.in_(names))
                .values(last_run_at=last_run)
            )
            PeriodicTaskChanged.update_from_session(session)  # commits
        finally:
            session.close()
        engine.dispose()
