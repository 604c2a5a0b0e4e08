"""RedBeat's ``rrule`` (dateutil's rules) as an interval or calendar timer (see
:mod:`celery_cronstore.adopt.convert`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from celery_cronstore.adopt.convert.crontab import calendar_field, weekday_field
from celery_cronstore.adopt.convert.spec import TimerSpec, aware, interval_timer, spec

__all__ = ["RRule", "rrule_timer", "weekdays"]

# dateutil's frequencies.
YEARLY, MONTHLY, WEEKLY, DAILY, HOURLY, MINUTELY, SECONDLY = range(7)
_FREQ_NAMES = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY", "SECONDLY")
_FREQ_SECONDS = {HOURLY: 3600, MINUTELY: 60, SECONDLY: 1}


@dataclass(frozen=True)
class RRule:
    """RedBeat's ``rrule`` (dateutil's fields) as plain values.

    ``byweekday`` holds ``(weekday, n)`` pairs: 0 = Monday, ``n`` the n-th in the month
    (``None``: every one). Single values may be given bare; :meth:`of` reads RedBeat's
    object.
    """

    freq: int
    dtstart: datetime | None
    interval: int = 1
    wkst: int | None = None
    count: int | None = None
    until: datetime | None = None
    bysetpos: Any = None
    bymonth: Any = None
    bymonthday: Any = None
    byyearday: Any = None
    byeaster: Any = None
    byweekno: Any = None
    byweekday: tuple[tuple[int, int | None], ...] | None = None
    byhour: Any = None
    byminute: Any = None
    bysecond: Any = None

    @classmethod
    def of(cls, schedule: Any) -> RRule:
        """Return the fields of RedBeat's ``redbeat.schedules.rrule`` object."""
        byweekday = schedule.byweekday
        return cls(
            freq=_freq(schedule.freq),
            dtstart=schedule.dtstart,
            interval=schedule.interval,
            wkst=None if schedule.wkst is None else int(schedule.wkst),
            count=schedule.count,
            until=schedule.until,
            bysetpos=schedule.bysetpos,
            bymonth=schedule.bymonth,
            bymonthday=schedule.bymonthday,
            byyearday=schedule.byyearday,
            byeaster=schedule.byeaster,
            byweekno=schedule.byweekno,
            byweekday=None if byweekday is None else weekdays(byweekday),
            byhour=schedule.byhour,
            byminute=schedule.byminute,
            bysecond=schedule.bysecond,
        )


def _freq(value: Any) -> int:
    if isinstance(value, str) and value.upper() in _FREQ_NAMES:
        return _FREQ_NAMES.index(value.upper())
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 7:
        return value
    raise ValueError(f"rrule freq {value!r} is not one of {', '.join(_FREQ_NAMES)}")


def weekdays(value: Any) -> tuple[tuple[int, int | None], ...]:
    """Return dateutil ``byweekday`` (ints, ``MO(+1)``, ``{"wkday": 0}``, one or many) as
    ``(weekday, n)`` pairs."""
    items = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
    pairs: list[tuple[int, int | None]] = []
    for item in items:
        if isinstance(item, Mapping):
            day, n = item.get("wkday"), item.get("n")
        elif isinstance(item, int):
            day, n = item, None
        else:
            day, n = getattr(item, "weekday", None), getattr(item, "n", None)
        if isinstance(day, bool) or not isinstance(day, int) or not 0 <= day <= 6:
            raise ValueError(f"rrule byweekday {item!r} is not a weekday (0 = Monday .. 6)")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int)):
            raise ValueError(f"rrule byweekday {item!r} has a bad n {n!r}")
        pairs.append((day, n or None))
    return tuple(pairs)


def _ints(name: str, value: Any, low: int, high: int) -> frozenset[int] | None:
    if value is None:
        return None
    items = list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
    if not items:
        return None
    for v in items:
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            raise ValueError(
                f"rrule {name} {value!r} cannot be translated: {v!r} is not a whole number "
                f"in {low}..{high}"
            )
    return frozenset(items)


def _zone_name(zone: tzinfo | None, when: datetime) -> str:
    """Return an IANA name for ``zone`` (fixed offsets: ``Etc/GMT±N``)."""
    key = getattr(zone, "key", None)
    if isinstance(key, str):
        return key
    offset = when.utcoffset()
    if offset is None:
        raise ValueError("rrule dtstart has no zone: give an aware dtstart")
    if offset == timedelta(0):
        return "UTC"
    hours, rest = divmod(offset, timedelta(hours=1))
    if rest:
        raise ValueError(
            f"rrule dtstart's UTC offset {when.strftime('%z')} is not a whole number of "
            "hours and has no IANA zone: recreate the task with a calendar timer in a named "
            "zone"
        )
    return f"Etc/GMT{-hours:+d}"  # POSIX signs: Etc/GMT-2 is UTC+2


def _fixed_offset(when: datetime) -> bool:
    zone = when.tzinfo
    if isinstance(zone, timezone):
        return True
    key = getattr(zone, "key", "")
    return isinstance(key, str) and (key in ("UTC", "GMT") or key.startswith("Etc/"))


def rrule_timer(rule: RRule) -> TimerSpec:
    """Return the timer firing exactly as ``rule`` does from its ``dtstart`` (see the
    module doc for what maps); raise ``ValueError`` naming what does not."""
    freq = _freq(rule.freq)
    name = _FREQ_NAMES[freq]
    stops = [f for f in ("count", "until") if getattr(rule, f) is not None]
    if stops:
        raise ValueError(
            f"rrule {' and '.join(stops)} cannot be expressed yet (cronstore timers do not "
            "stop after a number of fires or a date): drop it, and disable the task when it "
            "should stop"
        )
    unsupported = [f for f in ("bysetpos", "byyearday", "byweekno", "byeaster") if getattr(rule, f)]
    if unsupported:
        raise ValueError(f"rrule {', '.join(unsupported)} has no cronstore timer yet")
    start = rule.dtstart
    if start is None:
        raise ValueError("rrule has no dtstart: its fires depend on when it was made")
    aware(start, "rrule dtstart")
    interval = rule.interval
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
        raise ValueError(f"rrule interval {interval!r} is not a whole number of at least 1")
    start = start.replace(microsecond=0)  # as dateutil does
    months = _ints("bymonth", rule.bymonth, 1, 12)
    days = _ints("bymonthday", rule.bymonthday, -31, 31)
    hours = _ints("byhour", rule.byhour, 0, 23)
    minutes = _ints("byminute", rule.byminute, 0, 59)
    seconds = _ints("bysecond", rule.bysecond, 0, 59)
    week = rule.byweekday or None
    if freq in _FREQ_SECONDS:
        given = [
            f
            for f, v in (
                ("bymonth", months), ("bymonthday", days), ("byweekday", week),
                ("byhour", hours), ("byminute", minutes), ("bysecond", seconds),
            )
            if v
        ]  # fmt: skip
        if given:
            raise ValueError(
                f"a {name} rrule with {', '.join(given)} has no cronstore timer: use a cron "
                "or calendar timer"
            )
        if not _fixed_offset(start):
            raise ValueError(
                f"a {name} rrule in the zone {start.tzinfo} steps wall-clock time, which an "
                "interval does not follow across daylight-saving changes: give dtstart a "
                "fixed UTC offset"
            )
        return interval_timer(interval * _FREQ_SECONDS[freq], start)
    if interval != 1:
        raise ValueError(
            f"a {name} rrule with interval {interval} has no cronstore timer yet (calendar "
            "timers cannot skip periods): use interval 1"
        )
    # dateutil's defaults: what a rule leaves out comes from dtstart.
    if days is None and week is None:
        if freq == YEARLY:
            months = months or frozenset({start.month})
            days = frozenset({start.day})
        elif freq == MONTHLY:
            days = frozenset({start.day})
        elif freq == WEEKLY:
            week = ((start.weekday(), None),)
    hours = hours or frozenset({start.hour})
    minutes = minutes or frozenset({start.minute})
    seconds = seconds or frozenset({start.second})
    weekday_text = ""
    if week is not None:
        nths = {n for _, n in week} if freq in (MONTHLY, YEARLY) else {None}
        if len(nths) > 1 or any(n is not None and not 1 <= n <= 5 for n in nths):
            raise ValueError(
                f"rrule byweekday {rule.byweekday!r} (n-th weekdays counted from the end, "
                "or different n) has no cronstore timer: use first..fifth of one n"
            )
        [nth] = nths
        if nth is not None:
            if days is not None:
                raise ValueError("rrule with both bymonthday and an n-th byweekday has no timer")
            if freq == YEARLY and months is None:
                raise ValueError("a YEARLY rrule's n-th weekday of the year has no timer")
            days = frozenset(range(7 * nth - 6, min(7 * nth, 31) + 1))
        weekday_text = weekday_field(frozenset(d for d, _ in week))
    if days is not None and any(d <= 0 for d in days):
        raise ValueError(
            f"rrule bymonthday {rule.bymonthday!r} counts from the end of the month: no "
            "cronstore timer yet mixes that; use positive days"
        )
    date = (
        f"*-{calendar_field(months, 1, 12) if months else '*'}-"
        f"{calendar_field(days, 1, 31) if days else '*'}"
    )
    clock = (
        f"{calendar_field(hours, 0, 23)}:{calendar_field(minutes, 0, 59)}:"
        f"{calendar_field(seconds, 0, 59)}"
    )
    expression = f"{weekday_text} {date} {clock}".strip()
    return spec(expression, "calendar", _zone_name(start.tzinfo, start))
