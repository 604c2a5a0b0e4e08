"""celery-cronstore: rows in cronstore_periodic_task, written by COPY."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .base import Driver, minute_of, task_name, task_of


class Cronstore(Driver):
    """celery_cronstore.Scheduler on a PostgreSQL database."""

    key = "cronstore"

    @staticmethod
    def fill(target: str, n: int, now: datetime) -> None:
        from celery_cronstore.store import Store
        from celery_cronstore.store.schema import beat, fire, periodic_task
        from celery_cronstore.timers import parse_timer

        store = Store(target)
        store.upgrade()
        with store.begin() as conn:
            conn.exec_driver_sql(
                f"TRUNCATE {fire.name}, {periodic_task.name}, {beat.name} RESTART IDENTITY CASCADE"
            )
        timers = {m: parse_timer(f"{m} * * * *", tz="UTC") for m in range(60)}
        next_runs = {m: timer.next_after(now) for m, timer in timers.items()}
        naive = now.replace(tzinfo=None)
        raw = store.engine.raw_connection()
        try:
            cursor = raw.cursor()
            columns = "name, task, timer_kind, timer, tz, next_run, created_at, updated_at"
            with cursor.copy(f"COPY {periodic_task.name} ({columns}) FROM STDIN") as copy:
                for i in range(n):
                    timer = timers[minute_of(i, now)]
                    next_run = next_runs[minute_of(i, now)]
                    assert next_run is not None
                    copy.write_row(
                        (
                            task_name(i),
                            task_of(i),
                            timer.kind,
                            str(timer),
                            timer.tz_name,
                            next_run.replace(tzinfo=None),  # naive UTC columns
                            naive,
                            naive,
                        )
                    )
            raw.commit()
            cursor.close()
        finally:
            raw.close()
        store.close()

    @staticmethod
    def load(app: Any, target: str) -> Any:
        app.conf.update(cronstore_url=target, cronstore_sync_beat_schedule=False)
        from celery_cronstore.scheduler import Scheduler

        return Scheduler

    @staticmethod
    def make_due(app: Any, target: str, names: list[str], last_run: datetime) -> None:
        # The state a beat that was down for two hours finds: next_run in the past.
        import sqlalchemy as sa
        from sqlalchemy.pool import NullPool

        from celery_cronstore.store.schema import periodic_task
        from celery_cronstore.timers import parse_timer

        engine = sa.create_engine(target, poolclass=NullPool)
        with engine.begin() as conn:
            rows = conn.execute(
                sa.select(periodic_task.c.name, periodic_task.c.timer).where(
                    periodic_task.c.name.in_(names)
                )
            ).all()
            by_timer: dict[str, list[str]] = {}
            for name, timer in rows:
                by_timer.setdefault(timer, []).append(name)
            for timer, group in by_timer.items():
                due = parse_timer(timer, kind="cron", tz="UTC").next_after(last_run)
                conn.execute(
                    sa.update(periodic_task)
                    .where(periodic_task.c.name.in_(group))
                    .values(next_run=due)
                )
        engine.dispose()
