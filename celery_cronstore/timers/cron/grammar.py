"""The crontab grammar: fields, names, macros, and the check of every token."""

from __future__ import annotations

import re
from typing import NoReturn

from celery_cronstore.errors import TimerSyntaxError

__all__ = [
    "FIELDS",
    "MACROS",
    "MACRO_TEXT",
    "MONTHS",
    "WEEKDAYS",
    "field_at",
    "normalize",
    "syntax",
]

MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MACRO_TEXT: dict[str, str] = {
    "@yearly": "every year on January 1 at 00:00",
    "@annually": "every year on January 1 at 00:00",
    "@monthly": "every month on day 1 at 00:00",
    "@weekly": "every Sunday at 00:00",
    "@daily": "every day at 00:00",
    "@midnight": "every day at 00:00",
    "@hourly": "every hour at minute 0",
}

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")


class _Field:
    """One column of a crontab line: its name, value range and accepted names."""

    def __init__(self, name: str, low: int, high: int, names: tuple[str, ...] = ()) -> None:
        self.name = name
        self.low = low
        self.high = high
        # Names map to low, low+1, ... (jan=1, sun=0).
        self.names = {n: low + i for i, n in enumerate(names)}


FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, MONTHS),
    _Field("day-of-week", 0, 7, WEEKDAYS),
    _Field("second", 0, 59),
)

_BLANKS = re.compile(r"\S+")
_ITEM = re.compile(
    r"^(?:\*|(?P<first>[a-z0-9]+)(?:-(?P<last>[a-z0-9]+))?)(?:/(?P<step>[a-z0-9]*))?$"
)
_EXTENSION = re.compile(r"[#?]|^[lwhr]$|^\d+[lw]$|^[lw]\d+$|^h\(|^r\(")
_MAX_DIGITS = 4  # never hand int() a 5000-digit string: it raises on CPython >= 3.11


def field_at(expression: str, index: int) -> tuple[str, int]:
    """Return (text, position) of field ``index`` (0-based) of a crontab line."""
    match = list(_BLANKS.finditer(expression))[index]
    return match.group(), match.start()


def syntax(message: str, expression: str, token: str | None, position: int | None) -> NoReturn:
    """Raise the :class:`TimerSyntaxError` naming ``token`` (shortened) at ``position``."""
    if token is not None and len(token) > 24:
        token = token[:20] + "..."
    raise TimerSyntaxError(message, expression=expression, token=token, position=position)


def _check_value(text: str, field: _Field, expression: str, position: int) -> None:
    if text.isdigit():
        if len(text) > _MAX_DIGITS or not field.low <= int(text) <= field.high:
            syntax(
                f"{field.name} {text[:8]} is out of range {field.low}..{field.high}",
                expression,
                text,
                position,
            )
        return
    if text.lower() in field.names:
        return
    hint = f"a number {field.low}..{field.high}"
    if field.names:
        hint += f" or a name like {next(iter(field.names))!r}"
    syntax(f"{field.name} value must be {hint}", expression, text, position)


def _check_field(text: str, field: _Field, expression: str, start: int) -> None:
    """Raise TimerSyntaxError naming the first bad token of one field (``text`` as written)."""
    for index, char in enumerate(text):
        if not (char.isascii() and (char.isalnum() or char in "*-/,#?()")):
            syntax(
                f"unexpected character in the {field.name} field", expression, char, start + index
            )
    offset = 0
    items = text.split(",")
    for item in items:
        position = start + offset
        offset += len(item) + 1
        if not item:
            syntax(f"empty list item in the {field.name} field", expression, text, start)
        lowered = item.lower()
        if _EXTENSION.search(lowered):
            syntax(
                f"croniter extension in the {field.name} field is not supported "
                "(use a calendar timer)",
                expression,
                item,
                position,
            )
        match = _ITEM.match(lowered)
        if match is None:
            syntax(f"malformed {field.name} item", expression, item, position)
        if match["first"] is not None:
            _check_value(
                item[match.start("first") : match.end("first")], field, expression, position
            )
        if match["last"] is not None:
            at = match.start("last")
            _check_value(item[at : match.end("last")], field, expression, position + at)
        step = match["step"]
        if step is not None:
            step_at = position + match.start("step")
            span = field.high - field.low + 1
            if not step.isdigit():
                syntax(f"{field.name} step must be a whole number", expression, step, step_at)
            if len(step) > _MAX_DIGITS or int(step) > span:
                syntax(
                    f"{field.name} step {step[:8]} is larger than the range "
                    f"{field.low}..{field.high}",
                    expression,
                    step,
                    step_at,
                )
            if int(step) == 0:
                syntax(f"{field.name} step must be at least 1", expression, step, step_at)


def normalize(expression: str) -> tuple[str, str | None]:
    """Return (canonical text, macro or None) after checking every field."""
    text = expression.strip()
    if text.startswith("@"):
        macro = text.lower()
        if macro == "@reboot":
            syntax(
                "@reboot has no meaning for a periodic scheduler",
                expression,
                text,
                expression.index("@"),
            )
        if macro not in MACROS:
            syntax(
                f"unknown cron macro (expected one of {', '.join(MACROS)})",
                expression,
                text,
                expression.index("@"),
            )
        return macro, macro
    spans = [(m.group(), m.start()) for m in _BLANKS.finditer(expression)]
    if len(spans) not in (5, 6):
        token, position = spans[6] if len(spans) > 6 else (None, None)
        syntax(
            "a cron expression has 5 fields (minute hour day-of-month month day-of-week) "
            f"or 6 (plus seconds), not {len(spans)}",
            expression,
            token,
            position,
        )
    for (field_text, start), field in zip(spans, FIELDS, strict=False):
        _check_field(field_text, field, expression, start)
    return " ".join(_star_list(text) for text, _ in spans).lower(), None


def _star_list(field: str) -> str:
    """Return ``*`` for a list holding a bare ``*`` (``*,0``), else ``field`` unchanged.

    The list is the union of its items, so it means every value, as croniter and Vixie
    cron read it; croniter also treats it as an unrestricted day field (``0 0 1,* * mon``
    fires on Mondays only). croniter expands it to ``['*', 0]``, which its own value
    sets cannot hold, so it is written ``*`` before croniter sees it.
    """
    return "*" if "*" in field.split(",") else field
