"""Local time the way systemd sees it: glibc's ``localtime()`` and ``mktime()``, in Python.

systemd walks calendar fields in local wall-clock time and converts with ``mktime()``
(``tm_isdst = -1``). What happens in a DST gap or fold is decided by glibc's probing
algorithm, which starts from the UTC offset of the *previous* ``mktime()`` call. To fire
at the same instants as systemd we reproduce that algorithm and its remembered offset
(``LocalClock.guess``) instead of a textbook local-to-UTC conversion.

Times here are integers: ``t`` is POSIX seconds, a "wall" value is the local clock
reading counted as if it were UTC seconds.
"""

from __future__ import annotations

from datetime import date, datetime, tzinfo

__all__ = ["EPOCH_ORDINAL", "LocalClock", "Tm", "days_from_civil", "wall_seconds"]

EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_STRIDE = 601_200  # glibc's probe stride when hunting for a wanted tm_isdst
_STRIDE_BOUND = 457_243_200 // 2 + _STRIDE

# year, month (1-12), day, hour, minute, second: the fields of a C ``struct tm``.
Tm = list[int]


def days_from_civil(year: int, month: int, day: int) -> int:
    """Return days since 1970-01-01 for a date whose month and day may be out of range."""
    carry, month0 = divmod(month - 1, 12)
    return date(year + carry, month0 + 1, 1).toordinal() - EPOCH_ORDINAL + day - 1


def wall_seconds(tm: Tm, second: int | None = None) -> int:
    """Return the wall value of ``tm`` (fields may overflow, as ``mktime`` allows)."""
    sec = tm[5] if second is None else second
    return days_from_civil(tm[0], tm[1], tm[2]) * 86400 + tm[3] * 3600 + tm[4] * 60 + sec


def _fields(wall: int) -> Tm:
    days, secs = divmod(wall, 86400)
    d = date.fromordinal(days + EPOCH_ORDINAL)
    hour, rest = divmod(secs, 3600)
    return [d.year, d.month, d.day, hour, *divmod(rest, 60)]


class LocalClock:
    """``localtime``/``mktime`` for one zone (``None`` = UTC, i.e. ``gmtime``/``timegm``)."""

    def __init__(self, zone: tzinfo | None) -> None:
        self.zone = zone
        self.guess = 0  # glibc's remembered offset: t - wall of the last mktime()
        self._cache: dict[int, tuple[int, bool] | None] = {}

    def _exact(self, t: int) -> tuple[int, bool]:
        moment = datetime.fromtimestamp(t, tz=self.zone)
        off = moment.utcoffset()
        dst = moment.dst()
        return (int(off.total_seconds()) if off is not None else 0, bool(dst))

    def offset(self, t: int) -> tuple[int, bool]:
        """Return (UTC offset in seconds, is DST) in effect at POSIX time ``t``."""
        if self.zone is None:
            return (0, False)
        bucket = t // 3600
        if bucket in self._cache:
            hit = self._cache[bucket]
        else:
            # Cache whole hours whose two ends agree: zones never change twice in an hour.
            first = self._exact(bucket * 3600)
            hit = first if first == self._exact(bucket * 3600 + 3599) else None
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[bucket] = hit
        return hit if hit is not None else self._exact(t)

    def exists(self, tm: Tm) -> bool:
        """Return whether the wall time ``tm`` occurs (is not inside a DST gap)."""
        wall = wall_seconds(tm)
        for probe in (wall - 86400, wall + 86400):
            t = wall - self.offset(probe)[0]
            if t + self.offset(t)[0] == wall:
                return True
        return False

    def localtime(self, t: int) -> tuple[Tm, bool]:
        """Return the local fields and DST flag at POSIX time ``t``."""
        off, dst = self.offset(t)
        return _fields(t + off), dst

    def mktime(self, tm: Tm, isdst: int) -> tuple[int, Tm, bool] | None:
        """Return (t, normalized fields, DST flag) as glibc's ``mktime`` would, or None."""
        sec = min(max(tm[5], 0), 59)  # glibc clamps seconds, then adds the excess back
        wall = wall_seconds(tm, sec)
        if self.zone is None:
            t = wall + tm[5] - sec
            return t, _fields(t), False
        t = t1 = t2 = wall + self.guess
        dst2 = False
        probes = 6
        while True:
            off, dst = self.offset(t)
            diff = wall - (t + off)
            if diff == 0:
                break
            if t == t1 and t != t2 and ((dst2 <= dst) if isdst < 0 else bool(isdst) != dst):
                break  # oscillating around a gap: glibc keeps this probe
            probes -= 1
            if probes == 0:
                return None
            t1, t2, t, dst2 = t2, t, t + diff, dst
        if diff == 0 and isdst >= 0 and bool(isdst) != dst:
            t = self._with_dst(t, wall, bool(isdst), dst)
        self.guess = t - wall
        t += tm[5] - sec
        local, dst = self.localtime(t)
        return t, local, dst

    def _with_dst(self, t: int, wall: int, want: bool, have: bool) -> int:
        # glibc: borrow the offset of the nearest time (weekly probes) with the wanted flag.
        for delta in range(_STRIDE, _STRIDE_BOUND, _STRIDE):
            for probe in (t - delta, t + delta):
                off, dst = self.offset(probe)
                if dst == want:
                    return probe + wall - (probe + off)
        return t + 3600 * ((not want) - (not have))
