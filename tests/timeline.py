"""The fixed instant the store-level integration tests start from, and offsets from it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

#: A Monday noon, UTC: far from any DST change in the zones the tests use.
T0 = datetime(2026, 1, 5, 12, 0, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    """Return the instant ``seconds`` after :data:`T0`."""
    return T0 + timedelta(seconds=seconds)
