"""Timers as the rules use them: one memoized timer per stored row's timer, and the
interval from a fire to the next (the CronTask time box is half of it). Pure."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from celery_cronstore.policy.bounds import bounded
from celery_cronstore.policy.jitter import due
from celery_cronstore.records import PeriodicTask
from celery_cronstore.timers import Timer, parse_timer

__all__ = ["TIMER_CACHE", "interval_after", "stray_next_run", "timer_of"]


def interval_after(timer: Timer | None, when: datetime) -> float | None:
    """Return the seconds from fire ``when`` to the timer's next one (``None``: no next)."""
    if timer is None:
        return None
    following = timer.next_after(when)
    return None if following is None else (following - when).total_seconds()


def timer_of(task: PeriodicTask) -> Timer:
    """Return the timer of a stored task (``TimerError``/``ValueError`` if it is bad).

    The one way to get a timer from a row. Its ``next_after`` answers are memoized:
    many rows share a timer and fall due at the same instant (every ``*/5`` task at :05).
    """
    return _memo(task.timer_kind, task.timer, task.tz)


#: Distinct timers kept parsed with their answers. Beat meets every stored timer once a
#: cycle, so the cache must hold them all or an LRU walked in cycles never hits: 10,000
#: distinct crons thrashed the old 4,096 and cost twice the shared ones. About 4 KB each
#: (the parsed timer, its croniter, a few answers): 64 MB at the bound.
TIMER_CACHE = 16_384


def stray_next_run(task: PeriodicTask, now: datetime) -> str | None:
    """Say why an enabled task's ``next_run`` cannot be its timer's plan at ``now``.

    Beat moves ``next_run`` to the timer's first fire after each claim, so an enabled row
    whose ``next_run`` is NULL while its timer still fires, or later than the timer's
    first fire after ``now``, was set by hand (raw SQL, a restored dump): it would never
    fire, or skip fires, without an error. ``None``: the row is as beat would leave it.
    A timer that cannot be read is reported too (planning it records the error).
    """
    if task.max_runs is not None and task.total_run_count >= task.max_runs:
        return None  # its schedule has ended: no next run is as beat leaves it
    if task.paused_at is not None:
        return None  # paused: planned for its resume, or for none
    try:
        timer = timer_of(task)
        first = bounded(timer, timer.first_fire(now, task.last_fire), task.start_at, task.end_at)
        expected = due(task.name, task.jitter, timer, first)
    except Exception as exc:  # whatever is wrong, planning names it
        return f"its timer cannot be read ({exc})"
    if expected is None:
        return None
    if task.next_run is None:
        return f"no next run although its timer fires at {expected.isoformat()}"
    if task.next_run > expected:
        return (
            f"next run {task.next_run.isoformat()} is after its timer's next fire "
            f"{expected.isoformat()}"
        )
    return None


@functools.lru_cache(maxsize=TIMER_CACHE)
def _memo(kind: str, expression: str, tz: str) -> Timer:
    return _Memo(parse_timer(expression, kind=kind, tz=tz))


class _Memo(Timer):
    """A timer that answers exactly as the one it wraps, its ``next_after`` memoized.

    Every public method of :class:`Timer` is delegated, none inherited: the base class's
    generic versions (a search for ``last_at_or_before``, a bounded walk for
    ``count_between``) would hide the inner timer's arithmetic, and an interval's exact
    count of a long backlog became an estimate "about" it. Attributes beyond the contract
    (``matches``, ``period``, ``at``...) are forwarded too. Only ``next_after`` is
    memoized: it is what many rows due at one instant ask.
    """

    def __init__(self, timer: Timer) -> None:
        self.inner = timer
        self.kind = timer.kind
        self.tz_name = timer.tz_name
        self._next = functools.lru_cache(maxsize=256)(timer.next_after)

    def next_after(self, after: datetime) -> datetime | None:
        return self._next(after)

    def first_fire(self, now: datetime, last_fire: datetime | None = None) -> datetime | None:
        return self.inner.first_fire(now, last_fire)

    def last_at_or_before(self, instant: datetime) -> datetime | None:
        return self.inner.last_at_or_before(instant)

    def count_between(self, after: datetime, until: datetime, *, limit: int) -> int | None:
        return self.inner.count_between(after, until, limit=limit)

    def __str__(self) -> str:
        return str(self.inner)

    def describe(self) -> str:
        return self.inner.describe()

    def __repr__(self) -> str:
        return repr(self.inner)

    def __getattr__(self, name: str) -> Any:
        # Only called for names the wrapper lacks. Private names are refused so that
        # copy and pickle, which probe for hooks before ``inner`` exists, do not recurse.
        if name.startswith("_") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __reduce__(self) -> tuple[Any, ...]:
        # The memo (an lru_cache of a bound method) cannot be pickled: rebuild it.
        return (_memo, (self.kind, str(self.inner), self.tz_name))
