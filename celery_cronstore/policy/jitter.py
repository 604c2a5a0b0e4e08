"""Jitter: a fixed pseudo-random delay per task and fire, the same on every replica.

Five thousand tenants' "daily at 02:00" should not reach the database in the same second.
A task with ``jitter = J`` sends its fire for the grid point ``n`` (its *nominal* fire
time) at ``n + delay(n)``, with ``delay(n)`` in ``[0, min(J, gap))``: ``gap`` is the time
from ``n`` to the timer's next grid point, so that fires stay in order and never pile up
(a delay never reaches the next fire). The delay is a hash of the task's name and the
nominal instant (SHA-256, not :mod:`random`): every beat replica, a restarted beat and the
worker's guard compute the same delay for the same fire, which is what systemd's
``RandomizedDelaySec=`` with ``FixedRandomDelay=`` does per timer, here per fire.

What keeps the nominal time: the ledger row and the task id (so claim-once is unchanged),
the fire-time header a task reads, ``misfire``/``max_runs`` counting. What uses the
jittered one: the row's ``next_run`` (when beat acts, shown as the next run), the
publish instant, the starting deadline and the message's expiry (measured from when the
fire was meant to go out, not from the nominal time). The CronTask guard's early rule
widens by ``J`` (two jittered fires may start up to ``J`` closer than their interval).

Pure: no clock, no SQL. Hand-written because no library offers a delay reproducible from
a key and bounded by the timer's own spacing; it is one hash and one clamp.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone

from celery_cronstore.timers import Timer

__all__ = ["MAX_JITTER", "delay", "due", "jitter_problem", "nominal"]

#: The largest jitter a task may have, in seconds (a week): enough for any "spread the
#: daily run over the night", small enough that a delay is never a date arithmetic risk.
MAX_JITTER = 7 * 86_400.0
#: How many grid points :func:`nominal` walks back over before asking the timer directly.
_WALK = 256
_TICK = timedelta(microseconds=1)


def jitter_problem(value: float | None) -> str | None:
    """Return why ``value`` is not a jitter (seconds), or ``None`` if it is one."""
    if value is None:
        return None
    if not 0 <= value <= MAX_JITTER:
        return f"jitter must be from 0 to {MAX_JITTER:g} seconds (a week), got {value:g}"
    return None


def delay(name: str, jitter: float | None, when: datetime, following: datetime | None) -> timedelta:
    """Return the delay of the fire of task ``name`` at nominal instant ``when``.

    ``following`` is the timer's next grid point after ``when`` (``None``: none). The delay
    is at least zero and less than both ``jitter`` seconds and the gap to ``following``.
    """
    if not jitter:
        return timedelta(0)
    bound = timedelta(seconds=jitter)
    if following is not None:
        bound = min(bound, following - when)
    micros = int(bound / _TICK)
    if micros <= 0:
        return timedelta(0)
    instant = when.astimezone(timezone.utc).isoformat()
    digest = hashlib.sha256(f"{name}\0{instant}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64  # in [0, 1)
    return timedelta(microseconds=int(fraction * micros))


def due(name: str, jitter: float | None, timer: Timer, when: datetime | None) -> datetime | None:
    """Return when the fire at nominal ``when`` is sent (``when`` itself without jitter)."""
    if when is None or not jitter:
        return when
    return when + delay(name, jitter, when, timer.next_after(when))


def nominal(
    name: str,
    jitter: float | None,
    timer: Timer,
    next_run: datetime,
    last_fire: datetime | None,
) -> datetime:
    """Return the nominal fire a row's ``next_run`` (a jittered instant) stands for.

    Because a delay is shorter than the gap to the next grid point, only the newest grid
    point at or before ``next_run`` can be delayed onto it: that one, if it is after
    ``last_fire`` (older points are in the ledger). A ``next_run`` that no delay explains
    (set by hand) stands for the first grid point not yet recorded, as without jitter.
    """
    if not jitter:
        return next_run
    floor = next_run - timedelta(seconds=jitter)
    if last_fire is not None and last_fire > floor:
        floor = last_fire
    point = timer.next_after(floor)
    if point is None or point > next_run:
        return next_run
    for _ in range(_WALK):
        following = timer.next_after(point)
        if following is None or following > next_run:
            return point
        point = following
    newest = timer.last_at_or_before(next_run)
    return newest if newest is not None and newest > point else point
