"""Test doubles for users' tests and ours: a frozen clock and an in-memory store.

clock = FrozenClock("2026-03-29T00:59:00Z")
store = memory_store(clock)          # SQLite in memory, schema applied
store.add("poll", task="mail.poll", timer="*:0/5")
clock.advance(minutes=5)
claimer = Claimer(store, "test")
assert [c.name for c in claimer.claim_due().claims] == ["poll"]
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

from celery_cronstore.store import Store

__all__ = ["FrozenClock", "memory_store"]


class FrozenClock:
    """A clock that only moves when told to; call it to read the time (aware UTC)."""

    def __init__(self, start: datetime | str) -> None:
        self._lock = threading.Lock()
        self._now = _aware(start)

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def set(self, instant: datetime | str) -> None:
        """Jump to ``instant`` (may go backwards, like a wrong clock)."""
        with self._lock:
            self._now = _aware(instant)

    def advance(self, delta: timedelta | None = None, **units: float) -> datetime:
        """Move forward by ``delta`` or by ``timedelta(**units)``; return the new time."""
        step = delta if delta is not None else timedelta(**units)
        with self._lock:
            self._now = self._now + step
            return self._now


def memory_store(clock: FrozenClock | None = None) -> Store:
    """Return a migrated store in an in-memory SQLite database using ``clock``."""
    store = Store("sqlite://", clock=clock)
    store.upgrade()
    return store


def _aware(value: datetime | str) -> datetime:
    instant = (
        datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else value
    )
    if instant.tzinfo is None:
        raise ValueError(f"FrozenClock needs an aware instant, got {instant.isoformat()}")
    return instant.astimezone(timezone.utc)
