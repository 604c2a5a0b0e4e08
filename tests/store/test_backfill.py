"""Backfill (issue 25) through the store, on every backend: the claims of a range go in
one transaction through the ledger's unique key, a missed run is split so the ledger keeps
one row per fire, and beat goes on as if nothing happened."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from timeline import T0

from celery_cronstore import policy
from celery_cronstore.errors import TaskNotFoundError
from celery_cronstore.policy.backfill import (
    BACKFILL_REASON,
    FROM_MISSED_REASON,
    BackfillError,
    RangeError,
)
from celery_cronstore.records import Fire
from celery_cronstore.states import FireState
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.backfill import claim_range
from celery_cronstore.testing import FrozenClock

MINUTE = timedelta(minutes=1)


def m(n: float) -> datetime:
    return T0 + n * MINUTE


def ledger(store: Store, name: str) -> list[tuple[float, float | None, int, str]]:
    """(first, last, count, state) of each ledger row, oldest first, in minutes after T0."""

    def minutes(t: datetime | None) -> float | None:
        return None if t is None else (t - T0) / MINUTE

    fires: list[Fire] = store.history(name, limit=1000)
    return sorted(
        (minutes(f.fire_time) or 0.0, minutes(f.fire_until), f.fire_count, f.state) for f in fires
    )


def outage(store: Store, clock: FrozenClock, claimer: Claimer) -> None:
    """``poll`` (every minute from T0 + 1m) misses 1..9 while beat is away; at 10:05 beat
    sends 10 (run_once) and records 1..9 as one missed run."""
    store.add("poll", task="t.poll", timer="every 1m")
    clock.set(m(10) + timedelta(seconds=5))
    claims = claimer.claim_due().claims
    assert [c.fire_time for c in claims] == [m(10)]
    claimer.mark_published(claims)
    assert ledger(store, "poll") == [(1, 9, 9, "missed"), (10, None, 1, "published")]


def test_a_range_inside_a_missed_run_is_claimed_and_the_run_split(
    store: Store, clock: FrozenClock
) -> None:
    claimer = Claimer(store, "cli-1")
    outage(store, clock, claimer)
    done = claim_range(claimer, "poll", m(3), m(5))
    assert done.plan.fire_times == [m(3), m(4), m(5)]
    assert done.plan.from_missed == [m(3), m(4), m(5)]
    assert done.now == m(10) + timedelta(seconds=5)
    assert ledger(store, "poll") == [
        (1, 2, 2, "missed"),
        (3, None, 1, "claimed"),
        (4, None, 1, "claimed"),
        (5, None, 1, "claimed"),
        (6, 9, 4, "missed"),
        (10, None, 1, "published"),
    ]
    by_time = {f.fire_time: f for f in store.history("poll", limit=100)}
    task_id = store.get("poll").id
    for claim in done.plan.claims:
        fire = by_time[claim.fire_time]
        assert fire.task_id == claim.task_id == policy.fire_task_id(task_id, "poll", fire.fire_time)
        assert fire.reason == FROM_MISSED_REASON
        assert fire.claimed_by == "cli-1"
    assert by_time[m(6)].reason == (
        f"4 fire(s) from {m(6).isoformat()} to {m(9).isoformat()} not published: beat was "
        "not running or fell behind (misfire policy run_once)"
    )
    # the claims are the claimer's like beat's: marked published, fenced on node and attempt
    assert claimer.mark_published(done.plan.claims) == 3
    assert store.status("poll").state == "published"

    # the same range again claims nothing: every point is in the ledger now
    again = claim_range(claimer, "poll", m(3), m(5))
    assert again.plan.fire_times == []
    assert again.plan.taken == [m(3), m(4), m(5)]
    # the rest of the run is claimed on its own, and the run goes whole
    rest = claim_range(claimer, "poll", m(0), m(10))
    assert rest.plan.fire_times == [m(0), m(1), m(2), m(6), m(7), m(8), m(9)]
    assert rest.plan.from_missed == [m(1), m(2), m(6), m(7), m(8), m(9)]
    assert rest.plan.taken == [m(3), m(4), m(5), m(10)]
    assert [state for *_, state in ledger(store, "poll")] == ["claimed"] * 3 + ["published"] * 3 + [
        "claimed"
    ] * 4 + ["published"]
    entries = store.audit_trail(task="poll")
    assert [(e.action, e.detail) for e in entries[:2]] == [
        ("backfill", f"7 fire(s) from {m(0).isoformat()[:19]}Z to {m(9).isoformat()[:19]}Z "
         "(6 recorded missed before)"),
        ("backfill", f"3 fire(s) from {m(3).isoformat()[:19]}Z to {m(5).isoformat()[:19]}Z "
         "(3 recorded missed before)"),
    ]  # fmt: skip


def test_a_dry_run_writes_nothing(store: Store, clock: FrozenClock) -> None:
    claimer = Claimer(store, "cli-1")
    outage(store, clock, claimer)
    done = claim_range(claimer, "poll", m(3), m(5), dry_run=True)
    assert done.plan.fire_times == [m(3), m(4), m(5)]
    assert ledger(store, "poll") == [(1, 9, 9, "missed"), (10, None, 1, "published")]
    assert [e.action for e in store.audit_trail(task="poll")] == ["add"]


def test_beat_goes_on_past_the_fires_a_backfill_claimed(store: Store, clock: FrozenClock) -> None:
    """Beat is away and the task is due: a backfill up to now claims the due points (and
    one from before the task was added: asked for, it is claimed), and beat, back, plans
    past them (the ledger holds them) instead of sending them again."""
    claimer = Claimer(store, "beat-1")
    store.add("poll", task="t.poll", timer="every 1m")
    clock.set(m(5) + timedelta(seconds=1))
    done = claim_range(Claimer(store, "cli-1"), "poll", m(0), None)
    assert done.end == m(5) + timedelta(seconds=1)  # no end: the database's now
    assert done.plan.fire_times == [m(0), m(1), m(2), m(3), m(4), m(5)]
    clock.set(m(6) + timedelta(seconds=1))
    result = claimer.claim_due()
    assert [c.fire_time for c in result.claims] == [m(6)]
    assert [state for *_, state in ledger(store, "poll")] == ["claimed"] * 7
    assert store.get("poll").next_run == m(7)


def test_fires_in_the_ledger_already_are_passed_over(store: Store, clock: FrozenClock) -> None:
    claimer = Claimer(store, "beat-1")
    store.add("poll", task="t.poll", timer="every 1m")
    for n in (1, 2, 3):
        clock.set(m(n))
        claimer.mark_published(claimer.claim_due().claims)
    clock.set(m(3) + timedelta(seconds=30))
    done = claim_range(Claimer(store, "cli-1"), "poll", m(-2), m(3))
    assert done.plan.fire_times == [m(-2), m(-1), m(0)]
    assert done.plan.taken == [m(1), m(2), m(3)]
    reasons = {f.fire_time: f.reason for f in store.history("poll")}
    assert [reasons[t] for t in done.plan.fire_times] == [BACKFILL_REASON] * 3


def test_refusals_claim_nothing(store: Store, clock: FrozenClock) -> None:
    claimer = Claimer(store, "cli-1")
    store.add("poll", task="t.poll", timer="every 1m")
    store.add("late", task="t.late", timer="every 1m", start_deadline=30.0)
    clock.set(m(10))
    with pytest.raises(TaskNotFoundError, match="no periodic task named 'nope'"):
        claim_range(claimer, "nope", m(0), m(5))
    with pytest.raises(RangeError, match="is after now"):
        claim_range(claimer, "poll", m(0), m(11))
    with pytest.raises(RangeError, match="is after --to"):
        claim_range(claimer, "poll", m(5), m(0))
    with pytest.raises(RangeError, match="more than 10000 fire times"):
        claim_range(claimer, "poll", m(-20_000), m(0))
    with pytest.raises(BackfillError, match="starting deadline of 30s"):
        claim_range(claimer, "late", m(0), m(5))
    allowlisted = Claimer(store, "cli-1", allowlist=("safe.",))
    with pytest.raises(BackfillError, match=r"cannot be sent: task 't\.poll' is not in"):
        claim_range(allowlisted, "poll", m(0), m(5))
    assert store.history("poll") == store.history("late") == []


def test_one_row_per_fire_whatever_the_order(store: Store, clock: FrozenClock) -> None:
    """Overlapping backfills and beat's claims, in any order: never two rows for a fire,
    and the missed counts add up to the points no row claimed."""
    claimer = Claimer(store, "beat-1")
    outage(store, clock, claimer)
    cli = Claimer(store, "cli-1")
    for first, last in ((6, 7), (2, 3), (5, 8), (1, 1), (0, 4)):
        claim_range(cli, "poll", m(first), m(last))
        rows = ledger(store, "poll")
        covered = [
            n
            for first_n, last_n, count, _ in rows
            for n in range(int(first_n), int(last_n if last_n is not None else first_n) + 1)
        ]
        assert len(covered) == len(set(covered)), rows
        for first_n, last_n, count, state in rows:
            if state == FireState.MISSED:
                assert count == int((last_n or first_n) - first_n) + 1
    assert ledger(store, "poll")[-1] == (10, None, 1, "published")
    states = [state for *_, state in ledger(store, "poll")]
    assert states == ["claimed"] * 9 + ["missed", "published"]


def test_only_the_task_s_own_fire_times_inside_its_bounds(store: Store, clock: FrozenClock) -> None:
    """A task with ``start_at``/``end_at`` has no fire outside them: none is backfilled."""
    store.add("bounded", task="t.b", timer="every 1m", start_at=m(3), end_at=m(6))
    clock.set(m(10))
    done = claim_range(Claimer(store, "cli-1"), "bounded", m(0), m(10))
    assert done.plan.fire_times == [m(3), m(4), m(5), m(6)]
    assert (done.start, done.end) == (m(0), m(10))  # the range asked for
    assert claim_range(Claimer(store, "cli-1"), "bounded", m(7), m(9)).plan.fire_times == []


def test_a_taken_over_backfill_or_run_now_claim_keeps_its_requested_mark(
    store: Store, clock: FrozenClock
) -> None:
    """A beat that takes a lapsed hand-requested claim over sends it as asked for by hand
    (``cronstore_requested``), as its claimer would have: the worker's guard must not drop
    it as early or superseded; a scheduled fire taken over stays unmarked."""
    store.add("poll", task="t.poll", timer="every 1m")
    clock.set(m(5) + timedelta(seconds=1))
    cli = Claimer(store, "cli-1", lease=30)
    claim_range(cli, "poll", m(2), m(3))  # the CLI dies before publishing them
    ran = cli.claim_now("poll")
    assert ran.requested == "run-now"
    (scheduled,) = Claimer(store, "beat-0", lease=30).claim_due().claims
    assert scheduled.requested is None
    clock.set(m(6) + timedelta(seconds=40))
    again = Claimer(store, "beat-1", lease=30).reclaim_expired()
    assert sorted((c.fire_time, c.requested) for c in again) == [
        (m(2), "backfill"),
        (m(3), "backfill"),
        (m(5), None),
        (ran.fire_time, "run-now"),
    ]
