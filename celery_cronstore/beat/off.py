"""Beat with firing off (``cronstore_fire = False``, ``CRONSTORE_FIRE=0``).

A staging copy of a production store holds production's schedules: a beat started on it
must not fire production's jobs. :class:`Unarmed` is what such a beat ticks instead of
:class:`~celery_cronstore.beat.loop.Loop`: it claims nothing, publishes nothing, takes
over nothing, prunes nothing and sends no alert; it only writes its heartbeat, marked
``firing = false``, so that ``cronstore health`` and the dashboard say that firing is
off rather than that beat is dead. Due fires wait in the store; a beat that fires takes
them later under each task's misfire policy.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from celery_cronstore.beat.chores import HEARTBEAT_EVERY
from celery_cronstore.config import FIRE_VARIABLE
from celery_cronstore.policy.health import OFF_SWITCH
from celery_cronstore.store import Claimer

__all__ = ["REMIND_EVERY", "Unarmed", "off_line"]

logger = logging.getLogger("celery.beat")

#: Seconds between two reminders in the log that firing is still off.
REMIND_EVERY = 600.0


def off_line() -> str:
    """Return the log line that says firing is off, and how to turn it on."""
    return (
        f"beat: firing is off ({OFF_SWITCH}): this beat "
        "claims and publishes nothing, and due fires wait in the store; unset it (or "
        f"{FIRE_VARIABLE}=1) to fire"
    )


class Unarmed:
    """A beat's tick with firing off: the heartbeat alone (see the module docstring)."""

    def __init__(self, claimer: Claimer, started_at: datetime, poll_interval: float) -> None:
        self.claimer = claimer
        self.started_at = started_at
        self.poll_interval = poll_interval
        self._next_beat = 0.0
        self._next_reminder = 0.0

    def tick(self) -> float:
        """Write the heartbeat when it is due; return the seconds until the next."""
        clock = time.monotonic()
        if clock >= self._next_reminder:
            if self._next_reminder:
                logger.info("beat: firing is still off (%s=0)", FIRE_VARIABLE)
            else:
                logger.warning(off_line())
            self._next_reminder = clock + REMIND_EVERY
        if clock >= self._next_beat:
            self.claimer.heartbeat(self.started_at, firing=False)
            self._next_beat = clock + HEARTBEAT_EVERY
        return max(0.0, min(self.poll_interval, self._next_beat - time.monotonic()))
