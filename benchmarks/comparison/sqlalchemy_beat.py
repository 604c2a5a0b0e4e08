"""sqlalchemy-celery-beat: its own SQLAlchemy models, ``beat_dburi`` on PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .base import HOUR, Driver, minute_of, minutes_used, task_name, task_of

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
    def fill_spread(target: str, fires: list[datetime], now: datetime) -> None:
        import sqlalchemy as sa
        from sqlalchemy_celery_beat.models import (
            IntervalSchedule,
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
            hourly = IntervalSchedule(every=HOUR, period="seconds")
            session.add(hourly)
            session.commit()
            session.execute(
                sa.insert(PeriodicTask),
                [
                    {
                        "name": task_name(i),
                        "task": task_of(i),
                        "args": f"[{i}]",
                        "kwargs": "{}",
                        "headers": "{}",
                        "discriminator": "intervalschedule",
                        "schedule_id": hourly.id,
                        "enabled": True,
                        "one_off": False,
                        "last_run_at": at - timedelta(seconds=HOUR),
                        "total_run_count": 0,
                        "date_changed": now,
                        "description": "",
                    }
                    for i, at in enumerate(fires)
                ],
            )
            session.commit()
            PeriodicTaskChanged.update_from_session(session)
        finally:
            session.close()
        engine.dispose()

    @staticmethod
    def edit_due(target: str, name: str, when: datetime) -> tuple[float, float]:
        # Through the models: an hourly interval last run an hour ago; the ORM's update
        # hook moves the change marker in the same transaction.
        import time

        import sqlalchemy as sa
        from sqlalchemy_celery_beat.models import IntervalSchedule, PeriodicTask
        from sqlalchemy_celery_beat.session import SessionManager

        engine, session_factory = SessionManager().create_session(target)
        session = session_factory()
        try:
            before = time.time()
            hourly = session.execute(
                sa.select(IntervalSchedule).where(
                    IntervalSchedule.every == HOUR, IntervalSchedule.period == "seconds"
                )
            ).scalar()
            if hourly is None:
                hourly = IntervalSchedule(every=HOUR, period="seconds")
                session.add(hourly)
                session.flush()
            task = session.execute(
                sa.select(PeriodicTask).where(PeriodicTask.name == name)
            ).scalar_one()
            task.schedule_model = hourly
            task.last_run_at = when - timedelta(seconds=HOUR)
            session.commit()
            return before, time.time()
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
