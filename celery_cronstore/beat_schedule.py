"""Translate entries of Celery's ``beat_schedule`` setting into cronstore timers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery_cronstore.timers import Timer, parse_timer

__all__ = ["timer_from_entry"]


def _interval(seconds: float, name: str) -> str:
    if seconds < 1 or seconds != int(seconds):
        raise ValueError(
            f"beat_schedule entry {name!r}: interval {seconds}s is not a whole number of seconds"
        )
    return f"every {int(seconds)}s"


def timer_from_entry(name: str, schedule: Any, default_tz: str) -> Timer:
    """Return the timer for one ``beat_schedule`` entry's ``schedule`` value.

    Understands numbers and timedeltas (intervals), ``celery.schedules.schedule``,
    ``crontab`` (as a cron timer in the app's zone) and strings in any timer syntax.
    Raise ``ValueError`` naming the entry for anything else (e.g. ``solar``).
    """
    from celery import schedules

    if isinstance(schedule, str):
        return parse_timer(schedule, tz=default_tz)
    if isinstance(schedule, (int, float)) and not isinstance(schedule, bool):
        return parse_timer(_interval(float(schedule), name), kind="interval")
    if isinstance(schedule, timedelta):
        return parse_timer(_interval(schedule.total_seconds(), name), kind="interval")
    if isinstance(schedule, schedules.crontab):
        fields = (
            schedule._orig_minute,
            schedule._orig_hour,
            schedule._orig_day_of_month,
            schedule._orig_month_of_year,
            schedule._orig_day_of_week,
        )
        expression = " ".join(str(f).replace(" ", "") for f in fields)
        # A crontab has no zone of its own: Celery evaluates it in the app's timezone.
        return parse_timer(expression, kind="cron", tz=default_tz)
    if isinstance(schedule, schedules.schedule) and not isinstance(schedule, schedules.solar):
        return parse_timer(_interval(schedule.run_every.total_seconds(), name), kind="interval")
    raise ValueError(
        f"beat_schedule entry {name!r}: cannot store a {type(schedule).__name__} schedule; "
        "use a crontab, a timedelta, a number of seconds or a timer string"
    )
