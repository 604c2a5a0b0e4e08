"""Backfill (issue 25) as tables: which grid points a range holds, which of them the ledger
holds already, how a missed run is split, the bounds. No database, no clock, no Celery."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from task_rows import periodic_task
from timeline import T0

from celery_cronstore import policy
from celery_cronstore.policy import backfill as rule
from celery_cronstore.policy.backfill import (
    BACKFILL_REASON,
    FROM_MISSED_REASON,
    BackfillError,
    RangeError,
    Recorded,
    check_range,
    grid,
    offset,
    plan_backfill,
    read_instant,
    within_bounds,
)
from celery_cronstore.records import PeriodicTask
from celery_cronstore.states import FireState
from celery_cronstore.timers import Timer, parse_timer

MINUTE = timedelta(minutes=1)
EVERY_MINUTE = parse_timer("every 1m")
NODE = "cli@host:1"
LEASE = timedelta(seconds=30)
NOW = T0 + 60 * MINUTE
WHY = "beat was not running or fell behind (misfire policy run_once)"


def m(n: float) -> datetime:
    """Return the instant ``n`` minutes after T0 (a grid point of ``every 1m`` when whole)."""
    return T0 + n * MINUTE


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(timezone.utc)


def missed(
    row_id: int, first: float, last: float, count: int | None = None, *, about: bool = False
) -> Recorded:
    """A missed row as beat records it: fires ``first..last`` (minutes after T0)."""
    count = int(last - first) + 1 if count is None else count
    entry = policy.missed_entry(
        periodic_task(), m(first), m(last), count, WHY, node="beat-1", exact=not about
    )
    return Recorded(
        id=row_id,
        fire_time=entry.fire_time,
        state=FireState.MISSED,
        fire_until=entry.fire_until,
        fire_count=entry.fire_count,
        reason=entry.reason,
        claimed_by=entry.claimed_by,
    )


def row(row_id: int, at: float, state: FireState = FireState.SUCCEEDED) -> Recorded:
    return Recorded(id=row_id, fire_time=m(at), state=state)


def backfill(
    first: float,
    last: float,
    recorded: list[Recorded],
    *,
    task: PeriodicTask | None = None,
    timer: Timer = EVERY_MINUTE,
    now: datetime = NOW,
    rate: float | None = 10.0,
) -> rule.Backfill:
    points = grid(timer, m(first), m(last))
    return plan_backfill(
        task or periodic_task(), timer, points, recorded, now, node=NODE, lease=LEASE, rate=rate
    )


def minutes(times: list[datetime]) -> list[float]:
    return [(t - T0) / MINUTE for t in times]


def spans(plan: rule.Backfill) -> list[tuple[float, float, int, str]]:
    """(first, last, count, reason head) of each missed row the plan writes."""
    return [
        (
            (e.fire_time - T0) / MINUTE,
            ((e.fire_until or e.fire_time) - T0) / MINUTE,
            e.fire_count,
            (e.reason or "").split(" from ")[0],
        )
        for e in plan.entries
        if e.state == FireState.MISSED
    ]


# -- the grid of a range ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "tz", "start", "end", "expected"),
    [
        # both ends included
        ("every 1m", "UTC", "2026-01-05T12:00:00Z", "2026-01-05T12:03:00Z",
         ["12:00", "12:01", "12:02", "12:03"]),
        ("every 1m", "UTC", "2026-01-05T12:00:30Z", "2026-01-05T12:02:59Z", ["12:01", "12:02"]),
        ("every 1m", "UTC", "2026-01-05T12:01:00Z", "2026-01-05T12:01:00Z", ["12:01"]),
        ("every 1m", "UTC", "2026-01-05T12:01:30Z", "2026-01-05T12:01:40Z", []),
        ("*/15 * * * *", "UTC", "2026-01-05T12:00:00Z", "2026-01-05T12:59:59Z",
         ["12:00", "12:15", "12:30", "12:45"]),
        # a calendar event in its own zone: 09:00 Berlin is 08:00 UTC in winter
        ("*-*-* 09:00", "Europe/Berlin", "2026-01-05T00:00:00Z", "2026-01-06T23:00:00Z",
         ["08:00", "08:00"]),
        ("2026-01-05T12:30:00Z", "UTC", "2026-01-05T12:00:00Z", "2026-01-05T13:00:00Z",
         ["12:30"]),
    ],
)  # fmt: skip
def test_grid_of_a_range(
    expression: str, tz: str, start: str, end: str, expected: list[str]
) -> None:
    timer = parse_timer(expression, tz=tz)
    points = grid(timer, utc(start), utc(end))
    assert [p.strftime("%H:%M") for p in points] == expected
    assert all(p.tzinfo == timezone.utc for p in points)


def test_a_range_with_too_many_points_is_refused_without_walking_it() -> None:
    began = time.perf_counter()
    with pytest.raises(RangeError) as refused:
        grid(parse_timer("every 1s"), T0, T0 + timedelta(days=3650))
    message = str(refused.value)
    assert "--from 2026-01-05T12:00:00Z --to 2036-" in message
    assert "more than 10000 fire times" in message
    assert "split the range" in message
    assert time.perf_counter() - began < 5
    # the bound itself is allowed
    assert len(grid(parse_timer("every 1s"), T0, T0 + timedelta(seconds=9999))) == 10_000


def test_the_bound_holds_for_a_timer_that_is_walked_too() -> None:
    began = time.perf_counter()
    with pytest.raises(RangeError, match="more than 10000 fire times"):
        grid(parse_timer("* * * * *"), T0, T0 + timedelta(days=3650))
    assert time.perf_counter() - began < 30


# -- the range's ends ------------------------------------------------------------------------


def test_check_range() -> None:
    check_range(m(0), m(0), m(0))
    check_range(m(0), m(10), m(10))
    with pytest.raises(RangeError, match=r"--from 2026-01-05T12:10:00Z is after --to"):
        check_range(m(10), m(0), NOW)
    with pytest.raises(RangeError) as future:
        check_range(m(0), NOW + MINUTE, NOW)
    assert "is after now (2026-01-05T13:00:00Z, the database's clock)" in str(future.value)
    assert "fires after now cannot be backfilled" in str(future.value)


@pytest.mark.parametrize(
    ("text", "zone", "expected"),
    [
        ("2026-01-05T12:00:00Z", "Europe/Berlin", "2026-01-05T12:00:00+00:00"),
        ("2026-01-05T13:00:00+01:00", "UTC", "2026-01-05T12:00:00+00:00"),
        ("2026-01-05T13:00", "Europe/Berlin", "2026-01-05T12:00:00+00:00"),  # the task's zone
        ("2026-07-05T13:00", "Europe/Berlin", "2026-07-05T11:00:00+00:00"),
        ("2026-01-05", "Europe/Berlin", "2026-01-04T23:00:00+00:00"),  # midnight there
        (" 2026-01-05T12:00:00Z ", "UTC", "2026-01-05T12:00:00+00:00"),
    ],
)
def test_read_instant(text: str, zone: str, expected: str) -> None:
    assert read_instant(text, zone, "--from").isoformat() == expected


@pytest.mark.parametrize(
    ("text", "zone", "said"),
    [
        ("yesterday", "UTC", "--from 'yesterday' is not an instant (expected an ISO-8601"),
        ("2026-02-30T10:00", "UTC", "--from '2026-02-30T10:00' is not an instant (invalid"),
        # the spring gap in the task's zone: that wall time does not exist
        ("2026-03-29T02:30", "Europe/Berlin", "--from '2026-03-29T02:30' is not an instant"),
    ],
)
def test_an_unreadable_instant_is_named(text: str, zone: str, said: str) -> None:
    with pytest.raises(RangeError) as refused:
        read_instant(text, zone, "--from")
    assert str(refused.value).startswith(said)
    assert f"read in the task's zone, {zone}" in str(refused.value)


def test_offsets_follow_the_rate() -> None:
    assert [offset(i, 4.0) for i in range(3)] == [0.0, 0.25, 0.5]
    assert offset(7, None) == 0.0


# -- what is claimed -------------------------------------------------------------------------


def test_every_point_no_row_holds_is_claimed_like_beat_would() -> None:
    task = periodic_task(id=7, name="poll", args=[1], options={"queue": "q"})
    plan = backfill(0, 3, [], task=task, rate=2.0)
    assert minutes(plan.fire_times) == [0, 1, 2, 3]
    assert plan.taken == plan.from_missed == plan.replaced == []
    for index, (claim, entry) in enumerate(zip(plan.claims, plan.entries, strict=True)):
        assert claim.task_id == entry.task_id == policy.fire_task_id(7, "poll", claim.fire_time)
        scheduled = policy.make_claim(task, claim.fire_time, claim.task_id, 1, EVERY_MINUTE)
        assert claim == replace(scheduled, requested="backfill")  # the CronTask guard's mark
        assert entry.state == FireState.CLAIMED
        assert entry.reason == BACKFILL_REASON
        assert (entry.claimed_by, entry.claimed_at) == (NODE, NOW)
        # each lease runs past the claim's turn to be published at the rate
        assert entry.lease_until == NOW + LEASE + timedelta(seconds=index / 2.0)


@pytest.mark.parametrize(
    ("recorded", "claimed", "taken", "from_missed", "replaced"),
    [
        ([], [0, 1, 2, 3, 4], [], [], []),
        # a row at a point holds it, whatever became of the fire
        ([row(1, 1), row(2, 3, FireState.DROPPED)], [0, 2, 4], [1, 3], [], []),
        ([row(1, 2, FireState.PUBLISHED), row(2, 0, FireState.EXPIRED)], [1, 3, 4], [0, 2],
         [], []),
        # a run-now that fell between grid points holds none of them
        ([Recorded(id=1, fire_time=m(1.5), state=FireState.SUCCEEDED)], [0, 1, 2, 3, 4], [],
         [], []),
        # a single missed point is taken from its row, which goes
        ([missed(1, 2, 2)], [0, 1, 2, 3, 4], [], [2], [1]),
        # a missed run inside the range goes whole
        ([missed(1, 1, 3)], [0, 1, 2, 3, 4], [], [1, 2, 3], [1]),
    ],
)  # fmt: skip
def test_which_points_are_claimed(
    recorded: list[Recorded],
    claimed: list[float],
    taken: list[float],
    from_missed: list[float],
    replaced: list[int],
) -> None:
    plan = backfill(0, 4, recorded)
    assert minutes(plan.fire_times) == claimed
    assert minutes(plan.taken) == taken
    assert minutes(plan.from_missed) == from_missed
    assert plan.replaced == replaced
    assert spans(plan) == []
    reasons = {(e.fire_time - T0) / MINUTE: e.reason for e in plan.entries}
    assert all(reasons[t] == FROM_MISSED_REASON for t in from_missed)
    assert all(reasons[t] == BACKFILL_REASON for t in claimed if t not in from_missed)


@pytest.mark.parametrize(
    ("first", "last", "recorded", "claimed", "left"),
    [
        # the range inside a missed run: what stays missed on each side, counted
        (3, 5, [missed(1, 0, 9)], [3, 4, 5], [(0, 2, 3, "3 fire(s)"), (6, 9, 4, "4 fire(s)")]),
        # the range over the run's start: the rest after it
        (-5, 2, [missed(1, 0, 9)], [-5, -4, -3, -2, -1, 0, 1, 2], [(3, 9, 7, "7 fire(s)")]),
        # ... over its end: the rest before it
        (7, 12, [missed(1, 0, 9)], [7, 8, 9, 10, 11, 12], [(0, 6, 7, "7 fire(s)")]),
        # one point left on a side is a row of its own (no fire_until)
        (1, 8, [missed(1, 0, 9)], list(range(1, 9)), [(0, 0, 1, "1 fire(s)"),
                                                      (9, 9, 1, "1 fire(s)")]),
        # an estimated count stays "about"
        (7, 9, [missed(1, 0, 9, 10, about=True)], [7, 8, 9],
         [(0, 6, 7, "about 7 fire(s)")]),
        # a row inside the run (a fire beat planned past) is not counted again
        (6, 7, [missed(1, 0, 9, 9), row(2, 4, FireState.SUCCEEDED)], [6, 7],
         [(0, 5, 5, "5 fire(s)"), (8, 9, 2, "2 fire(s)")]),
        # ... nor claimed, and the rest is found past it
        (3, 5, [missed(1, 0, 9, 9), row(2, 4, FireState.SUCCEEDED)], [3, 5],
         [(0, 2, 3, "3 fire(s)"), (6, 9, 4, "4 fire(s)")]),
        (3, 5, [missed(1, 0, 9, 8), row(2, 2), row(3, 6)], [3, 4, 5],
         [(0, 1, 2, "2 fire(s)"), (7, 9, 3, "3 fire(s)")]),
        # two runs met by one range
        (2, 12, [missed(1, 0, 3), missed(2, 10, 14)], list(range(2, 13)),
         [(0, 1, 2, "2 fire(s)"), (13, 14, 2, "2 fire(s)")]),
    ],
)  # fmt: skip
def test_a_missed_run_is_split(
    first: float,
    last: float,
    recorded: list[Recorded],
    claimed: list[float],
    left: list[tuple[float, float, int, str]],
) -> None:
    plan = backfill(first, last, recorded)
    assert minutes(plan.fire_times) == claimed
    assert spans(plan) == left
    missed_ids = [r.id for r in recorded if r.state == FireState.MISSED]
    assert plan.replaced == missed_ids
    # one row per fire: no claim falls in a missed row that stays
    for entry in plan.entries:
        if entry.state == FireState.MISSED:
            until = entry.fire_until or entry.fire_time
            assert not [t for t in plan.fire_times if entry.fire_time <= t <= until]
            assert entry.task_id == policy.fire_task_id(1, "A", entry.fire_time)
            assert (entry.reason or "").endswith(f"not published: {WHY}")
            assert entry.claimed_by == "beat-1"
    # the count of the run is kept: what is claimed from it plus what stays missed
    total = sum(r.fire_count for r in recorded if r.state == FireState.MISSED)
    assert len(plan.from_missed) + sum(s[2] for s in left) == total


def test_a_split_run_s_reason_reads_like_beat_s() -> None:
    plan = backfill(3, 5, [missed(1, 0, 9)])
    reasons = [e.reason for e in plan.entries if e.state == FireState.MISSED]
    assert reasons == [
        f"3 fire(s) from {m(0).isoformat()} to {m(2).isoformat()} not published: {WHY}",
        f"4 fire(s) from {m(6).isoformat()} to {m(9).isoformat()} not published: {WHY}",
    ]


def test_a_missed_row_of_another_timer_is_left_as_it_is() -> None:
    """An edit re-planned the task: its missed run was recorded on the old grid (on the
    half minute); the current grid's points in that span are claimed as no row held them."""
    old = Recorded(id=1, fire_time=m(0.5), state=FireState.MISSED, fire_until=m(3.5), fire_count=4)
    plan = backfill(0, 4, [old])
    assert minutes(plan.fire_times) == [0, 1, 2, 3, 4]
    assert plan.replaced == plan.from_missed == []
    assert spans(plan) == []
    # its own instant is its key: a point there is held
    mixed = Recorded(id=2, fire_time=m(1), state=FireState.MISSED, fire_until=m(3.5))
    assert minutes(backfill(0, 4, [mixed]).taken) == [1]


def test_a_ranged_row_that_is_not_missed_holds_its_span() -> None:
    ranged = Recorded(id=1, fire_time=m(1), state=FireState.DROPPED, fire_until=m(3))
    plan = backfill(0, 4, [ranged])
    assert minutes(plan.fire_times) == [0, 4]
    assert minutes(plan.taken) == [1, 2, 3]


def test_counts_the_timer_cannot_give_are_estimated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both sides left and too many points to count (a calendar timer): the side's count
    is shared out by length and said "about"."""
    monkeypatch.setattr(rule, "COUNT_LIMIT", 3)
    cron = parse_timer("* * * * *")
    plan = backfill(10, 11, [missed(1, 0, 29)], timer=cron)
    assert minutes(plan.fire_times) == [10, 11]
    left = spans(plan)
    assert [(a, b) for a, b, _, _ in left] == [(0, 9), (12, 29)]
    assert [head.startswith("about ") for *_, head in left] == [True, True]
    assert sum(count for _, _, count, _ in left) == 28


def test_a_count_the_grid_contradicts_is_said_about() -> None:
    """A row whose count is smaller than the grid it spans (an edit changed the grid but
    kept it aligned): each side still gets at least one fire, said "about"."""
    plan = backfill(1, 1, [missed(1, 0, 2, 1)])
    assert spans(plan) == [(0, 0, 1, "about 1 fire(s)"), (2, 2, 1, "about 1 fire(s)")]


# -- refusals --------------------------------------------------------------------------------


def test_fires_past_the_starting_deadline_are_refused() -> None:
    task = periodic_task(start_deadline=120.0)
    with pytest.raises(BackfillError) as refused:
        backfill(50, 59, [], task=task)
    message = str(refused.value)
    # 12:58 expires at 13:00, now: that one too
    assert message.startswith("periodic task 'A' has a starting deadline of 120s: 9 of the")
    assert "(the first 2026-01-05T12:50:00Z)" in message
    assert "`cronstore edit A --start-deadline ''`" in message
    assert minutes(backfill(59, 59, [], task=task).fire_times) == [59]


def test_the_deadline_counts_each_fire_s_turn_at_the_rate() -> None:
    task = periodic_task(start_deadline=300.0)
    assert minutes(backfill(56, 59, [], task=task).fire_times) == [56, 57, 58, 59]
    with pytest.raises(
        BackfillError, match=r"3 of the fires to backfill \(the first 2026-01-05T12:57"
    ):
        backfill(56, 59, [], task=task, rate=1 / 120)  # one fire every two minutes


@pytest.mark.parametrize(
    ("start_at", "end_at", "expected"),
    [
        (None, None, (0, 10)),
        (3, None, (3, 10)),
        (None, 4, (0, 4)),
        (-5, 20, (0, 10)),
        (2, 2, (2, 2)),
        (11, None, None),  # the task's schedule starts after the range
        (None, -1, None),  # ... or ended before it
    ],
)
def test_a_range_is_cut_to_the_task_s_own_bounds(
    start_at: float | None, end_at: float | None, expected: tuple[float, float] | None
) -> None:
    task = periodic_task(
        start_at=None if start_at is None else m(start_at),
        end_at=None if end_at is None else m(end_at),
    )
    inside = within_bounds(task, m(0), m(10))
    assert (None if inside is None else tuple(minutes(list(inside)))) == expected
