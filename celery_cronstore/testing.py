"""Test doubles for users' tests and ours, and a pytest plugin that hands them out.

Without pytest::

    clock = FrozenClock("2026-03-29T00:59:00Z")
    store = memory_store(clock)          # SQLite in memory, schema applied
    store.add("poll", task="mail.poll", timer="*:0/5")
    tick = Ticker(store, clock)
    assert [c.name for c in tick(minutes=5)] == ["poll"]

With pytest the package registers this module as a plugin (entry point ``pytest11``),
so any project that installs celery-cronstore gets the fixtures ``cronstore_clock``,
``cronstore_store`` and ``cronstore_tick`` (see docs/testing.md)::

    def test_poll_runs_every_five_minutes(cronstore_store, cronstore_tick):
        cronstore_store.add("poll", task="mail.poll", timer="*:0/5")
        assert [c.name for c in cronstore_tick(minutes=5)] == ["poll"]
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from celery_cronstore.store import Claim, Claimer, Store

__all__ = ["DEFAULT_START", "FrozenClock", "Ticker", "memory_store"]

#: Where ``cronstore_clock`` starts unless a test says otherwise (a Monday, 00:00 UTC).
DEFAULT_START = "2026-01-05T00:00:00Z"


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


class Ticker:
    """Advance a frozen clock and claim what is due, as one beat tick would (no broker).

    Each call returns the claims (task name, args, kwargs, fire time, task id) in fire
    order and marks them published, so the next call sees the following fires only.
    """

    def __init__(self, store: Store, clock: FrozenClock, *, node: str = "pytest") -> None:
        self.store = store
        self.clock = clock
        self.claimer = Claimer(store, node)

    def __call__(self, delta: timedelta | None = None, **units: float) -> list[Claim]:
        """Move the clock by ``delta`` or ``timedelta(**units)`` (if given); claim what is due."""
        if delta is not None or units:
            self.clock.advance(delta, **units)
        claimed: list[Claim] = []
        while True:
            result = self.claimer.claim_due()
            if result.claims:
                self.claimer.mark_published(result.claims)
                claimed.extend(result.claims)
            if not result.rows:
                return sorted(claimed, key=lambda claim: (claim.fire_time, claim.name))

    def run(self, app: Any, delta: timedelta | None = None, **units: float) -> list[Any]:
        """Tick like ``__call__``, then run each claimed task in ``app`` eagerly.

        Return the ``EagerResult`` of each run (``.get()`` re-raises a task's error), in
        fire order; the task runs in this process with the claim's task id.
        """
        results = []
        for claim in self(delta, **units):
            task = app.tasks[claim.task]
            results.append(task.apply(claim.args, claim.kwargs, task_id=claim.task_id))
        return results


def _aware(value: datetime | str) -> datetime:
    instant = (
        datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else value
    )
    if instant.tzinfo is None:
        raise ValueError(f"FrozenClock needs an aware instant, got {instant.isoformat()}")
    return instant.astimezone(timezone.utc)


# -- the pytest plugin --------------------------------------------------------------------
# pytest is not a dependency: without it the doubles above still work.
try:
    import pytest
except ImportError:  # pragma: no cover
    pass
else:

    def pytest_configure(config: pytest.Config) -> None:
        config.addinivalue_line(
            "markers",
            "cronstore_now(instant): where the cronstore_clock fixture starts "
            "(ISO 8601 with a zone, e.g. '2026-03-29T00:59:00Z')",
        )

    @pytest.fixture
    def cronstore_clock(request: pytest.FixtureRequest) -> FrozenClock:
        """A :class:`FrozenClock` at :data:`DEFAULT_START`, or at ``@pytest.mark.cronstore_now``."""
        marker = request.node.get_closest_marker("cronstore_now")
        return FrozenClock(marker.args[0] if marker is not None else DEFAULT_START)

    @pytest.fixture
    def cronstore_url(tmp_path: Path) -> str:
        """The URL of an empty SQLite file for this test (set it as ``cronstore_url``)."""
        return f"sqlite:///{tmp_path / 'cronstore.sqlite'}"

    @pytest.fixture
    def cronstore_store(cronstore_url: str, cronstore_clock: FrozenClock) -> Iterator[Store]:
        """A migrated :class:`Store` on ``cronstore_url`` that reads ``cronstore_clock``.

        Fails the test if a connection is still checked out at the end.
        """
        store = Store(cronstore_url, clock=cronstore_clock)
        store.upgrade()
        yield store
        leaked = store.engine.pool.checkedout()  # type: ignore[attr-defined]
        store.close()
        assert leaked == 0, f"{leaked} cronstore connection(s) left checked out"

    @pytest.fixture
    def cronstore_tick(cronstore_store: Store, cronstore_clock: FrozenClock) -> Ticker:
        """A :class:`Ticker`: ``cronstore_tick(minutes=5)`` advances and claims what is due."""
        return Ticker(cronstore_store, cronstore_clock)
