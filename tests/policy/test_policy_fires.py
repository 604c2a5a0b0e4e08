"""What happens to the fires of a due task, as tables: no database, no clock, no Celery.

The task records are built directly and every instant is an argument, so each row of a
table is the whole story: the misfire choice, the backlog walk, the deterministic task
id and :func:`~celery_cronstore.policy.plan` (what beat writes and publishes).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from task_rows import periodic_task
from timeline import T0, at

from celery_cronstore import policy
from celery_cronstore.policy import WALK_LIMIT, Entry, Plan, Running, backlog, choose, plan
from celery_cronstore.records import EPOCH, Claim, PeriodicTask
from celery_cronstore.timers import IntervalTimer, Timer, parse_timer

NODE = "beat-1"
LEASE = timedelta(seconds=30)
GRACE = timedelta(seconds=30)
MINUTE = timedelta(minutes=1)
#: Grid points of ``every 1m``: T0, T0 + 1m, ... (the grid starts at the epoch).
EVERY_MINUTE = parse_timer("every 1m")


def minutes(n: float) -> datetime:
    """Return the instant ``n`` minutes after T0."""
    return T0 + n * MINUTE


def make_task(**changes: Any) -> PeriodicTask:
    """Return a due ``every 1m`` task (next run T0) with the store's defaults, changed."""
    defaults: dict[str, Any] = {
        "id": 7,
        "args": [1],
        "kwargs": {"k": "v"},
        "options": {"queue": "q"},
    }
    return periodic_task(**{**defaults, **changes})


def never_called() -> Running | None:
    raise AssertionError("running() was called although the plan does not need it")


def idle() -> Running | None:
    return None


def run_plan(
    task: PeriodicTask,
    now: datetime,
    running: Callable[[], Running | None] = never_called,
    timer: Timer = EVERY_MINUTE,
) -> Plan:
    return plan(task, timer, now, running, node=NODE, lease=LEASE, grace=GRACE)


def states(result: Plan) -> list[tuple[str, datetime]]:
    return [(entry.state, entry.fire_time) for entry in result.entries]


# -- the misfire choice ---------------------------------------------------------------------

THREE = [minutes(0), minutes(1), minutes(2)]


@pytest.mark.parametrize(
    ("policy_name", "times", "now", "grace", "limit", "expected"),
    [
        # run_once: the newest, however late.
        ("run_once", THREE, minutes(2), GRACE, 100, [minutes(2)]),
        ("run_once", THREE, minutes(500), GRACE, 100, [minutes(2)]),
        ("run_once", [T0], T0, GRACE, 1, [T0]),
        # run_all: the last ``limit`` (all of them when fewer).
        ("run_all", THREE, minutes(2), GRACE, 100, THREE),
        ("run_all", THREE, minutes(2), GRACE, 3, THREE),
        ("run_all", THREE, minutes(2), GRACE, 2, [minutes(1), minutes(2)]),
        ("run_all", THREE, minutes(2), GRACE, 1, [minutes(2)]),
        # skip: the newest only while it is at most ``grace`` late.
        ("skip", THREE, minutes(2), GRACE, 100, [minutes(2)]),
        ("skip", THREE, minutes(2) + GRACE, GRACE, 100, [minutes(2)]),
        ("skip", THREE, minutes(2) + GRACE + timedelta(microseconds=1), GRACE, 100, []),
        ("skip", THREE, minutes(10), GRACE, 100, []),
        ("skip", [T0], at(5), timedelta(0), 1, []),
        ("skip", [T0], T0, timedelta(0), 1, [T0]),
    ],
)
def test_misfire_choice(
    policy_name: str,
    times: list[datetime],
    now: datetime,
    grace: timedelta,
    limit: int,
    expected: list[datetime],
) -> None:
    assert choose(policy_name, times, now, grace, limit) == expected


# -- the backlog walk -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "now", "keep", "count", "tail"),
    [
        (T0, T0, 3, 1, [T0]),  # on time: only the due point
        (T0, at(59), 3, 1, [T0]),  # the next point is not due yet
        (T0, minutes(1), 3, 2, [T0, minutes(1)]),  # ``now`` itself is due
        (T0, minutes(2) + GRACE, 3, 3, THREE),
        (T0, minutes(9), 3, 10, [minutes(7), minutes(8), minutes(9)]),
        (T0, minutes(9), 1, 10, [minutes(9)]),
    ],
)
def test_backlog_counts_and_keeps_the_tail(
    first: datetime, now: datetime, keep: int, count: int, tail: list[datetime]
) -> None:
    walk = backlog(EVERY_MINUTE, first, now, keep=keep)
    assert (walk.first, walk.count, walk.tail, walk.exact) == (first, count, tail, True)


@pytest.mark.parametrize("days", [1, 30, 365])
def test_a_long_backlog_costs_the_same_and_finds_the_true_newest_point(days: int) -> None:
    """An outage of any length: the newest due point is now's, every point is counted."""
    every_second = parse_timer("every 1s")
    assert isinstance(every_second, IntervalTimer)
    first = T0 - timedelta(days=days)
    calls = 0
    real = every_second.next_after

    class Counting(IntervalTimer):
        def next_after(self, after: datetime) -> datetime | None:
            nonlocal calls
            calls += 1
            return real(after)

    counting = Counting(every_second.period, every_second.origin, timezone.utc, "UTC")
    walk = backlog(counting, first, T0, keep=2)
    assert walk.tail == [T0 - timedelta(seconds=1), T0]
    assert walk.following == T0 + timedelta(seconds=1)
    assert (walk.count, walk.exact) == (days * 86400 + 1, True)
    assert calls < WALK_LIMIT + 50  # not one call per grid point of the outage


def test_a_long_cron_backlog_estimates_its_count_and_says_so() -> None:
    every_minute = parse_timer("* * * * *")
    first = T0 - timedelta(days=80)
    walk = backlog(every_minute, first, T0, keep=2)
    assert walk.tail == [T0 - timedelta(minutes=1), T0]
    assert walk.following == T0 + timedelta(minutes=1)
    assert not walk.exact
    assert walk.count == 80 * 1440 + 1  # the spacing is regular: the estimate is exact


def test_backlog_of_a_timer_without_further_fires() -> None:
    once = parse_timer("2026-01-05T12:00:00Z")
    walk = backlog(once, T0, minutes(90), keep=3)
    assert (walk.first, walk.tail, walk.count, walk.exact) == (T0, [T0], 1, True)


# -- task ids -------------------------------------------------------------------------------


def test_fire_task_id_is_deterministic() -> None:
    first = policy.fire_task_id(7, "A", T0)
    assert first == policy.fire_task_id(7, "A", T0)
    # Pinned: ids are in ledgers and on brokers; a new release must compute the same ones.
    assert first == "54b2da43-8676-5cca-8275-e307d6a77d79"
    assert uuid.UUID(first).version == 5
    others = {
        policy.fire_task_id(8, "A", T0),
        policy.fire_task_id(7, "B", T0),
        policy.fire_task_id(7, "A", at(1)),
    }
    assert first not in others
    assert len(others) == 3


@pytest.mark.parametrize(
    ("expression", "when", "expected"),
    [
        ("every 1m", T0, 60.0),
        ("every 1h30m", T0, 5400.0),
        ("2026-01-05T12:00:00Z", T0, None),  # a one-off has no next fire
    ],
)
def test_interval_after(expression: str, when: datetime, expected: float | None) -> None:
    assert policy.interval_after(parse_timer(expression), when) == expected
    assert policy.interval_after(None, when) is None


# -- plan: rows without a plan --------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "now", "next_run"),
    [
        ({"next_run": None}, at(10), minutes(1)),
        ({"next_run": EPOCH}, at(10), minutes(1)),
        ({"next_run": None}, T0, minutes(1)),  # strictly after now
        # A one-off instant that passed unfired is planned as is (the misfire policy decides).
        (
            {"next_run": None, "timer_kind": "once", "timer": "2026-01-05T11:00:00Z"},
            T0,
            T0 - timedelta(hours=1),
        ),
        # ... unless it already fired.
        (
            {
                "next_run": EPOCH,
                "timer_kind": "once",
                "timer": "2026-01-05T11:00:00Z",
                "last_fire": T0 - timedelta(hours=1),
            },
            T0,
            None,
        ),
    ],
)
def test_a_row_without_a_plan_is_only_planned(
    changes: dict[str, Any], now: datetime, next_run: datetime | None
) -> None:
    task = make_task(overlap_policy="skip", **changes)
    result = run_plan(task, now, never_called, policy.timer_of(task))
    assert result == Plan(policy.RowUpdate(next_run=next_run))


# -- plan: due rows -------------------------------------------------------------------------


def test_an_on_time_fire_is_claimed() -> None:
    task = make_task(start_deadline=10.0)
    result = run_plan(task, T0)
    task_id = policy.fire_task_id(7, "A", T0)
    assert result.entries == [
        Entry(
            periodic_task_id=7,
            fire_time=T0,
            task_id=task_id,
            state="claimed",
            claimed_by=NODE,
            lease_until=T0 + LEASE,
            claimed_at=T0,
        )
    ]
    assert result.claims == [
        Claim(
            periodic_task_id=7,
            name="A",
            task="app.a",
            args=[1],
            kwargs={"k": "v"},
            options={"queue": "q"},
            fire_time=T0,
            task_id=task_id,
            attempt=1,
            expires=at(10),
            interval=60.0,
        )
    ]
    assert result.update == policy.RowUpdate(next_run=minutes(1), last_fire=T0, runs=1)


@pytest.mark.parametrize(
    ("policy_name", "limit", "now", "entries", "runs"),
    [
        (
            "run_once",
            100,
            minutes(2) + GRACE,
            [("missed", minutes(0), minutes(1), 2), ("claimed", minutes(2), None, 1)],
            1,
        ),
        (
            "run_all",
            100,
            minutes(2) + GRACE,
            [("claimed", t, None, 1) for t in THREE],
            3,
        ),
        (
            "run_all",
            2,
            minutes(2) + GRACE,
            [
                ("missed", minutes(0), None, 1),
                ("claimed", minutes(1), None, 1),
                ("claimed", minutes(2), None, 1),
            ],
            2,
        ),
        (
            "run_all",
            0,  # a limit below one still sends the newest
            minutes(2),
            [("missed", minutes(0), minutes(1), 2), ("claimed", minutes(2), None, 1)],
            1,
        ),
        (
            "skip",
            100,
            minutes(2) + GRACE,
            [("missed", minutes(0), minutes(1), 2), ("claimed", minutes(2), None, 1)],
            1,
        ),
        (
            "skip",
            100,
            minutes(2) + GRACE + timedelta(seconds=1),
            [("missed", minutes(0), minutes(2), 3)],
            0,
        ),
        ("skip", 100, at(31), [("missed", T0, None, 1)], 0),
    ],
)
def test_a_late_row_follows_its_misfire_policy(
    policy_name: str,
    limit: int,
    now: datetime,
    entries: list[tuple[str, datetime, datetime | None, int]],
    runs: int,
) -> None:
    task = make_task(misfire_policy=policy_name, misfire_limit=limit)
    result = run_plan(task, now)
    assert [(e.state, e.fire_time, e.fire_until, e.fire_count) for e in result.entries] == entries
    claimed = [e.fire_time for e in result.entries if e.state == "claimed"]
    assert [c.fire_time for c in result.claims] == claimed
    assert [c.task_id for c in result.claims] == [policy.fire_task_id(7, "A", t) for t in claimed]
    # last_fire: the newest grid point walked, sent or not.
    newest = max(e.fire_until or e.fire_time for e in result.entries)
    assert result.update == policy.RowUpdate(
        next_run=EVERY_MINUTE.next_after(now), last_fire=newest, runs=runs
    )
    for missed in (e for e in result.entries if e.state == "missed"):
        assert missed.task_id == policy.fire_task_id(7, "A", missed.fire_time)
        assert (missed.claimed_by, missed.attempts, missed.lease_until) == (NODE, 0, None)
        last = missed.fire_until or missed.fire_time
        assert missed.reason == (
            f"{missed.fire_count} fire(s) from {missed.fire_time.isoformat()} to "
            f"{last.isoformat()} not published: beat was not running or fell behind "
            f"(misfire policy {policy_name})"
        )


def test_a_long_backlog_publishes_the_true_newest_point() -> None:
    """Regression: after 3 days of a 1-s timer the old walk stopped at 100,000 points and
    published a fire hours old as the newest; 160,000 points went unrecorded."""
    task = make_task(timer="every 1s", next_run=T0 - timedelta(days=3))
    result = run_plan(task, T0, timer=parse_timer("every 1s"))
    (missed, claimed) = result.entries
    assert (missed.state, missed.fire_count) == ("missed", 3 * 86400)
    assert missed.fire_until == T0 - timedelta(seconds=1)
    assert missed.reason is not None
    assert missed.reason.startswith(f"{3 * 86400} fire(s) from ")
    assert (claimed.state, claimed.fire_time) == ("claimed", T0)


def test_an_estimated_backlog_says_about() -> None:
    task = make_task(timer="* * * * *", next_run=T0 - timedelta(days=80))
    result = run_plan(task, T0, timer=parse_timer("* * * * *"))
    (missed, claimed) = result.entries
    assert missed.reason is not None
    assert missed.reason.startswith(f"about {80 * 1440} fire(s) from ")
    assert claimed.fire_time == T0


@pytest.mark.parametrize(
    ("deadline", "now", "state", "reason"),
    [
        (10.0, at(10), "claimed", None),  # exactly at the deadline: still sent
        (
            10.0,
            at(10.5),
            "expired",
            "not published: 10.5s late, past the starting deadline of 10s",
        ),
        (
            0.25,
            at(20),
            "expired",
            "not published: 20.0s late, past the starting deadline of 0.25s",
        ),
        (None, at(29), "claimed", None),
    ],
)
def test_a_fire_past_its_starting_deadline_expires(
    deadline: float | None, now: datetime, state: str, reason: str | None
) -> None:
    result = run_plan(make_task(start_deadline=deadline), now)
    (entry,) = result.entries
    assert (entry.state, entry.fire_time, entry.reason) == (state, T0, reason)
    assert len(result.claims) == (state == "claimed")
    assert result.update.runs == len(result.claims)
    if state == "expired":
        # Recorded as this node's, like a claim, so the ledger says who refused it.
        assert (entry.claimed_by, entry.lease_until, entry.claimed_at) == (NODE, now + LEASE, now)


def test_overlap_skip_holds_back_a_fire_while_another_is_in_flight() -> None:
    calls: list[str] = []

    def busy() -> Running | None:
        calls.append("running")
        return (T0 - MINUTE, "started")

    result = run_plan(make_task(overlap_policy="skip"), at(1), busy)
    assert calls == ["running"]
    assert states(result) == [("skipped", T0)]
    (entry,) = result.entries
    assert entry.reason == (
        "not published: fire 2026-01-05T11:59:00+00:00 is still started (overlap policy skip)"
    )
    assert entry.task_id == policy.fire_task_id(7, "A", T0)
    assert result.claims == []
    assert result.update == policy.RowUpdate(next_run=minutes(1), last_fire=T0, runs=0)


def test_overlap_skip_sends_when_nothing_is_in_flight() -> None:
    result = run_plan(make_task(overlap_policy="skip"), at(1), idle)
    assert states(result) == [("claimed", T0)]
    assert len(result.claims) == 1


def test_overlap_skip_records_missed_fires_and_skips_every_pick() -> None:
    task = make_task(overlap_policy="skip", misfire_policy="run_all", misfire_limit=2)
    result = run_plan(task, minutes(2), lambda: (T0 - MINUTE, "claimed"))
    assert states(result) == [
        ("missed", minutes(0)),
        ("skipped", minutes(1)),
        ("skipped", minutes(2)),
    ]
    assert result.claims == []


def test_the_starting_deadline_wins_over_overlap() -> None:
    task = make_task(overlap_policy="skip", start_deadline=1.0)
    result = run_plan(task, at(5), lambda: (T0 - MINUTE, "started"))
    assert states(result) == [("expired", T0)]


@pytest.mark.parametrize("misfire_policy", ["run_once", "run_all", "skip"])
def test_overlap_allow_never_asks_what_is_running(misfire_policy: str) -> None:
    task = make_task(overlap_policy="allow", misfire_policy=misfire_policy)
    result = run_plan(task, minutes(3), never_called)
    assert result.claims  # (under skip the newest, 0 s late, is still sent)


def test_a_one_off_fire_has_no_interval_and_no_next_run() -> None:
    task = make_task(timer_kind="once", timer="2026-01-05T12:00:00Z")
    result = run_plan(task, at(3), timer=policy.timer_of(task))
    (claim,) = result.claims
    assert (claim.fire_time, claim.interval, claim.expires) == (T0, None, None)
    assert result.update == policy.RowUpdate(next_run=None, last_fire=T0, runs=1)


def test_timer_of_reads_the_row_and_is_memoized() -> None:
    task = make_task(timer_kind="cron", timer="*/5 * * * *", tz="Europe/Berlin")
    timer = policy.timer_of(task)
    assert timer == parse_timer("*/5 * * * *", kind="cron", tz="Europe/Berlin")
    assert policy.timer_of(dataclasses.replace(task, id=8)) is timer
    assert timer.next_after(T0) == minutes(5)


# -- plan: points already in the ledger -----------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "taken", "now", "entries", "next_run"),
    [
        # next_run moved back by hand to a point that already fired: go on after last_fire.
        (
            {"last_fire": minutes(1)},
            frozenset(),
            minutes(2),
            [("claimed", minutes(2), None, 1)],
            minutes(3),
        ),
        # ... and nothing is due yet after it: only re-planned.
        ({"last_fire": minutes(5)}, frozenset(), minutes(2), [], minutes(6)),
        # Points in the ledger already are passed over, not counted as missed.
        (
            {"misfire_policy": "run_all"},
            frozenset({minutes(1)}),
            minutes(2),
            [("claimed", minutes(0), None, 1), ("claimed", minutes(2), None, 1)],
            minutes(3),
        ),
        (
            {},
            frozenset({minutes(1)}),
            minutes(2),
            [("missed", minutes(0), None, 1), ("claimed", minutes(2), None, 1)],
            minutes(3),
        ),
        ({}, frozenset(THREE), minutes(2), [], minutes(3)),
    ],
)
def test_points_already_recorded_are_never_planned_twice(
    changes: dict[str, Any],
    taken: frozenset[datetime],
    now: datetime,
    entries: list[tuple[str, datetime, datetime | None, int]],
    next_run: datetime,
) -> None:
    task = make_task(**changes)
    result = plan(
        task, EVERY_MINUTE, now, never_called, node=NODE, lease=LEASE, grace=GRACE, taken=taken
    )
    assert [(e.state, e.fire_time, e.fire_until, e.fire_count) for e in result.entries] == entries
    assert not {e.fire_time for e in result.entries} & taken
    assert result.update.next_run == next_run


def test_a_one_off_that_already_fired_is_not_planned_again() -> None:
    task = make_task(timer_kind="once", timer="2026-01-05T12:00:00Z", last_fire=T0)
    result = run_plan(task, at(30), timer=policy.timer_of(task))
    assert result == Plan(policy.RowUpdate(next_run=None))


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"next_run": minutes(1)}, None),  # as beat leaves it: the next grid point
        ({"next_run": T0}, None),  # due now (beat has not claimed it yet)
        ({"next_run": minutes(-5)}, None),  # late: the misfire policy's business
        ({"next_run": None}, "no next run although its timer fires at"),
        ({"next_run": datetime(9999, 12, 31, tzinfo=timezone.utc)}, "is after its timer's"),
        ({"next_run": minutes(3)}, "is after its timer's next fire"),  # skips two fires
        # A one-off that fired has no next run, rightly.
        (
            {
                "timer_kind": "once",
                "timer": "2020-01-01T00:00:00Z",
                "next_run": None,
                "last_fire": datetime(2020, 1, 1, tzinfo=timezone.utc),
            },
            None,
        ),
        # A one-off whose instant passed unfired is still planned (its misfire policy).
        (
            {"timer_kind": "once", "timer": "2020-01-01T00:00:00Z", "next_run": None},
            "no next run although",
        ),
        ({"timer": "every lunchtime", "next_run": None}, "its timer cannot be read"),
    ],
)
def test_stray_next_run(changes: dict[str, Any], reason: str | None) -> None:
    """A ``next_run`` set by hand that beat would never have left is named."""
    found = policy.stray_next_run(make_task(**changes), T0 + timedelta(seconds=1))
    if reason is None:
        assert found is None
    else:
        assert found is not None
        assert reason in found


# -- max_runs (issue 25): a bound on the scheduled fires ------------------------------------

# (case, changes to the task, now, claimed fire times, next_run, missed count)
MAX_RUNS = [
    ("no bound", {}, minutes(0), [minutes(0)], minutes(1), 0),
    ("room left", {"max_runs": 3, "total_run_count": 1}, minutes(0), [minutes(0)], minutes(1), 0),
    ("the last run allowed ends it", {"max_runs": 3, "total_run_count": 2}, minutes(0),
     [minutes(0)], None, 0),
    ("reached: nothing due is sent, no next run", {"max_runs": 3, "total_run_count": 3},
     minutes(0), [], None, 0),
    ("past it (lowered by an edit)", {"max_runs": 2, "total_run_count": 5}, minutes(0), [],
     None, 0),
    ("run_all after downtime sends the newest it allows, the rest missed",
     {"max_runs": 5, "total_run_count": 3, "misfire_policy": "run_all"}, minutes(4),
     [minutes(3), minutes(4)], None, 3),
    ("run_all within the bound sends them all",
     {"max_runs": 10, "total_run_count": 3, "misfire_policy": "run_all"}, minutes(2),
     [minutes(0), minutes(1), minutes(2)], minutes(3), 0),
    ("run_once after downtime: one run, the rest missed",
     {"max_runs": 1, "total_run_count": 0}, minutes(2), [minutes(2)], None, 2),
]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "now", "claimed", "next_run", "missed"),
    [pytest.param(*case[1:], id=case[0]) for case in MAX_RUNS],
)
def test_max_runs_bounds_the_scheduled_fires(
    changes: dict[str, Any],
    now: datetime,
    claimed: list[datetime],
    next_run: datetime | None,
    missed: int,
) -> None:
    result = run_plan(make_task(next_run=T0, **changes), now)
    assert [c.fire_time for c in result.claims] == claimed
    assert result.update.next_run == next_run
    assert result.update.runs == len(claimed)
    recorded = [e for e in result.entries if e.state == "missed"]
    assert sum(e.fire_count for e in recorded) == missed


def test_runs_left() -> None:
    assert policy.runs_left(make_task()) is None
    assert policy.runs_left(make_task(max_runs=4, total_run_count=1)) == 3
    assert policy.runs_left(make_task(max_runs=4, total_run_count=9)) == 0


# -- sending: a claim whose fires go at once ------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "now", "running", "expected"),
    [
        # Claimed and sent at once: written ``sending``, the claim says so.
        ({}, at(1), never_called, [("sending", T0)]),
        # run_all: every picked fire; the missed ones stay ``missed``.
        (
            {"misfire_policy": "run_all", "misfire_limit": 2},
            minutes(3),
            never_called,
            [("missed", T0), ("sending", minutes(2)), ("sending", minutes(3))],
        ),
        # A fire refused stays what it is: expired, skipped, buffered.
        ({"start_deadline": 0.25}, at(20), never_called, [("expired", T0)]),
        ({"overlap_policy": "skip"}, at(1), lambda: (T0 - MINUTE, "started"), [("skipped", T0)]),
        (
            {"overlap_policy": "buffer_one"},
            at(1),
            lambda: (T0 - MINUTE, "started"),
            [("buffered", T0)],
        ),
    ],
)
def test_a_plan_for_fires_sent_at_once_writes_them_sending(
    changes: dict[str, Any],
    now: datetime,
    running: Callable[[], Running | None],
    expected: list[tuple[str, datetime]],
) -> None:
    task = make_task(**changes)
    sent = plan(task, EVERY_MINUTE, now, running, node=NODE, lease=LEASE, grace=GRACE, sending=True)
    assert states(sent) == expected
    assert [c.sending for c in sent.claims] == [True] * sum(s == "sending" for s, _ in expected)
    # The same plan without ``sending``: the same fires, ``claimed``.
    held = plan(task, EVERY_MINUTE, now, running, node=NODE, lease=LEASE, grace=GRACE)
    assert states(held) == [("claimed" if s == "sending" else s, t) for s, t in expected]
    assert [dataclasses.replace(c, sending=False) for c in sent.claims] == held.claims
