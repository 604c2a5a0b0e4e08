"""The peers' schedules as cronstore timers: pure conversions, one home for each rule.

Every function returns a :class:`TimerSpec` (the ``timer``, ``kind`` and ``tz`` fields of
:mod:`celery_cronstore.fields`, in canonical form: the expression parses back to the
same timer) or raises ``ValueError`` naming what cannot be translated and the fix. The
only schedules mapped are those whose fire times come out *the same*; anything merely
close is refused, never approximated. Nothing here reads the clock or opens a connection.

Celery's ``crontab`` (:func:`crontab_timer`)
    Each field is expanded with Celery's own parser (``celery.schedules.crontab_parser``:
    ``*/15``, ``1-5``, ``mon-fri``, ``jan``, lists, wrapping ranges, sets of ints), so
    exactly what Celery accepts is accepted and means what Celery means. Celery fires on
    a day only when the month, the day of the month **and** the day of the week all
    match; POSIX cron (our ``cron`` kind) fires when *either* day field matches if both
    are restricted. So:

    * at most one of day_of_month/day_of_week restricted: a ``cron`` timer, each field
      written from its expanded set (``*``, ``*/N``, ``A-B/N``, ``A-B``, lists);
    * both restricted: a ``calendar`` timer (systemd ``OnCalendar`` ANDs the weekday
      with the date): ``crontab(minute=0, hour=9, day_of_month="1-7",
      day_of_week="mon")`` becomes ``Mon *-*-01..07 09:00:00``.

    A field whose expansion is every value is written ``*`` (``1-31`` is as unrestricted
    as ``*`` for Celery). The zone is the crontab's (see :func:`schedule_timer`). At
    daylight-saving changes cronstore follows Vixie cron's rule (its module doc), which
    Celery's arithmetic does not spell out; away from them the fires are identical.

Intervals (:func:`interval_timer`)
    Whole seconds of at least 1 (at most 366 days), elapsed time. With an ``origin``
    (Celery's ``last_run_at``: it fires ``run_every`` after the last run) the grid is
    ``every N from <origin UTC>``; without one, the epoch grid.

One-offs (:func:`once_timer`)
    A ``once`` timer at the instant (UTC canonical form).

RedBeat's ``rrule`` (:func:`rrule_timer`, :class:`RRule`)
    dateutil's rule, evaluated from ``dtstart``:

    * ``SECONDLY``/``MINUTELY``/``HOURLY`` with no ``by*`` rule: an interval of
      ``interval`` units from ``dtstart`` (dateutil drops its microseconds), when
      ``dtstart`` has a fixed UTC offset (RedBeat stores it so); in a zone with
      daylight-saving time dateutil steps wall-clock time, which no interval follows:
      refused;
    * ``DAILY``/``WEEKLY``/``MONTHLY``/``YEARLY`` with ``interval`` 1: a calendar timer of
      ``bymonth``/``bymonthday``/``byweekday``/``byhour``/``byminute``/``bysecond``,
      ANDed as dateutil does; a rule left out takes ``dtstart``'s value as dateutil does
      (a ``DAILY`` rule without ``byhour`` fires at ``dtstart``'s hour). ``MO(+2)`` in a
      monthly rule (the second Monday) is ``Mon *-*-08..14``. The zone is ``dtstart``'s:
      an IANA name, or a whole-hour offset as ``Etc/GMT±N``;
    * refused, naming them: ``count`` and ``until`` (a timer cannot stop yet), ``interval``
      above 1 for calendar frequencies, ``bysetpos``, ``byyearday``, ``byweekno``,
      ``byeaster``, negative or mixed ``n``-th weekdays, negative month days, sub-daily
      frequencies with a ``by*`` rule, offsets that are not whole hours.

    dateutil never fires before ``dtstart``: readers pass it on as the task's
    ``start_at``.

Everything else (:func:`schedule_timer`)
    ``celery.schedules.schedule`` (``relative`` only when ``run_every`` is a whole number
    of the unit Celery rounds to; origin: Celery's rounded next fire), numbers and
    timedeltas (intervals), strings (any cronstore timer syntax, read in ``tz``).
    ``solar`` becomes a solar timer (the same event at the same place). A crontab with its
    own ``nowfun`` is refused (its zone is only known by calling it), as is any other
    schedule class.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from celery_cronstore.adopt.convert.crontab import Cronspec, crontab_timer
from celery_cronstore.adopt.convert.rrule import RRule, rrule_timer, weekdays
from celery_cronstore.adopt.convert.spec import TimerSpec, interval_timer, once_timer, solar_timer
from celery_cronstore.timers import parse_timer

__all__ = [
    "Cronspec",
    "RRule",
    "TimerSpec",
    "crontab_timer",
    "interval_timer",
    "once_timer",
    "rrule_timer",
    "schedule_timer",
    "solar_timer",
    "weekdays",
]


def _is_rrule(schedule: Any) -> bool:
    return type(schedule).__name__ == "rrule" and all(
        hasattr(schedule, a) for a in ("freq", "dtstart", "interval", "byweekday")
    )


def _relative_origin(run_every: timedelta, last_run_at: datetime | None) -> datetime | None:
    """Return the grid origin of Celery's ``relative`` schedule (see :func:`schedule_timer`)."""
    from celery.utils.time import delta_resolution

    total = run_every.total_seconds()
    unit = 86_400 if total >= 86_400 else 3600 if total >= 3600 else 60 if total >= 60 else 1
    if total % unit:
        raise ValueError(
            f"relative schedule every {total:g}s: Celery rounds each fire down to the "
            f"{ {86_400: 'day', 3600: 'hour', 60: 'minute', 1: 'second'}[unit] }, so its fires "
            "are not evenly spaced; set relative=False or a whole number of that unit"
        )
    if last_run_at is None:
        return None
    nxt: datetime = delta_resolution(_aware_local(last_run_at) + run_every, run_every)
    return nxt.replace(microsecond=0)


def _aware_local(instant: datetime) -> datetime:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"last run {instant.isoformat()} has no zone: give an aware datetime")
    return instant


def _app_zone(schedule: Any, tz: str) -> str:
    app = getattr(schedule, "_app", None)
    if app is None:
        return tz
    return str(app.conf.timezone or "UTC")


def schedule_timer(schedule: Any, tz: str, *, last_run_at: datetime | None = None) -> TimerSpec:
    """Return the timer of a Celery schedule object (or a number, timedelta, timer string).

    ``tz`` is the zone Celery reads a crontab in when it has no app of its own (the
    app's ``timezone``) and the zone of timer strings; ``last_run_at`` (aware) is the
    origin of intervals, since Celery fires them ``run_every`` after the last run.
    Raise ``ValueError`` naming what cannot be translated (see the module doc).
    """
    from celery import schedules

    if isinstance(schedule, str):
        timer = parse_timer(schedule, tz=tz)
        return TimerSpec(str(timer), timer.kind, timer.tz_name)
    if isinstance(schedule, bool):
        raise ValueError(f"schedule {schedule!r} is not a schedule: give seconds or a crontab")
    if isinstance(schedule, (int, float)):
        return interval_timer(schedule, last_run_at)
    if isinstance(schedule, timedelta):
        return interval_timer(schedule.total_seconds(), last_run_at)
    if isinstance(schedule, schedules.solar):
        return solar_timer(schedule.event, schedule.lat, schedule.lon)
    if isinstance(schedule, schedules.crontab):
        if schedule.nowfun is not None:
            raise ValueError(
                "a crontab with its own nowfun: its zone is only known by calling it; give "
                "the entry a cronstore timer string with its zone instead"
            )
        return crontab_timer(
            schedule.minute,
            schedule.hour,
            schedule.day_of_month,
            schedule.month_of_year,
            schedule.day_of_week,
            _app_zone(schedule, tz),
        )
    if isinstance(schedule, schedules.schedule):
        run_every = schedule.run_every
        if not isinstance(run_every, timedelta):
            raise ValueError(f"schedule run_every {run_every!r} is not a timedelta")
        origin = last_run_at
        if schedule.relative:
            origin = _relative_origin(run_every, last_run_at)
        return interval_timer(run_every.total_seconds(), origin)
    if _is_rrule(schedule):
        return rrule_timer(RRule.of(schedule))
    raise ValueError(
        f"cannot convert a {type(schedule).__module__}.{type(schedule).__name__} schedule: "
        "use a crontab, a schedule/timedelta/number of seconds or a cronstore timer string"
    )
