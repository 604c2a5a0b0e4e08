"""Short English descriptions of calendar events ("every 5 minutes", "Mon..Fri at 09:30")."""

from __future__ import annotations

from celery_cronstore.timers.calendar.fields import (
    DAY,
    HOUR,
    MINUTE,
    MONTH,
    SECOND,
    USEC,
    YEAR,
    Chain,
    format_chain,
)
from celery_cronstore.timers.calendar.spec import CalendarSpec, format_weekdays

__all__ = ["describe_spec"]

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _single(chain: Chain | None) -> int | None:
    """Return the value of a chain that is one plain value, else None."""
    if chain is not None and len(chain) == 1 and chain[0].stop < 0 and chain[0].repeat == 0:
        return chain[0].start
    return None


def _step(chain: Chain | None, span: int) -> int | None:
    """Return N for a chain ``0/N`` whose steps divide ``span`` evenly, else None."""
    if chain is None or len(chain) != 1:
        return None
    comp = chain[0]
    if comp.start == 0 and comp.stop < 0 and comp.repeat > 0 and span % comp.repeat == 0:
        return comp.repeat
    return None


def _every(count: int, unit: str) -> str:
    return f"every {unit}" if count == 1 else f"every {count} {unit}s"


def _seconds(value: int) -> str:
    whole, frac = divmod(value, USEC)
    return f"{whole:02d}" + (f".{frac:06d}".rstrip("0") if frac else "")


def _time_phrase(spec: CalendarSpec) -> tuple[str, bool]:
    """Return (phrase, periodic) for the time of day."""
    hour, minute, second = _single(spec.hour), _single(spec.minute), _single(spec.second)
    if hour is not None and minute is not None and second is not None:
        text = f"{hour:02d}:{minute:02d}"
        return (f"{text}:{_seconds(second)}" if second else text), False
    if spec.hour is None and spec.minute is None:
        if second == 0:
            return "every minute", True
        step = _step(spec.second, 60 * USEC)
        if step is not None and step % USEC == 0:
            return _every(step // USEC, "second"), True
    if spec.hour is None and second == 0:
        if minute == 0:
            return "every hour", True
        if minute is not None:
            return f"every hour at minute {minute}", True
        step = _step(spec.minute, 60)
        if step is not None:
            return _every(step, "minute"), True
    if minute == 0 and second == 0:
        step = _step(spec.hour, 24)
        if step is not None:
            return _every(step, "hour"), True
    pattern = (
        f"{format_chain(HOUR, spec.hour)}:{format_chain(MINUTE, spec.minute)}:"
        f"{format_chain(SECOND, spec.second)}"
    )
    return f"times matching {pattern}", True


def _date_phrase(spec: CalendarSpec) -> str | None:
    """Return a phrase for the date part, or None for every day."""
    if spec.year is None and spec.month is None and spec.day is None:
        return None
    day, month = _single(spec.day), _single(spec.month)
    if spec.year is None and not spec.last_day and day is not None:
        if spec.month is None:
            return f"on day {day} of every month"
        if month is not None:
            return f"every year on {_MONTHS[month - 1]} {day}"
    sep = "~" if spec.last_day else "-"
    return (
        f"on dates matching {format_chain(YEAR, spec.year)}-{format_chain(MONTH, spec.month)}"
        f"{sep}{format_chain(DAY, spec.day)}"
    )


def describe_spec(spec: CalendarSpec, zone: str | None) -> str:
    """Return a short English description; ``zone`` is appended when given."""
    time_text, periodic = _time_phrase(spec)
    date_text = _date_phrase(spec)
    days = format_weekdays(spec.weekdays) if spec.weekdays is not None else None
    if periodic:
        text = time_text
        if days is not None:
            text += f" on {days}"
        if date_text is not None:
            text += f", {date_text}"
    else:
        when = date_text or ("every day" if days is None else "")
        if days is not None:
            when = f"{days}, {when}" if when else days
        text = f"{when} at {time_text}"
    return f"{text} {zone}" if zone else text
