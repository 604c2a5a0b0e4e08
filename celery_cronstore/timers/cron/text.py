"""English descriptions of crontab lines (``CronTimer.describe``)."""

from __future__ import annotations

import re

from celery_cronstore.timers.cron.grammar import MONTH_NAMES, MONTHS, WEEKDAY_NAMES, WEEKDAYS

__all__ = ["describe"]


def _values(text: str) -> str:
    return text.replace(",", ", ")


def _names_text(field: str, short: tuple[str, ...], names: tuple[str, ...], first: int) -> str:
    """Spell out the numbers and short names of a month or weekday field in English.

    ``first`` is the number of ``names[0]`` (month 1 is January, weekday 0 is Sunday;
    weekday 7 is Sunday again).
    """

    def one(token: str) -> str:
        if token.isdigit():
            return names[(int(token) - first) % len(names)]
        if token in short:
            return names[short.index(token)]
        return token

    parts = []
    for item in field.split(","):
        parts.append(item if "/" in item else "-".join(one(t) for t in item.split("-")))
    return ", ".join(parts)


def describe(fields: list[str], sets: tuple[frozenset[int] | None, ...]) -> str:
    minute, hour, dom, month, dow = fields[:5]
    second = fields[5] if len(fields) == 6 else "0"
    single = re.compile(r"^\d+$")
    if single.match(minute) and single.match(hour) and single.match(second):
        clock = f"at {int(hour):02d}:{int(minute):02d}"
        if int(second):
            clock += f":{int(second):02d}"
    elif sets[0] is None and sets[1] is None and len(fields) == 5:
        clock = "every minute"
    elif minute.startswith("*/") and sets[1] is None and second == "0":
        clock = f"every {minute[2:]} minutes"
    elif single.match(minute) and sets[1] is None and second == "0":
        clock = f"every hour at minute {int(minute)}"
    else:
        clock = f"at minute {_values(minute)} of hour {_values(hour)}"
        if second != "0":
            clock = f"at second {_values(second)} of minute {_values(minute)} of hour {hour}"
    days = []
    if sets[2] is not None:
        days.append(f"on day {_values(dom)} of the month")
    if sets[4] is not None:
        joiner = "or " if days else ""  # cron: either day field matches
        days.append(f"{joiner}on {_names_text(dow, WEEKDAYS, WEEKDAY_NAMES, 0)}")
    if sets[3] is not None:
        days.append(f"in {_names_text(month, MONTHS, MONTH_NAMES, 1)}")
    return " ".join([clock, *days])
