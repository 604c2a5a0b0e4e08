"""One-off timers: fire once, at one ISO-8601 instant.

Syntax: ``YYYY-MM-DDTHH:MM[:SS[.ffffff]][Z|±HH:MM|±HHMM]``. With an offset or ``Z`` the
instant is absolute; without one it is a wall-clock time in the timer's zone (UTC by
default). A naive time that does not exist (it falls in a spring-forward gap) is a
TimerSyntaxError naming the instant; one that occurs twice (an autumn fold) means its
*first* occurrence.

The canonical form is the instant in UTC, ``2026-12-01T08:00:00Z``, with microseconds
only when nonzero; the zone is kept for :meth:`OnceTimer.describe`.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers.base import Timer, require_aware, resolve_zone

__all__ = ["OnceTimer", "format_instant", "format_local", "parse_instant"]

_UTC = timezone.utc
_INSTANT = re.compile(
    r"(?P<date>(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2}))"
    r"(?:T(?P<h>\d{2}):(?P<mi>\d{2})(?::(?P<s>\d{2})(?:[.,](?P<f>\d{1,6}))?)?"
    r"(?P<z>Z|[+-]\d{2}:?\d{2})?)?",
    re.ASCII | re.IGNORECASE,
)


def parse_instant(
    text: str,
    zone: tzinfo,
    *,
    expression: str = "",
    position: int = 0,
    date_only: bool = False,
) -> datetime:
    """Return the ISO-8601 instant ``text`` as an aware UTC datetime.

    A naive instant is read in ``zone``: nonexistent wall times raise
    TimerSyntaxError, ambiguous ones mean the first occurrence. ``date_only`` also
    accepts a bare date (midnight in ``zone``). ``expression``/``position`` place the
    instant inside a larger expression for error messages.
    """
    source = expression or text
    match = _INSTANT.fullmatch(text)
    if match is None or (match["h"] is None and not date_only):
        wanted = "YYYY-MM-DD[THH:MM[:SS]]" if date_only else "YYYY-MM-DDTHH:MM[:SS]"
        raise TimerSyntaxError(
            f"expected an ISO-8601 instant ({wanted}[Z|+HH:MM])",
            expression=source,
            token=text,
            position=position,
        )
    try:
        naive = datetime(  # noqa: DTZ001 - the zone is attached below, on purpose
            int(match["y"]),
            int(match["mo"]),
            int(match["d"]),
            int(match["h"] or 0),
            int(match["mi"] or 0),
            int(match["s"] or 0),
            int((match["f"] or "0").ljust(6, "0")),
        )
        suffix = match["z"]
        if suffix is None and match["h"] is None:
            return _start_of_day(naive, zone)
        if suffix is None:
            return _localize(naive, zone, text, source, position)
        if suffix.upper() == "Z":
            return naive.replace(tzinfo=_UTC)
        sign = -1 if suffix[0] == "-" else 1
        digits = suffix[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        if offset >= timedelta(hours=24) or int(digits[2:]) >= 60:
            raise TimerSyntaxError(
                "UTC offset out of range",
                expression=source,
                token=suffix,
                position=position + match.start("z"),
            )
        return naive.replace(tzinfo=timezone(sign * offset)).astimezone(_UTC)
    except (ValueError, OverflowError) as exc:
        if isinstance(exc, TimerSyntaxError):
            raise
        raise TimerSyntaxError(
            f"invalid instant ({exc})", expression=source, token=text, position=position
        ) from exc


def _localize(naive: datetime, zone: tzinfo, text: str, source: str, position: int) -> datetime:
    if zone is _UTC:
        return naive.replace(tzinfo=_UTC)
    local = naive.replace(tzinfo=zone, fold=0)
    instant = local.astimezone(_UTC)
    if instant.astimezone(zone).replace(tzinfo=None) != naive:
        raise TimerSyntaxError(
            f"local time does not exist in {zone} (clocks jump forward over it)",
            expression=source,
            token=text,
            position=position,
        )
    return instant


def _start_of_day(midnight: datetime, zone: tzinfo) -> datetime:
    """Return the first instant of the local day that starts at naive ``midnight``.

    Where the clocks jump over midnight (America/Santiago on 2026-09-06 goes from
    23:59:59 to 01:00) the day starts at the end of the gap, not at a time that never
    happens.
    """
    if zone is _UTC:
        return midnight.replace(tzinfo=_UTC)
    early = midnight.replace(tzinfo=zone, fold=1).astimezone(_UTC)
    late = midnight.replace(tzinfo=zone, fold=0).astimezone(_UTC)
    low, high = min(early, late), max(early, late)
    if high.astimezone(zone).replace(tzinfo=None) < midnight:
        return high  # unreachable: a gap ends after the wall time it skips
    if low.astimezone(zone).replace(tzinfo=None) >= midnight:
        return low  # midnight exists (once, or twice in a fold: the first)
    # Bisect to the second: the day's first instant lies in (low, high]; 48 steps at most.
    step = timedelta(seconds=1)
    for _ in range(48):
        if high - low <= step:
            break
        middle = low + (high - low) // 2
        if middle.astimezone(zone).replace(tzinfo=None) >= midnight:
            high = middle
        else:
            low = middle
    return high


def format_instant(instant: datetime) -> str:
    """Return ``instant`` as canonical UTC ISO-8601 (``2026-12-01T08:00:00Z``)."""
    utc = instant.astimezone(_UTC)
    spec = "seconds" if utc.microsecond == 0 else "microseconds"
    return utc.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def format_local(instant: datetime, zone: tzinfo, tz_name: str) -> str:
    """Return ``instant`` as local ``YYYY-MM-DD HH:MM[:SS]`` followed by ``tz_name``."""
    local = instant.astimezone(zone)
    text = local.strftime("%Y-%m-%d %H:%M")
    if local.second or local.microsecond:
        text += local.strftime(":%S")
    if local.microsecond:
        text += f".{local.microsecond:06d}"
    return f"{text} {tz_name}"


class OnceTimer(Timer):
    """A timer that fires exactly once, at :attr:`at`."""

    kind = "once"

    def __init__(self, at: datetime, zone: tzinfo, tz_name: str) -> None:
        self._at = at
        self._zone = zone
        self.tz_name = tz_name

    @classmethod
    def parse(cls, expression: str, tz: str | None = None) -> OnceTimer:
        """Parse an ISO-8601 instant; a naive one is read in zone ``tz`` (UTC when None)."""
        if not isinstance(expression, str):
            raise TimerSyntaxError(f"expression must be a string, not {type(expression).__name__}")
        text = expression.strip()
        if not text:
            raise TimerSyntaxError("empty one-off timer expression", expression=expression)
        zone = resolve_zone(tz, expression=expression)
        tz_name = "UTC" if zone is _UTC else str(tz)
        position = len(expression) - len(expression.lstrip())
        at = parse_instant(text, zone, expression=expression, position=position)
        return cls(at, zone, tz_name)

    @property
    def at(self) -> datetime:
        """The fire time, aware, in UTC."""
        return self._at

    def next_after(self, after: datetime) -> datetime | None:
        """Return :attr:`at` if it is strictly after ``after``, else ``None``."""
        return self._at if self._at > require_aware(after) else None

    def first_fire(self, now: datetime, last_fire: datetime | None = None) -> datetime | None:
        """Return :attr:`at` unless it already fired, even when it is before ``now``.

        A one-off instant that passed while nothing ran is planned as is, so the misfire
        policy decides (``run_once`` sends it late, ``skip`` records it missed, a starting
        deadline expires it) instead of the task silently never firing.
        """
        if last_fire is None or last_fire < self._at:
            return self._at
        return self.next_after(now)

    def matches(self, instant: datetime) -> bool:
        """Return whether the timer fires at ``instant``."""
        return require_aware(instant) == self._at

    def __str__(self) -> str:
        return format_instant(self._at)

    def describe(self) -> str:
        """Return e.g. "once at 2026-12-01 09:00 Europe/Berlin"."""
        return f"once at {format_local(self._at, self._zone, self.tz_name)}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (str(self), self.tz_name))


def _rebuild(expression: str, tz_name: str) -> OnceTimer:
    return OnceTimer.parse(expression, tz=tz_name)
