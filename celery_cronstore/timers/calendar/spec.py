"""The parsed, normalized calendar event and its canonical text."""

from __future__ import annotations

from dataclasses import dataclass

from celery_cronstore.timers.calendar.fields import (
    DAY,
    HOUR,
    MINUTE,
    MONTH,
    SECOND,
    YEAR,
    Chain,
    format_chain,
)

__all__ = ["ALL_WEEKDAYS", "WEEKDAY_NAMES", "CalendarSpec", "format_weekdays"]

WEEKDAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
ALL_WEEKDAYS = 0b1111111


def format_weekdays(bits: int) -> str:
    """Return weekday bits (bit 0 = Monday) as systemd prints them: runs of 3+ use ``..``."""
    parts: list[str] = []
    day = 0
    while day < 7:
        if not bits & (1 << day):
            day += 1
            continue
        end = day
        while end + 1 < 7 and bits & (1 << (end + 1)):
            end += 1
        if end - day >= 2:
            parts.append(f"{WEEKDAY_NAMES[day]}..{WEEKDAY_NAMES[end]}")
        else:
            parts.extend(WEEKDAY_NAMES[day : end + 1])
        day = end + 1
    return ",".join(parts)


@dataclass(frozen=True)
class CalendarSpec:
    """A calendar event after systemd's normalization.

    ``weekdays`` is a bit set (bit 0 = Monday) or ``None`` for any day; a chain of
    ``None`` means ``*``. ``second`` is always a chain, in microseconds.
    """

    weekdays: int | None
    year: Chain | None
    month: Chain | None
    day: Chain | None
    hour: Chain | None
    minute: Chain | None
    second: Chain
    last_day: bool = False
    utc: bool = False
    timezone: str | None = None

    def __str__(self) -> str:
        text = ""
        if self.weekdays is not None:
            text = format_weekdays(self.weekdays) + " "
        text += (
            f"{format_chain(YEAR, self.year)}-{format_chain(MONTH, self.month)}"
            f"{'~' if self.last_day else '-'}{format_chain(DAY, self.day)} "
            f"{format_chain(HOUR, self.hour)}:{format_chain(MINUTE, self.minute)}:"
            f"{format_chain(SECOND, self.second)}"
        )
        if self.utc:
            text += " UTC"
        elif self.timezone is not None:
            text += " " + self.timezone
        return text
