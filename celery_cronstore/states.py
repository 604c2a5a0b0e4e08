"""Name the states of a fire (a row of ``cronstore_fire``) and the sets of them the rules use.

Every module says a fire state through :class:`FireState` and every group of states
through one of the sets below, so the vocabulary lives here and nowhere else. Pure: no
SQL, no Celery, no clock.

A member is a ``str`` whose ``str()``, ``format()`` and JSON form are the stored value, so
it goes to every database driver, log line, metric label and page as that plain string.
"""

from __future__ import annotations

from enum import Enum

__all__ = [
    "BAD_ENDS",
    "BEAT_OUTCOMES",
    "FINISH_STATES",
    "FIRE_STATES",
    "IN_FLIGHT",
    "NOT_RUN",
    "OVERLAPPING",
    "PROBLEM_STATES",
    "REFUSALS",
    "STARTABLE",
    "UNSENT",
    "WORKER_RUNNING",
    "FireState",
]


class FireState(str, Enum):
    """Enumerate the states of a fire; each value is the string stored in the ledger."""

    #: Claimed, held back until the task's running fire ends (overlap policy buffer_one).
    BUFFERED = "buffered"
    #: Beat committed the claim and is publishing it.
    CLAIMED = "claimed"
    #: Beat is handing it to the broker right now (written just before, for a fire a
    #: second publish could run twice): if beat stops here, nobody sends it again.
    SENDING = "sending"
    #: Sent to the broker.
    PUBLISHED = "published"
    #: A run began on a worker.
    STARTED = "started"
    #: A started fire waiting for its Celery retry (same task id).
    RETRYING = "retrying"
    #: The run returned.
    SUCCEEDED = "succeeded"
    #: The run raised (or gave up on purpose).
    FAILED = "failed"
    #: A CronTask run hit its time box.
    TIMED_OUT = "timed_out"
    #: A CronTask run refused to start (early, duplicate, removed, superseded).
    DROPPED = "dropped"
    #: Not published or not started: the previous fire still ran (overlap policy skip).
    SKIPPED = "skipped"
    #: Not published: beat was not running or fell behind (misfire policy).
    MISSED = "missed"
    #: Not published or not started: past its starting deadline.
    EXPIRED = "expired"
    #: Started, but its worker went silent (died, lost the database).
    ABANDONED = "abandoned"
    #: Published, never started, not sent again (its message was lost).
    LOST = "lost"
    #: Ended (revoked, terminated where the pool can) for a newer fire: overlap ``replace``.
    REPLACED = "replaced"

    # Python 3.10 has no StrEnum, and before 3.12 a mixed-in Enum formats as its name in
    # some paths: both return the stored value so f-strings, logs and drivers see it.
    def __str__(self) -> str:
        """Return the stored value."""
        return self.value

    def __format__(self, spec: str) -> str:
        """Format the stored value."""
        return format(self.value, spec)


#: Every state a fire can be in, in the order of its life.
FIRE_STATES: tuple[FireState, ...] = tuple(FireState)

#: A fire some process still acts on: claimed (about to be published) or running on a
#: worker. Beat's overlap policy ``skip`` holds back a new fire while one is in flight,
#: and retention never prunes one (``published`` is kept only with a start lease).
IN_FLIGHT = (
    FireState.BUFFERED,
    FireState.CLAIMED,
    FireState.SENDING,
    FireState.STARTED,
    FireState.RETRYING,
)

#: Claimed or published but not started: a delivery in one of these may still start.
STARTABLE = (FireState.CLAIMED, FireState.SENDING, FireState.PUBLISHED)

#: Not yet handed to the broker for sure: claimed, or being sent. Beat's lease covers both;
#: once it lapses, a ``claimed`` fire is taken over and a ``sending`` one is settled.
UNSENT = (FireState.CLAIMED, FireState.SENDING)

#: In progress on a worker (blocks overlap ``skip`` when a CronTask starts).
WORKER_RUNNING = (FireState.STARTED, FireState.RETRYING)

#: The states a started run may finish with (``retrying`` waits for the retry message).
FINISH_STATES = (
    FireState.SUCCEEDED,
    FireState.FAILED,
    FireState.TIMED_OUT,
    FireState.RETRYING,
)

#: The CronTask guard's refusals that are written to the fire's ledger row.
REFUSALS = (FireState.DROPPED, FireState.SKIPPED, FireState.EXPIRED)

#: The problem states shown to operators: the fire did not run and someone should look.
PROBLEM_STATES = (FireState.MISSED, FireState.EXPIRED, FireState.DROPPED)

#: A fire that ended badly: it ran and failed, or never ran though it should have. Per-task
#: health counts these in a row since the task's newest ``succeeded`` fire; ``skipped``
#: (the overlap policy held it back on purpose) and the states in flight are neither.
BAD_ENDS = (
    FireState.FAILED,
    FireState.TIMED_OUT,
    FireState.ABANDONED,
    FireState.LOST,
    FireState.DROPPED,
    FireState.EXPIRED,
    FireState.MISSED,
)

#: The fire did not run (drawn on the lateness chart's bottom line, no lateness).
NOT_RUN = frozenset({FireState.MISSED, FireState.EXPIRED, FireState.DROPPED, FireState.SKIPPED})

#: The overlap policies that ask whether a previous fire is still in flight.
OVERLAPPING = ("skip", "buffer_one", "replace")

#: What a beat records for the fires it handles: its metric's fixed label set.
BEAT_OUTCOMES = (
    FireState.CLAIMED,
    FireState.PUBLISHED,
    FireState.MISSED,
    FireState.EXPIRED,
    FireState.DROPPED,
    FireState.SKIPPED,
    FireState.BUFFERED,
    FireState.REPLACED,
)
