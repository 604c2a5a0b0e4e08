"""A brute-force oracle for calendar timers: try every real instant, one by one.

It knows nothing of systemd's walk: an instant fires when its local wall-clock reading
matches the event and no earlier instant had the same reading (a fold fires once).
Slow on purpose and obviously right; the tests compare the real code against it.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from celery_cronstore.timers.calendar import CalendarTimer

UTC = timezone.utc


def _zone(timer: CalendarTimer) -> ZoneInfo | timezone:
    return UTC if timer.tz_name == "UTC" else ZoneInfo(timer.tz_name)


def first_occurrence(moment: datetime, zone: ZoneInfo | timezone) -> bool:
    """Return whether no earlier instant shows the same local wall-clock reading."""
    wall = moment.astimezone(zone).replace(tzinfo=None)
    offsets = {(moment + timedelta(hours=h)).astimezone(zone).utcoffset() for h in range(-30, 31)}
    for offset in offsets:
        assert offset is not None
        earlier = (wall - offset).replace(tzinfo=UTC)
        if earlier < moment and earlier.astimezone(zone).replace(tzinfo=None) == wall:
            return False
    return True


def _fractions(timer: CalendarTimer) -> list[timedelta]:
    """Return every sub-second part (µs) a value of the seconds field can have."""
    found = set()
    for c in timer.spec.second:
        step = c.repeat or 1_000_000
        stop = c.stop if c.stop >= 0 else (60_000_000 - 1 if c.repeat else c.start)
        found.update(v % 1_000_000 for v in range(c.start, min(stop, 60_000_000 - 1) + 1, step))
    return [timedelta(microseconds=f) for f in sorted(found)]


def brute_next(timer: CalendarTimer, after: datetime, window: timedelta) -> datetime | None:
    """Return the first fire after ``after`` within ``window``, trying every step.

    The step is one minute when every fire falls on second 0, else one second, and
    within each second every sub-second part the seconds field can produce. None means
    none within the window.
    """
    seconds = timer.spec.second
    whole_minute = len(seconds) == 1 and seconds[0].key() == (0, -1, 0)
    step = timedelta(minutes=1) if whole_minute else timedelta(seconds=1)
    fractions = [timedelta(0)] if whole_minute else _fractions(timer)
    zone = _zone(timer)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    moment = epoch + ((after - epoch) // step) * step
    end = after + window
    while moment <= end:
        for fraction in fractions:
            candidate = moment + fraction
            if (
                after < candidate <= end
                and timer.matches(candidate)
                and first_occurrence(candidate, zone)
            ):
                return candidate
        moment += step
    return None
