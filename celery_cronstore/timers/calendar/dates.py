"""Dates that never exist: a month set and a day set no year can satisfy together.

systemd accepts ``*-02-30`` and answers "never"; we refuse it when it is parsed, with the
reason and the fix (docs/timers.md, "Deliberate differences from systemd"). Hand-written:
a check of two small value sets, which no date library offers.
"""

from __future__ import annotations

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers.calendar.fields import MONTH, Chain, format_chain

__all__ = ["check_date_exists"]

_MONTH_NAMES = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
#: The longest each month gets, February in a leap year.
_LONGEST = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def check_date_exists(month: Chain | None, day: Chain | None, expression: str) -> None:
    """Raise TimerSyntaxError when no month of ``month`` ever has a day of ``day``.

    Such an event (``*-02-30``, ``*-04-31``) can never fire in any year: a check of the
    two value sets, no search. systemd accepts it and answers "never"; we refuse it
    with the reason. A day that exists only in some years (``*-02-29``) is kept, and so
    is a year list that misses them (``2027-02-29``: it never fires, found at search).
    """
    if month is None or day is None:
        return
    first = min(c.start for c in day)
    months: set[int] = set()
    for c in month:
        last = c.stop if c.stop >= 0 else (12 if c.repeat else c.start)
        months.update(range(c.start, min(last, 12) + 1, c.repeat or 1))
    if not months or any(first <= _LONGEST[m - 1] for m in months):
        return
    names = [_MONTH_NAMES[m - 1] for m in sorted(months)]
    who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    has, it = ("has", "it") if len(names) == 1 else ("have", "they")
    later = " or later" if any(c.repeat or c.stop >= 0 for c in day) or len(day) > 1 else ""
    longest = min(_LONGEST[m - 1] for m in months)
    written = [c for c in (*month, *day) if c.position >= 0]
    token = position = None
    if written:
        position = min(c.position for c in written)
        token = expression[position : max(c.position + len(c.text) for c in written)]
    raise TimerSyntaxError(
        f"{who} {has} no day {first}{later}, so the timer would never fire; write a day "
        f"{it} {has} (1..{longest}), or *-{format_chain(MONTH, month)}~01 for the last day",
        expression=expression,
        token=token,
        position=position,
    )
