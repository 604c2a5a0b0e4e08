"""The rule behind ``cronstore health`` (``policy.health``): heartbeats, the beat's own
stall, and the store's backlog (issue 30: a stall that is not another beat's lock).

One table of (beats, backlog, expected verdict, words the line must say), then the pure
stall accounting of beat (``beat.stall.Stall``) on a clock the test passes in.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from celery_cronstore.beat.stall import TICK_BOUND, Stall
from celery_cronstore.policy.health import Backlog, backlog_problem, beat_health
from celery_cronstore.records import Beat

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=timezone.utc)
LEASE = 30.0
MAX_AGE = 60.0


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def a_beat(
    tick_ago: float = 2,
    stalled_ago: float | None = None,
    node: str = "h:1:a",
    firing: bool | None = True,
) -> Beat:
    stalled = None if stalled_ago is None else ago(stalled_ago)
    return Beat(node, ago(3600), ago(tick_ago), stalled, None, firing)


def off(node: str = "stage:1:x", tick_ago: float = 2) -> Beat:
    """A beat started with CRONSTORE_FIRE=0."""
    return a_beat(tick_ago=tick_ago, node=node, firing=False)


EMPTY = Backlog(NOW)
OVERDUE = Backlog(NOW, overdue=3, oldest_due=ago(41))
UNPUBLISHED = Backlog(NOW, unpublished=2, oldest_claim=ago(35))
BOTH = Backlog(NOW, overdue=1, oldest_due=ago(50), unpublished=4, oldest_claim=ago(33))
LOCKED = Backlog(NOW, blocked="canceling statement due to lock timeout")

# (case, beats, backlog, healthy, words in the line)
CASES = [
    ("no beat at all", [], EMPTY, False, ["no beat has ever ticked"]),
    ("no beat, and a backlog", [], OVERDUE, False, ["no beat has ever ticked"]),
    ("a fresh heartbeat, nothing owed", [a_beat()], EMPTY, True, ["healthy: beat h:1:a"]),
    ("backlog not looked at", [a_beat()], None, True, ["healthy"]),
    ("a stale heartbeat", [a_beat(tick_ago=61)], EMPTY, False, ["newest beat tick was 61.0s"]),
    # Issue 30: a fresh heartbeat (written before the fault) no longer hides due work.
    (
        "fresh heartbeat, tasks due past the lease unclaimed",
        [a_beat()],
        OVERDUE,
        False,
        ["3 enabled task(s) due for up to 41.0s not claimed", "lease of 30s"],
    ),
    (
        "fresh heartbeat, claims past the lease unpublished",
        [a_beat()],
        UNPUBLISHED,
        False,
        ["2 claimed fire(s) due for up to 35.0s not published", "could not claim or publish"],
    ),
    ("both kinds of backlog", [a_beat()], BOTH, False, ["1 enabled task(s)", "4 claimed"]),
    (
        "the look ran out of time on a lock",
        [a_beat()],
        LOCKED,
        False,
        ["did not answer health's look within its timeout", "lock timeout", "locked"],
    ),
    # The beat's own stall, as before.
    ("stalled within the lease", [a_beat(stalled_ago=20)], EMPTY, True, ["healthy"]),
    (
        "stalled past the lease",
        [a_beat(stalled_ago=31)],
        EMPTY,
        False,
        ["could not claim or publish for 31.0s", "lease of 30s"],
    ),
    (
        "one of two beats stalled",
        [a_beat(stalled_ago=45), a_beat(node="h:2:b")],
        EMPTY,
        True,
        ["healthy: beat h:2:b"],
    ),
    (
        "a healthy replica does not excuse a backlog",
        [a_beat(), a_beat(node="h:2:b")],
        OVERDUE,
        False,
        ["not claimed"],
    ),
    # Issue 25: the kill switch. A beat with firing off claims nothing on purpose.
    (
        "the only beat has firing off: due work waits, on purpose",
        [off()],
        OVERDUE,
        True,
        ["healthy: firing is off: beat stage:1:x", "CRONSTORE_FIRE=0", "due work waits"],
    ),
    (
        "a beat from before schema 0008 (firing unknown) fires",
        [a_beat(firing=None)],
        OVERDUE,
        False,
        ["not claimed"],
    ),
    (
        "a firing beat beside one with firing off is judged, the other named",
        [off(), a_beat(node="h:2:b")],
        EMPTY,
        True,
        ["healthy: beat h:2:b", "1 more alive beat(s) with firing off"],
    ),
    (
        "a firing beat beside one with firing off still owes the backlog",
        [off(), a_beat(node="h:2:b")],
        OVERDUE,
        False,
        ["not claimed"],
    ),
    (
        "the beat with firing off is dead: the stale heartbeat rule",
        [off(tick_ago=90)],
        EMPTY,
        False,
        ["newest beat tick was 90.0s"],
    ),
    (
        "a stalled firing beat is not excused by one with firing off",
        [a_beat(stalled_ago=45), off()],
        EMPTY,
        False,
        ["could not claim or publish for 45.0s"],
    ),
]


@pytest.mark.parametrize(
    ("beats", "backlog", "healthy", "words"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_health_table(
    beats: list[Beat], backlog: Backlog | None, healthy: bool, words: list[str]
) -> None:
    got, line = beat_health(beats, NOW, max_age=MAX_AGE, stall_limit=LEASE, backlog=backlog)
    assert got is healthy, line
    assert line.startswith("healthy" if healthy else "unhealthy"), line
    assert "\n" not in line
    for word in words:
        assert word in line, line


def test_require_firing_makes_firing_off_unhealthy() -> None:
    got, line = beat_health(
        [off()], NOW, max_age=MAX_AGE, stall_limit=LEASE, backlog=EMPTY, require_firing=True
    )
    assert got is False
    assert line.startswith("unhealthy: firing is off"), line
    assert "--require-firing" in line
    got, line = beat_health(
        [off(), a_beat(node="h:2:b")],
        NOW,
        max_age=MAX_AGE,
        stall_limit=LEASE,
        backlog=EMPTY,
        require_firing=True,
    )
    assert got is True, line


def test_an_empty_backlog_is_no_problem() -> None:
    assert backlog_problem(EMPTY, LEASE) is None
    assert backlog_problem(Backlog(NOW, overdue=0, oldest_due=None), LEASE) is None


# -- beat's stall accounting (time passed in) -----------------------------------------------


def test_a_stall_the_loop_recorded_grows_until_it_is_cleared() -> None:
    stall = Stall()
    assert stall.seconds(100.0) == 0
    stall.stuck(100.0)
    stall.stuck(105.0)  # the first moment counts
    assert stall.seconds(112.5) == 12.5
    stall.unstuck()
    assert stall.seconds(113.0) == 0


def test_a_blocked_tick_with_fires_due_counts_from_its_start() -> None:
    """The loop cannot update anything while blocked: the scrape computes it."""
    stall = Stall()
    stall.looked(NOW, NOW - timedelta(seconds=0.2), 50.0)  # a fire due 0.2 s ago
    stall.begin(60.0)
    assert stall.seconds(60.0 + TICK_BOUND / 2) == 0, "a short tick is no stall"
    assert stall.seconds(75.0) == 15.0
    stall.end()
    assert stall.seconds(76.0) == 0, "the tick ended and did the work"


def test_a_blocked_tick_with_nothing_due_is_no_stall() -> None:
    stall = Stall()
    stall.looked(NOW, NOW + timedelta(seconds=30), 50.0)  # next fire 30 s on
    stall.begin(60.0)
    assert stall.seconds(70.0) == 0
    assert stall.seconds(90.0) == 10.0, "from when the fire fell due"
    stall.looked(NOW, None, 50.0)  # nothing planned
    assert stall.seconds(200.0) == 0


def test_a_failing_database_stalls_from_the_tick_or_from_the_next_fire() -> None:
    due_now = Stall()
    due_now.looked(NOW, NOW, 10.0)
    due_now.begin(20.0)
    due_now.failed("the database", "connection refused", 20.1, pending=0)
    due_now.end()
    assert due_now.seconds(30.0) == 10.0

    later = Stall()
    later.looked(NOW, NOW + timedelta(seconds=5), 10.0)  # due at 15.0
    later.begin(11.0)
    later.failed("the database", "connection refused", 11.1, pending=0)
    later.end()
    assert later.seconds(14.0) == 0, "nothing is due yet"
    assert later.seconds(20.0) == 5.0, "the outage goes on: the fire waits from 15.0"

    waiting = Stall()  # claims wait for the broker: due now, whatever the look said
    waiting.failed("the database", "connection refused", 40.0, pending=2)
    assert waiting.seconds(41.0) == 1.0
