"""Claiming due fires: once per fire, with misfire and overlap policies, on every backend."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from timeline import T0, at

from celery_cronstore.store import Claimer, Store, fire_task_id
from celery_cronstore.store.schema import periodic_task
from celery_cronstore.store.types import EPOCH
from celery_cronstore.testing import FrozenClock


@dataclass
class Seam:
    """A task seam (``store.seam.TaskSeam``) standing in for beat's app."""

    watched: Callable[[str], bool] = lambda name: False
    again: Callable[[str], bool] = lambda name: True
    #: Task name -> why beat refuses it (not registered) / why its call does not fit.
    refused: Mapping[str, str] = field(default_factory=dict)
    misfit: Mapping[str, str] = field(default_factory=dict)

    def registered(self, name: str) -> str | None:
        return self.refused.get(name)

    def guarded(self, name: str) -> bool:
        return self.watched(name)

    def redeliverable(self, name: str) -> bool:
        return self.again(name)

    def call_problem(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        return self.misfit.get(name)


def states(store: Store, name: str) -> list[tuple[datetime, str, int]]:
    return [(f.fire_time, f.state, f.fire_count) for f in reversed(store.history(name))]


def test_nothing_due_claims_nothing(store: Store) -> None:
    store.add("a", task="t", timer="*:*:0/10")
    claimer = Claimer(store, "b1")
    now, earliest = claimer.peek()
    assert (now, earliest) == (T0, at(10))
    assert claimer.claim_due().claims == []


def test_a_due_fire_is_claimed_once_with_a_deterministic_id(
    store: Store, clock: FrozenClock
) -> None:
    task = store.add("a", task="t", timer="*:*:0/10", args=[1])
    clock.set(at(10.5))
    first = Claimer(store, "b1").claim_due()
    assert [(c.name, c.fire_time, c.args) for c in first.claims] == [("a", at(10), [1])]
    claim = first.claims[0]
    assert claim.task_id == fire_task_id(task.id, "a", at(10))
    assert Claimer(store, "b2").claim_due().claims == []
    assert store.get("a").next_run == at(20)
    assert states(store, "a") == [(at(10), "claimed", 1)]


def test_mark_published_is_fenced_on_the_claimer(store: Store, clock: FrozenClock) -> None:
    store.add("a", task="t", timer="*:*:0/10")
    clock.set(at(10))
    claims = Claimer(store, "b1").claim_due().claims
    assert Claimer(store, "b2").mark_published(claims) == 0
    assert Claimer(store, "b1").mark_published(claims) == 1
    assert states(store, "a") == [(at(10), "published", 1)]


def test_a_claim_marked_after_its_publish_keeps_the_publish_time(
    store: Store, clock: FrozenClock
) -> None:
    """Beat marks a burst's published fires together, later: ``published_at`` (and the
    start lease of a watched fire) count from when each went, to 10 ms."""
    for name in ("a", "b", "c"):
        store.add(name, task=f"t.{name}", timer="*:*:0/10")
    clock.set(at(10))
    seam = Seam(watched=lambda task: task != "t.b")
    claimer = Claimer(store, "b1", start_timeout=30, seam=seam)
    claims = {c.name: c for c in claimer.claim_due().claims}
    clock.set(at(11))
    ago = {claims["a"].task_id: 0.2504, claims["b"].task_id: 0.004}  # c: just now
    assert claimer.mark_published(list(claims.values()), ago=ago) == 3
    fires = {name: store.history(name)[0] for name in claims}
    assert fires["a"].published_at == at(11) - timedelta(seconds=0.25)
    assert fires["a"].lease_until == at(11) - timedelta(seconds=0.25) + timedelta(seconds=30)
    assert fires["b"].published_at == at(11)  # under half a step: now
    assert fires["b"].lease_until is None  # not watched: no start lease
    assert (fires["c"].published_at, fires["c"].lease_until) == (at(11), at(41))


def test_an_expired_lease_is_republished_under_the_same_id(
    store: Store, clock: FrozenClock
) -> None:
    store.add("a", task="t", timer="*:*:0/10")
    clock.set(at(10))
    b1, b2 = Claimer(store, "b1", lease=30), Claimer(store, "b2", lease=30)
    (claim,) = b1.claim_due().claims  # b1 "crashes" before publishing
    clock.set(at(39))
    assert b2.reclaim_expired() == []
    clock.set(at(41))
    (again,) = b2.reclaim_expired()
    assert (again.task_id, again.attempt) == (claim.task_id, 2)
    assert b1.mark_published([claim]) == 0, "the old claimer lost its fence"
    assert b2.mark_published([again]) == 1


def test_misfire_run_once_fires_the_latest_and_records_the_rest(
    store: Store, clock: FrozenClock
) -> None:
    store.add("a", task="t", timer="*:*:0/10")
    clock.set(at(95))  # fires at 10..90 were due: nine of them
    result = Claimer(store, "b1").claim_due()
    assert [c.fire_time for c in result.claims] == [at(90)]
    history = store.history("a")
    missed = [f for f in history if f.state == "missed"]
    assert len(missed) == 1
    assert (missed[0].fire_time, missed[0].fire_until, missed[0].fire_count) == (at(10), at(80), 8)
    assert "misfire policy run_once" in (missed[0].reason or "")
    assert store.get("a").next_run == at(100)


def test_misfire_run_all_is_capped(store: Store, clock: FrozenClock) -> None:
    store.add("a", task="t", timer="*:*:0/10", misfire_policy="run_all", misfire_limit=3)
    clock.set(at(95))
    result = Claimer(store, "b1").claim_due()
    assert [c.fire_time for c in result.claims] == [at(70), at(80), at(90)]
    assert [(f.fire_time, f.fire_count) for f in store.history("a") if f.state == "missed"] == [
        (at(10), 6)
    ]


def test_misfire_skip_records_late_fires_and_publishes_none(
    store: Store, clock: FrozenClock
) -> None:
    store.add("a", task="t", timer="*:0/5", misfire_policy="skip")
    clock.set(at(3600 + 100))  # the latest due fire (3600) is 100 s late
    claimer = Claimer(store, "b1", misfire_grace=30)
    assert claimer.claim_due().claims == []
    assert [(f.state, f.fire_count) for f in store.history("a")] == [("missed", 12)]
    clock.set(at(3900 + 2))
    assert [c.fire_time for c in claimer.claim_due().claims] == [at(3900)]


def test_starting_deadline_expires_a_late_fire(store: Store, clock: FrozenClock) -> None:
    store.add("a", task="t", timer="*:*:0/10", start_deadline=5)
    clock.set(at(10 + 4))
    (claim,) = Claimer(store, "b1").claim_due().claims
    assert claim.expires == at(15)
    clock.set(at(20 + 6))
    assert Claimer(store, "b1").claim_due().claims == []
    assert states(store, "a")[-1] == (at(20), "expired", 1)


def test_overlap_skip_holds_back_while_a_run_is_in_flight(store: Store, clock: FrozenClock) -> None:
    store.add("a", task="t", timer="*:*:0/10", overlap_policy="skip")
    claimer = Claimer(store, "b1")
    clock.set(at(10))
    (first,) = claimer.claim_due().claims  # still "claimed": counts as in flight
    clock.set(at(20))
    assert claimer.claim_due().claims == []
    assert states(store, "a")[-1] == (at(20), "skipped", 1)
    claimer.mark_published([first])
    with store.begin() as conn:
        conn.execute(sa.text("UPDATE cronstore_fire SET state = 'succeeded'"))
    clock.set(at(30))
    assert [c.fire_time for c in claimer.claim_due().claims] == [at(30)]


def test_disabled_and_removed_tasks_are_not_claimed(store: Store, clock: FrozenClock) -> None:
    store.add("a", task="t", timer="*:*:0/10")
    store.add("b", task="t", timer="*:*:0/10")
    store.disable("a")
    store.remove("b")
    clock.set(at(60))
    assert Claimer(store, "b1").claim_due().claims == []


def test_a_once_timer_fires_once(store: Store, clock: FrozenClock) -> None:
    store.add("o", task="t", timer="2026-01-05T12:00:30Z")
    claimer = Claimer(store, "b1")
    clock.set(at(31))
    assert [c.fire_time for c in claimer.claim_due().claims] == [at(30)]
    assert store.get("o").next_run is None
    clock.set(at(3600))
    assert claimer.claim_due().claims == []


def test_a_once_timer_added_after_its_instant_follows_the_misfire_policy(
    store: Store, clock: FrozenClock
) -> None:
    """A one-off instant that passed before the task was added is not silently dropped:
    run_once sends it late, skip records it missed (with a reason); neither fires again,
    and re-enabling a one-off that already fired does not fire it twice."""
    clock.set(at(120))
    # force: the API refuses a one-off instant already past unless told to keep it.
    store.add("late", task="t", timer="2026-01-05T12:00:30Z", force=True)
    store.add(
        "late-skip", task="t", timer="2026-01-05T12:00:30Z", misfire_policy="skip", force=True
    )
    assert store.get("late").next_run == at(30)
    claimer = Claimer(store, "b1")
    assert [(c.name, c.fire_time) for c in claimer.claim_due().claims] == [("late", at(30))]
    assert [(f.state, f.reason is not None) for f in store.history("late-skip")] == [
        ("missed", True)
    ]
    store.disable("late")
    store.enable("late")
    assert store.get("late").next_run is None
    clock.set(at(3600))
    assert claimer.claim_due().claims == []


def test_a_bad_row_is_put_in_error_and_the_others_still_fire(
    store: Store, clock: FrozenClock
) -> None:
    store.add("good", task="t", timer="*:*:0/10")
    store.add("bad-timer", task="t", timer="*:*:0/10")
    store.add("bad-json", task="t", timer="*:*:0/10")
    store.add("bad-zone", task="t", timer="*:*:0/10")
    with store.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE cronstore_periodic_task SET timer = '*-*-* 99:00', "
                "next_run = :t WHERE name = 'bad-timer'"
            ),
            {"t": at(10)},
        )
        conn.execute(
            sa.text("UPDATE cronstore_periodic_task SET args = '[1,' WHERE name = 'bad-json'")
        )
        conn.execute(
            sa.text(
                "UPDATE cronstore_periodic_task SET tz = 'Mars/Olympus', "
                "next_run = :t WHERE name = 'bad-zone'"
            ),
            {"t": at(10)},
        )
    clock.set(at(10))
    result = Claimer(store, "b1").claim_due()
    assert [c.name for c in result.claims] == ["good"]
    errors = dict(result.errors)
    assert set(errors) == {"bad-timer", "bad-json", "bad-zone"}
    assert "99" in errors["bad-timer"]
    assert "Mars/Olympus" in errors["bad-zone"]
    assert "args is not valid JSON" in errors["bad-json"]
    assert store.status("bad-zone").error == errors["bad-zone"]
    assert store.get("bad-timer").next_run is None


def test_rows_inserted_by_raw_sql_are_planned_then_fired(store: Store, clock: FrozenClock) -> None:
    with store.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO cronstore_periodic_task (name, task, timer_kind, timer, "
                "created_at, updated_at) VALUES ('raw', 't', 'cron', '* * * * *', :t, :t)"
            ),
            {"t": T0},
        )
    assert store.get("raw").next_run == EPOCH
    claimer = Claimer(store, "b1")
    assert claimer.claim_due().claims == []  # planned, not fired
    assert store.get("raw").next_run == at(60)
    clock.set(at(60))
    assert [c.name for c in claimer.claim_due().claims] == ["raw"]


def test_allowlist_stops_unlisted_tasks(store: Store, clock: FrozenClock) -> None:
    store.add("ok", task="mail.poll", timer="*:*:0/10")
    store.add("evil", task="os.system", timer="*:*:0/10")
    clock.set(at(10))
    result = Claimer(store, "b1", allowlist=("mail.",)).claim_due()
    assert [c.name for c in result.claims] == ["ok"]
    assert "not in cronstore_task_allowlist" in dict(result.errors)["evil"]


def test_concurrent_claimers_claim_each_fire_exactly_once(store: Store, clock: FrozenClock) -> None:
    for i in range(40):
        store.add(f"t{i}", task="t", timer="*:*:0/10")
    clock.set(at(10))
    claimed: list[tuple[str, datetime]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run(node: str) -> None:
        claimer = Claimer(store, node, batch_size=7)
        try:
            for _ in range(20):
                result = claimer.claim_due()
                with lock:
                    claimed.extend((c.name, c.fire_time) for c in result.claims)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"b{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(claimed) == sorted((f"t{i}", at(10)) for i in range(40))


def test_run_now_claims_an_extra_fire_with_its_own_id(store: Store, clock: FrozenClock) -> None:
    store.add("a", task="t", timer="daily", enabled=False)
    clock.set(at(7.25))
    claimer = Claimer(store, "cli")
    claim = claimer.claim_now("a")
    assert (claim.name, claim.fire_time) == ("a", at(7.25))
    assert claimer.mark_published([claim]) == 1
    (row,) = store.history("a")
    assert (row.state, row.reason, row.task_id) == ("published", "run-now requested", claim.task_id)


def test_heartbeats_are_recorded_per_beat(store: Store, clock: FrozenClock) -> None:
    Claimer(store, "b1").heartbeat(T0)
    clock.set(at(5))
    Claimer(store, "b2").heartbeat(T0)
    Claimer(store, "b1").heartbeat(T0)
    assert sorted((node, last) for node, _, last, *_ in store.beats()) == [
        ("b1", at(5)),
        ("b2", at(5)),
    ]


def test_a_batch_that_loses_a_race_is_rolled_back_and_retried(
    store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row changed under a claim (compare-and-set miss) must neither claim half a batch
    nor escape as an exception that would stop beat: the batch is retried whole."""
    from celery_cronstore.store import batch, claims

    store.add("a", task="t.a", timer="*:*:0/10")
    clock.set(at(10))
    claimer = Claimer(store, "b1")

    def losing_write(conn: sa.Connection, rows: batch.Batch) -> None:
        batch.write_rows(conn, rows)
        raise batch.Conflict("a due row changed while it was being claimed")

    monkeypatch.setattr(claims, "write_rows", losing_write)
    lost = claimer.claim_due()
    assert (lost.claims, lost.rows) == ([], 1)  # nothing claimed; "look again at once"
    assert store.history("a") == []  # the ledger insert was rolled back with the batch
    monkeypatch.undo()
    won = claimer.claim_due()
    assert [c.fire_time for c in won.claims] == [at(10)]


def test_a_watched_fire_not_started_in_time_is_published_again_under_its_id(
    store: Store, clock: FrozenClock
) -> None:
    """A message the broker lost after taking it: the ledger still says "published" and
    nothing started. A watched (CronTask) fire is handed back after its start timeout and
    re-published with the same task id, at most ``max_redeliveries`` times; an unwatched
    fire and a fire that started are left alone."""
    store.add("watched", task="t.cron", timer="*:*:0/10")
    store.add("plain", task="t.plain", timer="*:*:0/10")
    clock.set(at(10))
    seam = Seam(watched=lambda task: task == "t.cron")
    claimer = Claimer(store, "b1", lease=5, start_timeout=30, max_redeliveries=2, seam=seam)
    claims = claimer.claim_due().claims
    assert claimer.mark_published(claims) == 2
    first = {c.name: c for c in claims}

    clock.set(at(39))  # start lease not yet over
    assert claimer.redeliver_unstarted() == 0
    clock.set(at(41))
    assert claimer.redeliver_unstarted() == 1
    again = claimer.reclaim_expired()
    assert [(c.name, c.task_id, c.attempt) for c in again] == [
        ("watched", first["watched"].task_id, 2)
    ]
    claimer.mark_published(again)
    clock.set(at(72))
    assert claimer.redeliver_unstarted() == 1  # attempt 2 <= 2: watched once more
    third = claimer.reclaim_expired()
    assert [c.attempt for c in third] == [3]
    claimer.mark_published(third)
    clock.set(at(200))
    # attempt 3 > max_redeliveries: recorded lost, with the reason, not published again.
    assert claimer.redeliver_unstarted() == 0
    (watched,) = store.history("watched")
    assert watched.state == "lost"
    assert watched.reason == "never started 30s after each of 3 publishes: its messages were lost"
    assert [f.state for f in store.history("plain")] == ["published"]  # unwatched


def test_a_plain_fire_whose_message_was_lost_is_recorded_lost_not_sent_twice(
    store: Store, clock: FrozenClock
) -> None:
    """Regression: a broker restart with plain fires queued left them "published" for
    ever (12 in the issue's run; 340 in a month of the accelerated soak). A plain task that
    acknowledges late may run twice: it is published again; any other is recorded lost."""
    store.add("plain", task="t.plain", timer="*:*:0/10")
    store.add("late-ack", task="t.late", timer="*:*:0/10")
    clock.set(at(10))
    seam = Seam(watched=lambda task: True, again=lambda task: task == "t.late")
    claimer = Claimer(store, "b1", lease=5, start_timeout=30, seam=seam)
    claims = claimer.claim_due().claims
    assert claimer.mark_published(claims) == 2
    clock.set(at(41))
    assert claimer.redeliver_unstarted() == 1
    assert [c.name for c in claimer.reclaim_expired()] == ["late-ack"]
    (plain,) = store.history("plain")
    assert plain.state == "lost"
    assert plain.reason is not None
    assert plain.reason.startswith("never started 30s after its publish (published 1 time(s))")


def test_no_redelivery_once_the_fire_started(store: Store, clock: FrozenClock) -> None:
    from celery_cronstore.store.runs import start_fire

    store.add("watched", task="t.cron", timer="*:*:0/10")
    clock.set(at(10))
    claimer = Claimer(store, "b1", lease=5, start_timeout=30, seam=Seam(watched=lambda t: True))
    claims = claimer.claim_due().claims
    claimer.mark_published(claims)
    clock.set(at(11))
    start_fire(store.db, claims[0].task_id, node="w1", retries=0)
    clock.set(at(100))
    assert claimer.redeliver_unstarted() == 0
    assert claimer.reclaim_expired() == []


def test_a_lapsed_claim_of_a_disabled_task_is_dropped_not_republished(
    store: Store, clock: FrozenClock
) -> None:
    """Regression: a second beat re-published a dead beat's claim after the task's disable
    had committed (the plain task ran 5.9 s after its disable)."""
    store.add("a", task="t.a", timer="*:*:0/10")
    clock.set(at(10))
    (claim,) = Claimer(store, "dead", lease=5).claim_due().claims
    store.disable("a")
    clock.set(at(20))
    assert Claimer(store, "alive", lease=5).reclaim_expired() == []
    fire = store.fire_by_task_id(claim.task_id)
    assert fire is not None
    assert (fire.state, fire.reason) == (
        "dropped",
        "not re-published: the task was disabled before its fire went out",
    )


def test_claims_that_waited_for_the_broker_are_checked_again(
    store: Store, clock: FrozenClock
) -> None:
    """Regression: fires a beat held while Redis was down were published after the task's
    disable or removal had committed."""
    store.add("kept", task="t.a", timer="*:*:0/10")
    store.add("off", task="t.a", timer="*:*:0/10")
    store.add("gone", task="t.a", timer="*:*:0/10")
    clock.set(at(10))
    claimer = Claimer(store, "b1")
    claims = claimer.claim_due().claims
    store.disable("off")
    store.remove("gone")
    assert [c.name for c in claimer.recheck(claims)] == ["kept"]
    (off,) = [c for c in claims if c.name == "off"]
    fire = store.fire_by_task_id(off.task_id)
    assert fire is not None
    assert fire.state == "dropped"
    assert fire.reason == "not published: the task was disabled or paused while the fire waited"


def test_a_batch_whose_row_changed_under_it_is_rolled_back_whole(
    store: Store, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's row update (one statement on PostgreSQL) is fenced on each row's
    version: one row that moved on makes the whole batch go back, ledger included."""
    from celery_cronstore.store import batch

    for name in ("a", "b", "c"):
        store.add(name, task="t", timer="*:*:0/10")
    clock.set(at(10))
    real_updates = batch.Batch.updates

    def one_stale(self: batch.Batch) -> list[dict[str, object]]:
        rows = real_updates(self)
        rows[1] = {**rows[1], "b_version": int(rows[1]["b_version"]) + 1}  # type: ignore[call-overload]
        return rows

    monkeypatch.setattr(batch.Batch, "updates", one_stale)
    lost = Claimer(store, "b1").claim_due()
    assert (lost.claims, lost.conflict) == ([], True)
    assert [store.get(n).next_run for n in "abc"] == [at(10)] * 3
    assert all(store.history(n) == [] for n in "abc")
    monkeypatch.undo()
    won = Claimer(store, "b1").claim_due()
    assert sorted(c.name for c in won.claims) == ["a", "b", "c"]
    assert [store.get(n).next_run for n in "abc"] == [at(20)] * 3
    assert [store.get(n).total_run_count for n in "abc"] == [1] * 3


def test_a_row_moved_back_onto_a_recorded_fire_costs_only_itself(
    store: Store, clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The batch's ledger rows go in as one statement (COPY on PostgreSQL): when the
    ledger's unique key refuses it, only the task whose fire is recorded already is
    planned again, past it; the others are claimed as planned."""
    store.add("a", task="t", timer="*:*:0/10")
    store.add("b", task="t", timer="*:*:0/10")
    store.disable("b")
    clock.set(at(10))
    assert [c.name for c in Claimer(store, "b1").claim_due().claims] == ["a"]
    store.enable("b")
    clock.set(at(12))
    with store.begin() as conn:  # hand edits: a back onto its recorded fire, b due
        for name in ("a", "b"):
            conn.execute(
                sa.update(periodic_task)
                .where(periodic_task.c.name == name)
                .values(next_run=at(10), last_fire=None)
            )
    with caplog.at_level("WARNING", logger="celery.beat"):
        second = Claimer(store, "b1").claim_due()
    assert "already in the ledger" in caplog.text  # the one-statement insert was refused
    assert [(c.name, c.fire_time) for c in second.claims] == [("b", at(10))]
    assert [(t, s) for t, s, _ in states(store, "a")] == [(at(10), "claimed")]
    assert (store.get("a").next_run, store.get("a").error) == (at(20), None)


def test_the_seam_refuses_a_task_and_a_call_for_the_claim_and_the_take_over(
    store: Store, clock: FrozenClock
) -> None:
    """What beat's app says about a task (not registered; args that do not fit) puts its
    row in error at the claim, closes a lapsed claim of it instead of re-publishing, and
    refuses a run-now."""
    store.add("unknown", task="t.unknown", timer="*:*:0/10")
    store.add("misfit", task="t.misfit", timer="*:*:0/10")
    store.add("fine", task="t.fine", timer="*:*:0/10")
    seam = Seam(refused={"t.unknown": "not registered"}, misfit={"t.misfit": "args do not fit"})
    clock.set(at(10))
    result = Claimer(store, "dead", lease=5, seam=seam).claim_due()  # never publishes
    (claim,) = result.claims
    assert claim.name == "fine"
    assert sorted(result.errors) == [("misfit", "args do not fit"), ("unknown", "not registered")]
    assert store.get("unknown").error == "not registered"

    clock.set(at(16))  # the dead beat's lease ran out; the row no longer fits meanwhile
    later = Seam(misfit={"t.fine": "args do not fit any more"})
    assert Claimer(store, "alive", lease=5, seam=later).reclaim_expired() == []
    fire = store.fire_by_task_id(claim.task_id)
    assert fire is not None
    assert (fire.state, fire.reason) == ("dropped", "not re-published: args do not fit any more")
    with pytest.raises(ValueError, match="cannot be sent: not registered"):
        Claimer(store, "cli", seam=seam).claim_now("unknown")
