"""The instants at which a zone changes its UTC offset (or DST flag), found once and kept.

Why hand-written: a ``tzinfo`` (``zoneinfo`` included) answers "what is the offset at
this instant" but has no public list of its transitions, and :mod:`calendar <.>` must
know cheaply whether one lies between two instants (systemd's walk goes wrong only
across one, so only then is the true next fire worth a search). The timeline is cut
into buckets of ``2**24`` seconds (about 194 days). The first time a bucket is asked
for, its offsets are probed every six hours and each change is bisected to the second;
no zone changes twice within six hours (the assumption :mod:`.scan` makes too). A
bucket's changes are kept per zone, so a zone pays about 800 probes per half-year once,
and afterwards a question costs one dictionary lookup per bucket it spans.

Instants are POSIX seconds; only 1901-12-14 .. 2200-01-01 is indexed (the calendar's
years are 1970 .. 2199).
"""

from __future__ import annotations

from datetime import datetime, tzinfo

__all__ = ["INDEXED", "Change", "changes"]

# (first second with the new state, new UTC offset in seconds, new DST flag)
Change = tuple[int, int, bool]

_BUCKET = 1 << 24
_PROBE = 6 * 3600
_LOW = -(1 << 31)  # 1901-12-13T20:45:52Z
_HIGH = 7_258_118_400  # 2200-01-01T00:00:00Z
INDEXED = (_LOW, _HIGH)  # the instants whose changes are indexed
_MAX_CACHED = 65_536  # buckets kept, over all zones (~200 zones over 170 years)
_cache: dict[tuple[tzinfo, int], tuple[Change, ...]] = {}


def _state(zone: tzinfo, t: int) -> tuple[int, bool]:
    moment = datetime.fromtimestamp(t, tz=zone)
    off, dst = moment.utcoffset(), moment.dst()
    return (0 if off is None else int(off.total_seconds()), bool(dst))


def _scan(zone: tzinfo, lo: int, hi: int) -> tuple[Change, ...]:
    """Return the changes at instants in (lo, hi], probing every six hours."""
    found: list[Change] = []
    low, here = lo, _state(zone, lo)
    while low < hi:
        high = min(low + _PROBE, hi)
        state = _state(zone, high)
        if state == here:
            low = high
            continue
        while high - low > 1:  # bisect to the first second in the new state
            mid = (low + high) // 2
            if _state(zone, mid) == here:
                low = mid
            else:
                high = mid
        here = _state(zone, high)
        found.append((high, here[0], here[1]))
        low = high
    return tuple(found)


def _bucket(zone: tzinfo, index: int) -> tuple[Change, ...]:
    key = (zone, index)
    hit = _cache.get(key)
    if hit is None:
        hit = _scan(zone, index * _BUCKET, (index + 1) * _BUCKET)
        if len(_cache) >= _MAX_CACHED:
            _cache.clear()
        _cache[key] = hit
    return hit


def changes(zone: tzinfo | None, lo: int, hi: int) -> list[Change]:
    """Return the changes of ``zone`` (None: UTC, none) at instants in (lo, hi], in order."""
    lo, hi = max(lo, _LOW), min(hi, _HIGH)
    if zone is None or hi <= lo:
        return []
    out: list[Change] = []
    for index in range(lo // _BUCKET, (hi - 1) // _BUCKET + 1):
        out += [c for c in _bucket(zone, index) if lo < c[0] <= hi]
    return out
