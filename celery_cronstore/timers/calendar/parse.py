"""Parse systemd calendar events (systemd.time(7)) into a normalized :class:`CalendarSpec`.

The grammar, in the order systemd reads it::

    [weekdays " "] [date " "] [time] [" " zone]      or a shorthand ("daily", ...)
    weekdays = name ("," | ".." | "-") name ...      (Mon, Monday; any case)
    date     = [year "-"] month ("-" | "~") day      or "@" seconds-since-epoch
    time     = hour ":" minute [":" second[.fraction]]
    each field = "*" | value[".." value]["/" repeat] ("," ...)*

Every rejection raises :class:`TimerSyntaxError` naming the token and its offset. Beyond
systemd's own checks, a month and day that never exist together (``*-02-30``) are refused.
"""

from __future__ import annotations

from datetime import datetime, timezone

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers.calendar.dates import check_date_exists
from celery_cronstore.timers.calendar.fields import (
    DAY,
    HOUR,
    MINUTE,
    MONTH,
    SECOND,
    USEC,
    YEAR,
    Chain,
    Component,
    collapse_every_second,
    normalize_chain,
    validate_chain,
)
from celery_cronstore.timers.calendar.spec import ALL_WEEKDAYS, CalendarSpec
from celery_cronstore.timers.calendar.zones import split_zone

__all__ = ["parse_spec"]

_INT_MAX = 2**31 - 1
_ULONG_MAX = 2**64 - 1
_MAX_DIGITS = len(str(_ULONG_MAX))  # 20
_MAX_COMPONENTS = 241  # systemd refuses longer lists
_DIGITS = "0123456789"
_C_SPACE = " \t\n\v\f\r"
_FIELD_BY_NAME = {info.name: info for info in (YEAR, MONTH, DAY, HOUR, MINUTE, SECOND)}

_WEEKDAYS = (
    ("monday", 0), ("mon", 0), ("tuesday", 1), ("tue", 1), ("wednesday", 2), ("wed", 2),
    ("thursday", 3), ("thu", 3), ("friday", 4), ("fri", 4), ("saturday", 5), ("sat", 5),
    ("sunday", 6), ("sun", 6),
)  # fmt: skip


def _c(*values: int) -> list[Component]:
    return [Component(v) for v in values]


_DAILY = {"hour": _c(0), "minute": _c(0), "second": _c(0)}
_SHORTHANDS: dict[str, dict[str, list[Component]]] = {
    "minutely": {"second": _c(0)},
    "hourly": {"minute": _c(0), "second": _c(0)},
    "daily": _DAILY,
    "weekly": _DAILY,
    "monthly": {"day": _c(1), **_DAILY},
    "yearly": {"month": _c(1), "day": _c(1), **_DAILY},
    "annually": {"month": _c(1), "day": _c(1), **_DAILY},
    "anually": {"month": _c(1), "day": _c(1), **_DAILY},
    "quarterly": {"month": _c(1, 4, 7, 10), "day": _c(1), **_DAILY},
    "semiannually": {"month": _c(1, 7), "day": _c(1), **_DAILY},
    "semi-annually": {"month": _c(1, 7), "day": _c(1), **_DAILY},
    "biannually": {"month": _c(1, 7), "day": _c(1), **_DAILY},
    "bi-annually": {"month": _c(1, 7), "day": _c(1), **_DAILY},
}


def _ascii_lower(text: str) -> str:
    return text.lower() if text.isascii() else ""


class _Parser:
    """Cursor over the body of an expression (the part before any zone suffix)."""

    def __init__(self, expression: str, body_end: int) -> None:
        self.expression = expression
        self.text = expression[:body_end]
        self.pos = 0
        self.fields: dict[str, list[Component] | None] = {}
        self.weekdays = 0
        self.last_day = False
        self.utc = False

    # -- helpers ---------------------------------------------------------------

    def peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.text[i] if i < len(self.text) else ""

    def error(
        self, reason: str, pos: int | None = None, token: str | None = None
    ) -> TimerSyntaxError:
        at = self.pos if pos is None else pos
        if token is None:
            end = at
            while end < len(self.text) and self.text[end] != " ":
                end += 1
            token = self.text[at:end] or (self.text[at : at + 1] or None)
        if token is None:
            reason += " (at the end)"
        return TimerSyntaxError(reason, expression=self.expression, token=token, position=at)

    def too_large(self, name: str, at: int) -> TimerSyntaxError:
        """Return the error for a number too large for the ``name`` field, from ``at``."""
        info = _FIELD_BY_NAME[name]
        token = self.text[at : self.pos]
        if len(token) > 24:  # the expression is quoted in full already
            token = token[:20] + "..."
        return self.error(
            f"{name} value is too large: write a number in {info.lo}..{info.hi // info.unit}",
            at,
            token,
        )

    @staticmethod
    def to_int(digits: str) -> int | None:
        """Return the value of a run of ASCII digits, or None when it is over 20 digits long.

        ``int()`` raises a plain ValueError past 4,300 digits (CPython's limit on
        string conversion); no field takes more than 20 (2**64 - 1). Leading zeros are
        allowed, as systemd's ``strtoull`` allows them.
        """
        significant = digits.lstrip("0")
        if len(significant) > _MAX_DIGITS:
            return None
        return int(significant or "0")

    def skip_spaces(self) -> None:
        while self.peek() == " ":
            self.pos += 1

    # -- grammar ---------------------------------------------------------------

    def parse(self) -> None:
        self.parse_weekdays()
        if self.parse_date():
            self.parse_time()
        if self.pos != len(self.text):
            raise self.error("unexpected text")

    def parse_weekdays(self) -> None:
        open_from = -1
        first = True
        while True:
            word_pos = self.pos
            found = [
                (name, number)
                for name, number in _WEEKDAYS
                if _ascii_lower(self.text[self.pos : self.pos + len(name)]) == name
            ]
            if not found:
                if first:
                    return
                raise self.error("expected a weekday name")
            name, number = found[0]
            self.pos += len(name)
            sep = self.peek()
            if sep not in ("", "-", ".", ",", " "):
                raise self.error("unknown weekday", word_pos)
            self.weekdays |= 1 << number
            if open_from >= 0:
                if open_from > number:
                    raise self.error("weekday range runs backwards", word_pos)
                for day in range(open_from + 1, number):
                    self.weekdays |= 1 << day
            if sep == "":
                return
            if sep == " ":
                self.skip_spaces()
                return
            if sep == ".":
                if open_from >= 0 or self.peek(1) != ".":
                    raise self.error("misplaced '.' in weekdays", token=".")
                open_from = number
                self.pos += 2
            elif sep == "-":
                if open_from >= 0:
                    raise self.error("misplaced '-' in weekdays", token="-")
                open_from = number
                self.pos += 1
            else:
                open_from = -1
                self.pos += 1
            if self.peek() in ("", " "):
                if open_from >= 0:
                    raise self.error("weekday range has no end", self.pos - 1)
                self.skip_spaces()
                return
            first = False

    def parse_date(self) -> bool:
        """Parse the date part; return False when it was an ``@epoch`` (no time follows)."""
        if self.peek() == "":
            return True
        if self.peek() == "@":
            self.parse_epoch()
            return False
        start = self.pos
        first = self.parse_chain(MONTH.name, usec=False)
        if self.peek() in ("", ":"):
            self.pos = start  # it was the hour, not a date
            return True
        self.date_separator()
        second = self.parse_chain(DAY.name, usec=False)
        if self.peek() in ("", " "):
            self.skip_spaces()
            self.fields.update(month=first, day=second)
            return True
        if self.last_day:
            raise self.error("'~' must separate month and day")
        self.date_separator()
        third = self.parse_chain(DAY.name, usec=False)
        if self.peek() not in ("", " "):
            raise self.error("unexpected text after the date")
        self.skip_spaces()
        self.fields.update(year=first, month=second, day=third)
        return True

    def date_separator(self) -> None:
        sep = self.peek()
        if sep == "~":
            self.last_day = True
        elif sep != "-":
            raise self.error("expected '-' or '~' in the date")
        self.pos += 1

    def parse_epoch(self) -> None:
        at = self.pos
        self.pos += 1
        while self.peek() != "" and self.peek() in _C_SPACE:
            self.pos += 1
        negative = self.peek() == "-"
        if self.peek() in ("+", "-"):
            self.pos += 1
        digits_at = self.pos
        while self.peek() != "" and self.peek() in _DIGITS:
            self.pos += 1
        if self.pos == digits_at:
            raise self.error("expected seconds since the epoch after '@'", at)
        if self.pos != len(self.text):
            raise self.error("unexpected text after the epoch time")
        value = self.to_int(self.text[digits_at : self.pos])
        token = self.text[at : self.pos]
        if len(token) > 24:  # the expression is quoted in full already
            token = token[:20] + "..."
        if (
            value is None or value > _ULONG_MAX or (negative and value) or value > 7_258_118_399
        ):  # < 2200
            raise self.error("epoch time is outside 1970..2199", at, token)
        moment = datetime.fromtimestamp(value, tz=timezone.utc)
        for name, number in (
            ("year", moment.year), ("month", moment.month), ("day", moment.day),
            ("hour", moment.hour), ("minute", moment.minute), ("second", moment.second * USEC),
        ):  # fmt: skip
            self.fields[name] = [Component(number, position=at, text=token)]
        self.utc = True

    def parse_time(self) -> None:
        if self.peek() == "":
            self.fields.update(hour=_c(0), minute=_c(0), second=_c(0))
            return
        self.fields["hour"] = self.parse_chain(HOUR.name, usec=False)
        if self.peek() != ":":
            raise self.error("expected ':' after the hour")
        self.pos += 1
        self.fields["minute"] = self.parse_chain(MINUTE.name, usec=False)
        if self.peek() == "":
            self.fields["second"] = _c(0)
            return
        if self.peek() != ":":
            raise self.error("expected ':' after the minute")
        self.pos += 1
        self.fields["second"] = self.parse_chain(SECOND.name, usec=True)
        if self.peek() != "":
            raise self.error("unexpected text after the seconds")

    def parse_chain(self, name: str, *, usec: bool) -> list[Component] | None:
        if self.peek() == "*":
            self.pos += 1
            return [Component(0, -1, USEC, self.pos - 1, "*")] if usec else None
        unit = USEC if usec else 1
        chain: list[Component] = []
        while True:
            if len(chain) >= _MAX_COMPONENTS:
                raise self.error(f"too many {name} values (at most {_MAX_COMPONENTS})")
            at = self.pos
            start = self.parse_number(name, usec=usec)
            stop, repeat = -1, 0
            if self.peek() == "." and self.peek(1) == ".":
                self.pos += 2
                stop = self.parse_number(name, usec=usec)
                repeat = unit
            if self.peek() == "/":
                self.pos += 1
                rep_at = self.pos
                repeat = self.parse_number(name, usec=usec)
                if repeat == 0:
                    raise self.error(f"{name} repetition must not be 0", rep_at)
            elif start > _INT_MAX - repeat:
                raise self.error(f"{name} value is too large", at)
            elif usec and stop >= 0 and start + repeat > stop:
                raise self.error(
                    "a seconds range shorter than one second needs a '/' repetition", at,
                    self.text[at : self.pos],
                )  # fmt: skip
            if self.peek() not in ("", " ", ",", "-", "~", ":"):
                raise self.error(f"unexpected character in {name}", token=self.peek())
            chain.append(Component(start, stop, repeat, at, self.text[at : self.pos]))
            if self.peek() != ",":
                return chain
            self.pos += 1

    def parse_number(self, name: str, *, usec: bool) -> int:
        at = self.pos
        while self.peek() != "" and self.peek() in _DIGITS:
            self.pos += 1
        if self.pos == at:
            raise self.error(f"expected a number or '*' for the {name}")
        found = self.to_int(self.text[at : self.pos])
        if found is None or found > _ULONG_MAX or (usec and found > _ULONG_MAX // USEC):
            raise self.too_large(name, at)
        value = found
        if usec:
            value *= USEC
            if self.peek() == "." and self.peek(1) != ".":
                self.pos += 1
                value += self.parse_fraction(name)
        if value > _INT_MAX:
            raise self.too_large(name, at)
        return value

    def parse_fraction(self, name: str) -> int:
        at = self.pos
        digits = ""
        while len(digits) < 6 and self.peek() != "" and self.peek() in _DIGITS:
            digits += self.peek()
            self.pos += 1
        if not digits:
            raise self.error(f"expected digits after the decimal point in the {name}", at - 1)
        value = int(digits.ljust(6, "0"))
        if len(digits) == 6 and self.peek() != "" and self.peek() in "56789":
            value += 1  # systemd rounds to the microsecond on the seventh digit
        while self.peek() != "" and self.peek() in _DIGITS:
            self.pos += 1
        return value


def _fix_year(chain: list[Component]) -> list[Component]:
    def fix(value: int) -> int:
        if 0 <= value < 70:
            return value + 2000
        if 70 <= value < 100:
            return value + 1900
        return value

    return [Component(fix(c.start), fix(c.stop), c.repeat, c.position, c.text) for c in chain]


def parse_spec(expression: str) -> CalendarSpec:
    """Parse and normalize ``expression``; raise TimerSyntaxError naming the bad token."""
    if not isinstance(expression, str):
        raise TimerSyntaxError(
            f"calendar expression must be a string, not {type(expression).__name__}"
        )
    body_end, utc, zone = split_zone(expression)
    if body_end == 0:
        raise TimerSyntaxError("empty calendar expression", expression=expression)
    parser = _Parser(expression, body_end)
    shorthand = _SHORTHANDS.get(_ascii_lower(parser.text))
    if shorthand is not None:
        parser.fields.update(shorthand)
        if _ascii_lower(parser.text) == "weekly":
            parser.weekdays = 1
    else:
        parser.parse()
    fields = parser.fields
    chains: dict[str, Chain | None] = {}
    for info in (YEAR, MONTH, DAY, HOUR, MINUTE, SECOND):
        raw = fields.get(info.name)
        if raw is not None and info is YEAR:
            raw = _fix_year(raw)
        chains[info.name] = None if raw is None else normalize_chain(raw)
    last_day = parser.last_day and chains["day"] is not None
    for info in (YEAR, MONTH, DAY, HOUR, MINUTE, SECOND):
        validate_chain(
            info, chains[info.name], last_day=last_day and info is DAY, expression=expression
        )
    if not last_day:
        check_date_exists(chains["month"], chains["day"], expression)
    weekdays = parser.weekdays if 0 < parser.weekdays < ALL_WEEKDAYS else None
    second = chains["second"]
    if second is None:  # unreachable: the parser always sets seconds
        raise TimerSyntaxError("missing seconds", expression=expression)
    return CalendarSpec(
        weekdays=weekdays,
        year=chains["year"],
        month=chains["month"],
        day=chains["day"],
        hour=chains["hour"],
        minute=chains["minute"],
        second=collapse_every_second(second),
        last_day=last_day,
        utc=utc or parser.utc,
        timezone=None if (utc or parser.utc) else zone,
    )
