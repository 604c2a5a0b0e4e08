"""Celery's ``crontab`` as a cron or calendar timer (see :mod:`celery_cronstore.adopt.convert`),
and the field writers the rrule conversion shares."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from celery_cronstore.adopt.convert.spec import TimerSpec, spec

__all__ = ["Cronspec", "calendar_field", "crontab_timer", "weekday_field"]

#: A crontab field as Celery takes it: text, one number, or numbers.
Cronspec = str | int | Iterable[int]
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")

_CRON_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day_of_month", 1, 31),
    ("month_of_year", 1, 12),
    ("day_of_week", 0, 6),
)


def _expand(name: str, value: Any, low: int, high: int) -> frozenset[int]:
    """Return the values Celery expands one crontab field to (ValueError naming it)."""
    from celery.schedules import ParseException, crontab_parser

    def bad(why: str) -> ValueError:
        return ValueError(f"crontab {name} {value!r} cannot be translated: {why}")

    if isinstance(value, bool):
        raise bad("give a number or crontab text, not a boolean")
    if isinstance(value, int):
        found = {value}
    elif isinstance(value, str):
        text = "".join(value.split())  # as Celery's own spacing never matters to its users
        try:
            found = crontab_parser(high - low + 1, low).parse(text or "*")
        except (ParseException, ValueError, TypeError, KeyError, IndexError) as exc:
            raise bad(str(exc) or type(exc).__name__) from None
    elif isinstance(value, Iterable):
        items = list(value)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in items):
            raise bad("a collection must hold whole numbers only")
        found = set(items)
    else:
        raise bad(f"a {type(value).__name__} is not a crontab field")
    outside = sorted(v for v in found if not low <= v <= high)
    if outside:
        raise bad(f"{outside[0]} is outside {low}-{high}")
    if not found:
        raise bad("it matches no value")
    return frozenset(found)


def _runs(values: Sequence[int]) -> list[tuple[int, int]]:
    """Return the runs of consecutive values of sorted ``values`` as (first, last)."""
    runs: list[tuple[int, int]] = []
    for v in values:
        if runs and runs[-1][1] == v - 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    return runs


def _progression(values: Sequence[int]) -> int | None:
    """Return the common step (> 1) of sorted ``values`` if they are a progression of 3+."""
    if len(values) < 3:
        return None
    step = values[1] - values[0]
    if step > 1 and all(b - a == step for a, b in itertools.pairwise(values)):
        return step
    return None


def _cron_field(values: frozenset[int], low: int, high: int) -> str:
    if len(values) == high - low + 1:
        return "*"
    ordered = sorted(values)
    pair_step = ordered[-1] - low
    even = pair_step > 1 and (high - low + 1) % pair_step == 0
    if len(ordered) == 2 and even and ordered == list(range(low, high + 1, pair_step)):
        return f"*/{pair_step}"  # {0, 30}: */30, as written
    step = _progression(ordered)
    if step is not None:
        if ordered[0] == low and ordered[-1] + step > high:
            return f"*/{step}"
        return f"{ordered[0]}-{ordered[-1]}/{step}"
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in _runs(ordered))


def calendar_field(values: frozenset[int], low: int, high: int, width: int = 2) -> str:
    if len(values) == high - low + 1:
        return "*"
    ordered = sorted(values)
    step = _progression(ordered)
    if step is not None:
        return f"{ordered[0]:0{width}d}..{ordered[-1]:0{width}d}/{step}"
    return ",".join(
        f"{a:0{width}d}" if a == b else f"{a:0{width}d}..{b:0{width}d}" for a, b in _runs(ordered)
    )


def weekday_field(monday_first: frozenset[int]) -> str:
    """Return systemd weekdays for values 0 = Monday .. 6 = Sunday ("" for all)."""
    if len(monday_first) == 7:
        return ""
    return ",".join(
        _WEEKDAYS[a] if a == b else f"{_WEEKDAYS[a]}..{_WEEKDAYS[b]}"
        for a, b in _runs(sorted(monday_first))
    )


def crontab_timer(
    minute: Cronspec,
    hour: Cronspec,
    day_of_month: Cronspec,
    month_of_year: Cronspec,
    day_of_week: Cronspec,
    tz: str,
) -> TimerSpec:
    """Return the timer firing exactly when Celery's ``crontab`` with these fields does,
    read in zone ``tz``: cron, or calendar when both day fields are restricted (Celery
    ANDs them, cron ORs them; see the module doc). Raise ``ValueError`` naming the field
    and the value that cannot be translated."""
    given = (minute, hour, day_of_month, month_of_year, day_of_week)
    sets = [
        _expand(name, value, low, high)
        for (name, low, high), value in zip(_CRON_FIELDS, given, strict=True)
    ]
    minutes, hours, days, months, weekdays = sets
    if not any(day <= _MONTH_DAYS[month] for month in months for day in days):
        raise ValueError(
            f"crontab day_of_month {day_of_month!r} never occurs in month_of_year "
            f"{month_of_year!r}: it would never fire"
        )
    both = len(days) < 31 and len(weekdays) < 7
    if not both:
        expression = " ".join(
            _cron_field(values, low, high)
            for values, (_, low, high) in zip(sets, _CRON_FIELDS, strict=True)
        )
        return spec(expression, "cron", tz)
    week = weekday_field(frozenset((d - 1) % 7 for d in weekdays))  # Celery: 0 = Sunday
    expression = (
        f"{week} *-{calendar_field(months, 1, 12)}-{calendar_field(days, 1, 31)} "
        f"{calendar_field(hours, 0, 23)}:{calendar_field(minutes, 0, 59)}:00"
    )
    return spec(expression, "calendar", tz)


#: The most days each month can have (February: 29, as Celery counts).
_MONTH_DAYS = {
    1: 31,
    2: 29,
    3: 31,
    4: 30,
    5: 31,
    6: 30,
    7: 31,
    8: 31,
    9: 30,
    10: 31,
    11: 30,
    12: 31,
}
