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


def brute_next(timer: CalendarTimer, after: datetime, window: timedelta) -> datetime | None:
    """Return the first fire after ``after`` within ``window``, trying every step.

    The step is one minute when every fire falls on second 0, else one second (the
    timer must not have fractional seconds then). None means none within the window.
    """
    seconds = timer.spec.second
    whole_minute = len(seconds) == 1 and seconds[0].key() == (0, -1, 0)
    step = timedelta(minutes=1) if whole_minute else timedelta(seconds=1)
    zone = _zone(timer)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    moment = epoch + ((after - epoch) // step + 1) * step
    end = after + window
    while moment <= end:
        if timer.matches(moment) and first_occurrence(moment, zone):
            return moment
        moment += step
    return None
