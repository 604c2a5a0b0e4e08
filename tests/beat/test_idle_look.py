"""Beat's idle path on PostgreSQL (``store.idle``): housekeeping's one statement also
answers the idle look and whether the ledger holds anything old enough to prune."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.claims import PEEK_REUSE
from celery_cronstore.store.retention import Pruner
from celery_cronstore.store.schema import fire, periodic_task

# serial: sub-second windows (PEEK_REUSE) between real-time looks.
pytestmark = [pytest.mark.postgres, pytest.mark.serial]


class Counting:
    """Counts the statements a claimer's held connection runs."""

    def __init__(self, claimer: Claimer) -> None:
        held = claimer.look.held
        assert held is not None, "PostgreSQL on its own clock holds a connection"
        self.calls = 0
        original = held.one

        def one(*args: object, **kwargs: object) -> tuple[object, ...]:
            self.calls += 1
            return original(*args, **kwargs)  # type: ignore[arg-type]

        held.one = one  # type: ignore[method-assign]


def test_the_tick_after_housekeeping_asks_nothing_more(direct: Store) -> None:
    task = direct.add("later", task="t", timer="every 1h")
    claimer = Claimer(direct, "b1", hold=True)
    try:
        started = direct.now()
        claimer.chores(started)  # the first inserts this beat's heartbeat row
        claimer.peek()
        counting = Counting(claimer)
        chores = claimer.chores(started)
        assert chores.looked
        assert chores.earliest == task.next_run
        assert counting.calls == 1
        now, earliest = claimer.peek()  # housekeeping's answer: no round trip
        assert counting.calls == 1
        assert earliest == task.next_run
        assert chores.now <= now <= chores.now + timedelta(seconds=PEEK_REUSE)
        claimer.peek()  # used once: the next look asks the database
        assert counting.calls == 2
        claimer.chores(started)
        time.sleep(PEEK_REUSE * 2)  # too old to stand in for a look
        claimer.peek()
        assert counting.calls == 4
    finally:
        claimer.close()


def test_a_look_that_finds_lost_work_is_not_reused(direct: Store) -> None:
    direct.add("due", task="t", timer="every 1s")
    claimer = Claimer(direct, "b1", hold=True, lease=0.2)
    try:
        claimer.chores(direct.now())  # the first inserts this beat's heartbeat row
        time.sleep(1.1)
        assert claimer.claim_due().claims  # claimed, never published: its lease runs out
        time.sleep(0.3)
        counting = Counting(claimer)
        chores = claimer.chores(direct.now())
        assert chores.expired
        claimer.peek()
        assert counting.calls == 2
    finally:
        claimer.close()


def test_the_look_reports_the_oldest_fire_and_gates_a_prune_pass(direct: Store) -> None:
    claimer = Claimer(direct, "b1", hold=True)
    try:
        claimer.chores(direct.now())  # the first inserts this beat's heartbeat row
        empty = claimer.chores(direct.now())
        assert empty.looked
        assert empty.oldest_fire is None
        task = direct.add("old", task="t", timer="every 1s")
        time.sleep(1.1)
        claimer.claim_due()
        chores = claimer.chores(direct.now())
        with direct.begin() as conn:
            first = conn.execute(sa.select(fire.c.fire_time).order_by(fire.c.id)).scalars().first()
        assert chores.oldest_fire == first
        assert first is not None
        assert first <= chores.now

        pruner = Pruner(direct.db)
        keep = timedelta(days=30)
        look = (chores.now, chores.oldest_fire)
        assert pruner.pace(keep, 0.0, look) is None  # nothing older than 30 days: no pass
        assert pruner.resume_at == 0.0  # and no pause: the next look decides again
        far = (chores.now + timedelta(days=31), chores.oldest_fire)
        step = pruner.pace(keep, 0.0, far)  # the same row 31 days on: a pass runs
        assert step is not None
        assert step.scanned >= 1
        assert task.id is not None
    finally:
        claimer.close()


def test_a_burst_count_runs_on_the_held_connection_and_agrees_with_the_pool(
    direct: Store,
) -> None:
    """``count_due`` (the burst lead's count): enabled rows due by ``until``, stopping at
    ``cap``; on the held connection one statement, with the pooled count's answer."""
    now = direct.now()
    for i in range(12):  # due now+1 s ... now+12 s
        direct.add(f"t{i}", task="t", timer="every 1h", enabled=i != 3)
    with direct.begin() as conn:
        for i in range(12):
            conn.execute(
                sa.update(periodic_task)
                .where(periodic_task.c.name == f"t{i}")
                .values(next_run=now + timedelta(seconds=i + 1))
            )
    held = Claimer(direct, "b1", hold=True)
    pooled = Claimer(direct, "b2", hold=False)
    assert pooled.look.held is None
    try:
        counting = Counting(held)
        until = now + timedelta(seconds=6.5)  # t0..t5, t3 disabled
        for cap, expected in ((100, 5), (5, 5), (3, 3), (0, 0)):
            assert held.count_due(until, cap) == expected
            assert pooled.count_due(until, cap) == expected
        assert held.count_due(now + timedelta(hours=2), 100) == 11  # t3 never counts
        assert counting.calls == 5
    finally:
        held.close()
        pooled.close()


def test_the_recheck_of_held_claims_reads_on_the_held_connection(direct: Store) -> None:
    """Before a claim taken ahead goes out its task is read again: on the held
    connection one statement; a disabled or removed task's fire is still dropped."""
    for name in ("on", "off", "gone"):
        direct.add(name, task="t", timer="every 1s")
    time.sleep(1.1)
    held = Claimer(direct, "b1", hold=True)
    try:
        claims = held.claim_due().claims
        assert sorted(c.name for c in claims) == ["gone", "off", "on"]
        counting = Counting(held)
        assert sorted(c.name for c in held.recheck(claims)) == ["gone", "off", "on"]
        assert counting.calls == 1
        direct.disable("off")
        direct.remove("gone")
        assert [c.name for c in held.recheck(claims)] == ["on"]
        assert counting.calls == 2
        # A slow start may have claimed a second due second too (one of them ``missed``).
        (dropped,) = [f for f in direct.history("off") if f.state != "missed"]
        assert (dropped.state, dropped.reason) == (
            "dropped",
            "not published: the task was disabled or paused while the fire waited",
        )
    finally:
        held.close()
