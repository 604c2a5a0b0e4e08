"""Component value sets of a calendar event: single values, ``a..b`` ranges, ``/`` repeats.

A field (year, month, ...) holds a *chain*: a sorted tuple of :class:`Component`, or
``None`` for ``*``. Seconds are stored in microseconds so ``05.25/0.5`` stays exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from celery_cronstore.errors import TimerSyntaxError

__all__ = [
    "DAY",
    "FIELDS",
    "HOUR",
    "MINUTE",
    "MONTH",
    "SECOND",
    "USEC",
    "YEAR",
    "Chain",
    "Component",
    "FieldInfo",
    "chain_contains",
    "collapse_every_second",
    "format_chain",
    "next_in_chain",
    "normalize_chain",
    "validate_chain",
]

USEC = 1_000_000


@dataclass(frozen=True)
class FieldInfo:
    """Name, bounds, printed width and unit (1, or microseconds for seconds) of a field."""

    name: str
    lo: int
    hi: int
    width: int
    unit: int = 1


YEAR = FieldInfo("year", 1970, 2199, 4)
MONTH = FieldInfo("month", 1, 12, 2)
DAY = FieldInfo("day", 1, 31, 2)
HOUR = FieldInfo("hour", 0, 23, 2)
MINUTE = FieldInfo("minute", 0, 59, 2)
SECOND = FieldInfo("second", 0, 60 * USEC - 1, 2, USEC)
FIELDS = (YEAR, MONTH, DAY, HOUR, MINUTE, SECOND)


@dataclass(frozen=True)
class Component:
    """``start``, ``start..stop`` or ``start[..stop]/repeat``; ``stop`` is -1 when open.

    ``position`` and ``text`` remember where the component was written, for error
    messages; they take no part in equality.
    """

    start: int
    stop: int = -1
    repeat: int = 0
    position: int = field(default=-1, compare=False)
    text: str = field(default="", compare=False)

    def key(self) -> tuple[int, int, int]:
        return (self.start, self.stop, self.repeat)


Chain = tuple[Component, ...]


def normalize_chain(components: list[Component]) -> Chain:
    """Return the chain in canonical order: ranges trimmed, idle repeats dropped, no duplicates."""
    cleaned: dict[tuple[int, int, int], Component] = {}
    for comp in components:
        start, stop, repeat = comp.start, comp.stop, comp.repeat
        if stop > start and repeat > 0:
            # The last value of a stepped range is the last one actually reached.
            stop -= (stop - start) % repeat
        if (stop > start and repeat > 0 and start + repeat > stop) or start == stop:
            stop, repeat = -1, 0
        new = Component(start, stop, repeat, comp.position, comp.text)
        cleaned.setdefault(new.key(), new)
    return tuple(cleaned[k] for k in sorted(cleaned))


def collapse_every_second(chain: Chain) -> Chain:
    """Return ``(0/1,)`` when the seconds chain holds ``0/1`` and nothing finer.

    ``0/1`` fires every whole second, so other whole-second components add nothing and
    systemd prints the chain as ``*`` (``*:*:0/1,15`` -> ``*:*:*``). A component with a
    fraction (``59.5``) still adds a fire time, so then the chain stays as written
    (systemd collapses it too and loses that fire; we do not copy that).
    """
    every = (0, -1, USEC)
    if not any(c.key() == every for c in chain):
        return chain
    if any(value % USEC for c in chain for value in (c.start, max(c.stop, 0), c.repeat)):
        return chain
    return tuple(c for c in chain if c.key() == every)[:1]


def _show(value: int, unit: int) -> str:
    if unit == 1:
        return str(value)
    whole, frac = divmod(value, unit)
    return f"{whole}.{frac:06d}".rstrip("0").rstrip(".") if frac else str(whole)


def validate_chain(
    info: FieldInfo, chain: Chain | None, *, last_day: bool, expression: str
) -> None:
    """Raise TimerSyntaxError unless every component of ``chain`` can fire within ``info``."""
    if chain is None:
        return
    lo, hi = info.lo, info.hi
    name = f"last-day offset of {info.name}" if last_day else info.name
    for comp in chain:
        if last_day:
            # "~N" counts back from the month end, at most to the 1st of February. systemd
            # (v252) lowers this bound again for every further value in a "~" list.
            hi -= 3
        shown_hi = _show(hi, info.unit)

        def fail(reason: str, comp: Component = comp) -> TimerSyntaxError:
            return TimerSyntaxError(
                reason, expression=expression, token=comp.text or None, position=comp.position
            )

        start, stop, repeat, unit = comp.start, comp.stop, comp.repeat, info.unit
        if not lo <= start <= hi:
            raise fail(f"{name} {_show(start, unit)} is out of range {lo}..{shown_hi}")
        if repeat > hi - lo:
            raise fail(f"{name} repetition {_show(repeat, unit)} is larger than the field")
        if stop >= 0:
            if not lo <= stop <= hi:
                raise fail(f"{name} {_show(stop, unit)} is out of range {lo}..{shown_hi}")
            if start + repeat > stop:
                raise fail(f"{name} range {_show(start, unit)}..{_show(stop, unit)} is empty")
        elif (start - repeat < lo) if last_day else (start + repeat > hi):
            raise fail(f"{name} repetition never fires within {lo}..{shown_hi}")


def _fmt_value(value: int, width: int, unit: int) -> str:
    text = f"{value // unit:0{width}d}"
    if unit > 1 and value % unit:
        text += f".{value % unit:06d}"
    return text


def format_chain(info: FieldInfo, chain: Chain | None) -> str:
    """Return the chain as systemd prints it in the normalized form."""
    unit, width = info.unit, info.width
    if chain is None:
        return "*"
    if unit > 1 and len(chain) == 1 and chain[0].key() == (0, -1, unit):
        return "*"
    parts = []
    for comp in chain:
        text = _fmt_value(comp.start, width, unit)
        if comp.stop > 0:
            text += ".." + _fmt_value(comp.stop, width, unit)
        if comp.repeat > 0 and not (comp.stop > 0 and comp.repeat == unit):
            text += f"/{comp.repeat // unit}"
            if comp.repeat % unit:
                text += f".{comp.repeat % unit:06d}"
        parts.append(text)
    return ",".join(parts)


def next_in_chain(bounds: list[tuple[int, int, int]], value: int) -> int | None:
    """Return the smallest value >= ``value`` produced by (start, stop, repeat) triples.

    Repeats without a stop are unbounded on purpose: systemd lets them run past the
    field's end and then normalizes the date, and we reproduce that.
    """
    best: int | None = None
    for start, stop, repeat in bounds:
        if start >= value:
            candidate = start
        elif repeat > 0:
            candidate = start + repeat * -((start - value) // repeat)
            if stop >= 0 and candidate > stop:
                continue
        else:
            continue
        if best is None or candidate < best:
            best = candidate
    return best


def chain_contains(bounds: list[tuple[int, int, int]], value: int) -> bool:
    """Return whether ``value`` is one of the values the triples produce."""
    return next_in_chain(bounds, value) == value
