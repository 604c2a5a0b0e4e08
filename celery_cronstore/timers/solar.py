"""Solar timers: sunrise, sunset, dawn, dusk or solar noon at a place on Earth.

``sunrise 52.52 13.405`` fires at every sunrise in Berlin (``EVENT LATITUDE LONGITUDE``,
degrees north and east; south and west are negative). The events are
django-celery-beat's: ``sunrise``, ``sunset``, ``solar_noon``, and ``dawn_*`` /
``dusk_*`` for the civil (6°), nautical (12°) and astronomical (18°) twilights
(``dawn``, ``dusk`` and ``noon`` are accepted as ``dawn_civil``, ``dusk_civil`` and
``solar_noon``).

The sun's position comes from ``astral`` (the ``solar`` extra), not from formulas of
our own; fire times are whole seconds (astral's own accuracy is about a minute). A day
on which the event does not happen (the sun stays up or down: polar day and night, or a
twilight the sun never reaches in summer) has no fire, and the timer fires on the next
day that has one.

The zone does not decide anything: the events are instants, so solar timers are not
zoned (like intervals). Each day's event is asked of astral in the place's mean solar
time (its longitude / 15 hours from UTC), so that it falls mid-day and never at a date's
edge, where a UTC day could hold the event twice or not at all.
"""

from __future__ import annotations

import functools
from datetime import date, datetime, timedelta, timezone
from typing import Any

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers.base import Timer, require_aware

__all__ = ["EVENTS", "MAX_LATITUDE", "SolarTimer", "is_solar"]

#: The events, as django-celery-beat names them, with the depression of the twilights.
EVENTS: dict[str, float | None] = {
    "sunrise": None,
    "sunset": None,
    "solar_noon": None,
    "dawn_civil": 6.0,
    "dawn_nautical": 12.0,
    "dawn_astronomical": 18.0,
    "dusk_civil": 6.0,
    "dusk_nautical": 12.0,
    "dusk_astronomical": 18.0,
}
_ALIASES = {"dawn": "dawn_civil", "dusk": "dusk_civil", "noon": "solar_noon"}
#: The latitude nearest a pole a timer may have. Within half a degree of a pole the sun
#: crosses the horizon only on a few days around the equinoxes and the "day" of an event
#: is not defined; astral stops finding those events (at 89.8°N no sunset in a year).
MAX_LATITUDE = 89.5
#: Days looked ahead for the next event: a year and some (the poles see it once a year).
_HORIZON = 400
_ONE_DAY = timedelta(days=1)


def is_solar(expression: str) -> bool:
    """Return whether ``expression`` starts with a solar event's name (kind detection)."""
    first = expression.split(maxsplit=1)[0].lower() if expression.strip() else ""
    return first in EVENTS or first in _ALIASES


def _number(text: str, what: str, limit: float, expression: str, position: int) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (-limit <= value <= limit):  # NaN fails too
        pole = "; nearer a pole the sun's day is not defined" if what == "latitude" else ""
        raise TimerSyntaxError(
            f"the {what} must be a number of degrees from {-limit:g} to {limit:g}"
            f" ({'south' if what == 'latitude' else 'west'} is negative{pole})",
            expression=expression,
            token=text,
            position=position,
        )
    return value


def _degrees(value: float) -> str:
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


class SolarTimer(Timer):
    """Fires at a solar event at a place (see the module docstring)."""

    kind = "solar"

    def __init__(self, event: str, latitude: float, longitude: float, tz_name: str) -> None:
        self.event = event
        self.latitude = latitude
        self.longitude = longitude
        self.tz_name = tz_name
        self._mean_time = timezone(timedelta(hours=round(longitude / 15)))

    @classmethod
    def parse(cls, expression: str, tz: str | None = None) -> SolarTimer:
        """Parse ``EVENT LATITUDE LONGITUDE``; raise TimerSyntaxError naming the bad token."""
        parts = expression.split()
        if not parts:
            raise TimerSyntaxError("empty timer expression", expression=expression)
        word = parts[0].lower()
        event = _ALIASES.get(word, word)
        if event not in EVENTS:
            raise TimerSyntaxError(
                f"unknown solar event (expected one of {', '.join(EVENTS)})",
                expression=expression,
                token=parts[0],
                position=expression.find(parts[0]),
            )
        if len(parts) != 3:
            raise TimerSyntaxError(
                f"a solar timer is EVENT LATITUDE LONGITUDE (e.g. {event} 52.52 13.405), "
                f"got {len(parts)} part(s)",
                expression=expression,
            )
        at = expression.find(parts[1], expression.find(parts[0]) + len(parts[0]))
        latitude = _number(parts[1], "latitude", MAX_LATITUDE, expression, at)
        at = expression.find(parts[2], at + len(parts[1]))
        longitude = _number(parts[2], "longitude", 180, expression, at)
        _astral()  # the extra is needed to fire: refuse the timer now if it is missing
        return cls(event, latitude, longitude, tz or "UTC")

    def next_after(self, after: datetime) -> datetime | None:
        moment = require_aware(after)
        day = moment.astimezone(self._mean_time).date() - _ONE_DAY
        for offset in range(_HORIZON):
            found = self._on(day + offset * _ONE_DAY)
            if found is not None and found > moment:
                return found
        return None

    def _on(self, day: date) -> datetime | None:
        """Return the event on ``day`` (the place's mean solar time), whole seconds, UTC."""
        return _event_on(self.event, self.latitude, self.longitude, day, self._mean_time)

    def __str__(self) -> str:
        return f"{self.event} {_degrees(self.latitude)} {_degrees(self.longitude)}"

    def describe(self) -> str:
        north = f"{abs(self.latitude):g}°{'N' if self.latitude >= 0 else 'S'}"
        east = f"{abs(self.longitude):g}°{'E' if self.longitude >= 0 else 'W'}"
        return f"at {self.event.replace('_', ' ')} at {north} {east}"


def _astral() -> Any:
    try:
        import astral.sun
    except ImportError:
        raise TimerSyntaxError(
            "solar timers need the astral package: pip install 'celery-cronstore[solar]'"
        ) from None
    return astral


@functools.lru_cache(maxsize=4096)
def _event_on(
    event: str, latitude: float, longitude: float, day: date, zone: timezone
) -> datetime | None:
    """Return ``event`` at the place on ``day`` in ``zone``, or ``None`` when the sun does
    not do it that day. Memoized: a burst asks for the same few days many times."""
    astral = _astral()
    observer = astral.Observer(latitude=latitude, longitude=longitude)
    sun = astral.sun
    depression = EVENTS[event]
    try:
        if event == "sunrise":
            found = sun.sunrise(observer, day, tzinfo=zone)
        elif event == "sunset":
            found = sun.sunset(observer, day, tzinfo=zone)
        elif event == "solar_noon":
            found = sun.noon(observer, day, tzinfo=zone)
        elif event.startswith("dawn"):
            found = sun.dawn(observer, day, tzinfo=zone, depression=depression)
        else:
            found = sun.dusk(observer, day, tzinfo=zone, depression=depression)
    except ValueError:  # the sun stays above or below that elevation all day
        return None
    return found.astimezone(timezone.utc).replace(microsecond=0)  # type: ignore[no-any-return]
