"""``celery -A app cronstore backfill`` (issue 25) on every backend, with the memory broker:
the dry run's JSON list, a real backfill that claims and publishes each point once (the
messages carry the ledger's task ids and the nominal fire time), a missed run split, the
pace, and every refusal (one line, nothing claimed). The CLI reads the database's clock,
so the ranges are hours before the real now; the outage before them is written by beat's
own claimer on a frozen clock."""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_cronstore import actions, policy
from celery_cronstore.beat import publish as publish_module
from celery_cronstore.records import Claim
from celery_cronstore.store import Claimer, Store, runs
from celery_cronstore.testing import FrozenClock
from celery_cronstore.worker.task import CronTask

sys.path.insert(0, str(Path(__file__).parent))
from test_cli import Run, make_app, runner_for

HOUR = timedelta(hours=1)


@pytest.fixture
def clock() -> None:
    """The CLI reads the database's clock."""
    return None


@pytest.fixture
def app(db_url: str) -> Celery:
    return make_app(db_url)


@pytest.fixture
def run(app: Celery) -> Run:
    return runner_for(app)


@pytest.fixture
def base() -> datetime:
    """A whole hour at least six hours before now: ``every 1h`` fires on it."""
    now = datetime.now(timezone.utc)
    return now.replace(minute=0, second=0, microsecond=0) - 6 * HOUR


@pytest.fixture
def queue() -> str:
    return f"backfill-{uuid.uuid4().hex[:8]}"


def z(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def outage(db_url: str, base: datetime, queue: str) -> Iterator[Store]:
    """``poll`` (every hour, added before ``base``) misses base .. base+4h while beat is
    away; at base+5h beat sends base+5h and records the other five as one missed run."""
    frozen = FrozenClock(base - HOUR / 2)
    store = Store(db_url, clock=frozen)
    store.add("poll", task="app.poll", timer="every 1h", args=[7], options={"queue": queue})
    frozen.set(base + 5 * HOUR + timedelta(seconds=1))
    claimer = Claimer(store, "beat-1")
    claims = claimer.claim_due().claims
    assert [c.fire_time for c in claims] == [base + 5 * HOUR]
    claimer.mark_published(claims)
    yield store
    store.close()


def drain(app: Celery, queue: str) -> list[Any]:
    """Return every message waiting on ``queue`` (acknowledged)."""
    found = []
    with app.connection_for_read() as conn:
        simple = conn.SimpleQueue(queue)
        while True:
            try:
                message = simple.get(timeout=0.2)
            except simple.Empty:
                return found
            message.ack()
            found.append(message)


def ledger(store: Store) -> list[tuple[datetime, datetime | None, int, str]]:
    return sorted((f.fire_time, f.fire_until, f.fire_count, f.state) for f in store.history("poll"))


def test_dry_run_json_is_the_list_of_fire_times(
    run: Run, outage: Store, base: datetime, app: Celery, queue: str
) -> None:
    before = ledger(outage)
    for args in (
        ("backfill", "poll", "--from", z(base), "--to", z(base + 3 * HOUR), "--dry-run", "--json"),
        ("--json", "backfill", "poll", "--from", z(base), "--to", z(base + 3 * HOUR), "--dry-run"),
    ):
        assert json.loads(run(*args).stdout) == [z(base + n * HOUR) for n in range(4)]
    text = run("backfill", "poll", "--from", z(base - 2 * HOUR), "--to", z(base), "--dry-run")
    lines = text.output.splitlines()
    assert lines[:3] == [z(base - 2 * HOUR), z(base - HOUR), z(base)]
    assert lines[3].startswith("would claim 3 fire(s) of poll from ")
    assert "(1 of them recorded missed; 0 in the range already in the ledger)" in lines[3]
    assert "nothing claimed (dry run)" in lines[3]
    assert ledger(outage) == before
    assert drain(app, queue) == []


def test_backfill_claims_and_publishes_each_point_once(
    run: Run, outage: Store, base: datetime, app: Celery, queue: str
) -> None:
    task_id = outage.get("poll").id
    span = ("--from", z(base + HOUR), "--to", z(base + 3 * HOUR))
    sent = json.loads(run("backfill", "poll", *span, "--json", "--rate", "1000").stdout)
    points = [base + n * HOUR for n in (1, 2, 3)]
    ids = [policy.fire_task_id(task_id, "poll", p) for p in points]
    assert sent == {
        "name": "poll",
        "task": "app.poll",
        "from": z(base + HOUR),
        "to": z(base + 3 * HOUR),
        "count": 3,
        "sent": [{"fire_time": z(p), "task_id": i} for p, i in zip(points, ids, strict=True)],
        "not_sent": [],
        "from_missed": [z(p) for p in points],
        "already_in_ledger": [],
    }
    messages = drain(app, queue)
    assert [m.headers["id"] for m in messages] == ids
    assert [m.headers["cronstore_fire_time"] for m in messages] == [p.isoformat() for p in points]
    assert {m.headers["task"] for m in messages} == {"app.poll"}
    assert {m.headers["cronstore_name"] for m in messages} == {"poll"}
    assert [json.loads(m.body)[0] for m in messages] == [[7]] * 3
    # the missed run is split: one row per fire, the counts add up
    assert ledger(outage) == [
        (base, None, 1, "missed"),
        *[(p, None, 1, "published") for p in points],
        (base + 4 * HOUR, None, 1, "missed"),
        (base + 5 * HOUR, None, 1, "published"),
    ]
    reasons = {f.fire_time: f.reason for f in outage.history("poll")}
    assert reasons[base + 4 * HOUR] is not None
    assert reasons[base + 4 * HOUR].startswith("1 fire(s) from ")

    # the same range again claims nothing and sends nothing
    again = run("backfill", "poll", *span).output
    assert again.startswith("nothing to backfill for poll from ")
    assert "(3 in the range already in the ledger)" in again
    assert drain(app, queue) == []

    # a wider range: only what no row held, or a missed one held, goes (text output)
    out = run("backfill", "poll", "--from", z(base - HOUR), "--to", z(base + 5 * HOUR))
    lines = out.output.splitlines()
    assert [line.split()[1] for line in lines[:-1]] == [
        z(base - HOUR),
        z(base),
        z(base + 4 * HOUR),
    ]
    assert lines[-1].startswith("sent 3 fire(s) of poll (app.poll) from ")
    assert "(2 of them recorded missed; 4 in the range already in the ledger)" in lines[-1]
    assert len(drain(app, queue)) == 3
    assert [state for *_, state in ledger(outage)] == ["published"] * 7
    assert [e.action for e in outage.audit_trail(task="poll")][:2] == ["backfill", "backfill"]


def test_to_now_and_the_pace(run: Run, store: Store, app: Celery, queue: str) -> None:
    store.add("fast", task="app.fast", timer="every 1m", options={"queue": queue})
    now = datetime.now(timezone.utc)
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=2)  # 3 points, or 4
    began = time.monotonic()
    out = run("--json", "backfill", "fast", "--from", z(start), "--to", "now", "--rate", "20")
    elapsed = time.monotonic() - began
    report = json.loads(out.stdout)
    assert [f["fire_time"] for f in report["sent"]][:3] == [
        z(start + timedelta(minutes=n)) for n in range(3)
    ]
    assert elapsed >= (len(report["sent"]) - 1) / 20 - 0.01  # 20 per second at most
    assert len(drain(app, queue)) == len(report["sent"])


def test_refusals_are_one_line_and_claim_nothing(
    run: Run, outage: Store, base: datetime, app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = ledger(outage)
    span = ("--from", z(base), "--to", z(base + HOUR))

    def refused(*args: str, code: int) -> str:
        result = run(*args, code=code)
        message = result.stderr.strip()
        assert message.startswith("Error: ")
        assert len(message.splitlines()) == 1, message
        return message

    assert "no periodic task named 'nope'" in refused("backfill", "nope", *span, code=1)
    bad = refused("backfill", "poll", "--from", "yesterday", "--to", z(base), code=2)
    assert "--from 'yesterday' is not an instant" in bad
    assert "read in the task's zone, UTC" in bad
    assert "--to '2026-13-01' is not an instant" in refused(
        "backfill", "poll", "--from", z(base), "--to", "2026-13-01", code=2
    )
    backwards = refused("backfill", "poll", "--from", z(base + HOUR), "--to", z(base), code=2)
    assert f"--from {z(base + HOUR)} is after --to {z(base)}" in backwards
    future = z(datetime.now(timezone.utc) + 2 * HOUR)
    ahead = refused("backfill", "poll", "--from", z(base), "--to", future, code=2)
    assert f"--to {future} is after now" in ahead
    assert "fires after now cannot be backfilled" in ahead
    huge = refused("backfill", "poll", "--from", "2000-01-01T00:00:00Z", "--to", z(base), code=2)
    assert "holds more than 10000 fire times" in huge
    assert "backfill at most 10000 at once" in huge
    for rate in ("0", "-1", "nan", "inf", "1e308"):
        assert "--rate must be a number" in refused("backfill", "poll", *span, "--rate", rate,
                                                    code=2)  # fmt: skip
    missing = run("backfill", "poll", "--to", z(base), code=2).stderr
    assert "Missing option '--from'" in missing

    outage.update("poll", start_deadline=60.0)
    late = refused("backfill", "poll", *span, code=1)
    assert "has a starting deadline of 60s: 2 of the fires to backfill" in late
    outage.update("poll", start_deadline=None)

    outage.disable("poll")
    disabled = refused("backfill", "poll", *span, code=1)
    assert "periodic task 'poll' is disabled: enable it first" in disabled
    outage.enable("poll")

    monkeypatch.setenv("CRONSTORE_FIRE", "0")
    assert "firing is off here (CRONSTORE_FIRE=0" in refused("backfill", "poll", *span, code=1)
    assert "firing is off here" in refused("backfill", "poll", *span, "--dry-run", code=1)
    monkeypatch.delenv("CRONSTORE_FIRE")

    app.conf.cronstore_task_allowlist = ["safe."]
    assert "is not in cronstore_task_allowlist" in refused("backfill", "poll", *span, code=1)
    app.conf.cronstore_task_allowlist = []
    assert [(t, u, c, s) for t, u, c, s in ledger(outage) if s == "missed"] == [
        (t, u, c, s) for t, u, c, s in before if s == "missed"
    ]
    assert all(s in ("missed", "published") for *_, s in ledger(outage))


def test_a_publish_that_fails_leaves_the_rest_to_beat(
    run: Run, outage: Store, base: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Claim] = []

    def flaky(app: Any, claim: Claim, *args: Any, **kwargs: Any) -> None:
        calls.append(claim)
        if len(calls) == 2:
            raise ConnectionRefusedError("broker down")

    monkeypatch.setattr(publish_module, "publish", flaky)
    span = ("--from", z(base), "--to", z(base + 2 * HOUR), "--rate", "1000")
    message = run("backfill", "poll", *span, code=1).stderr
    assert "sent 1 of 3 claimed fires; could not publish the fire of" in message
    assert "ConnectionRefusedError: broker down" in message
    assert "a running beat publishes it and the 1 after it as their leases run out" in message
    states = {f.fire_time: f.state for f in outage.history("poll")}
    assert [states[base + n * HOUR] for n in range(3)] == ["published", "claimed", "claimed"]


def test_the_python_api_paces_and_reports(outage: Store, base: datetime, app: Celery) -> None:
    turns: list[float] = []
    sent: list[datetime] = []
    report = actions.backfill(
        app,
        outage,
        "poll",
        base,
        base + 2 * HOUR,
        node="api-1",
        rate=4.0,
        pace=turns.append,
        on_sent=lambda claim: sent.append(claim.fire_time),
    )
    assert turns == [0.0, 0.25, 0.5]
    assert sent == report.fire_times == [base, base + HOUR, base + 2 * HOUR]
    assert [c.fire_time for c in report.sent] == sent
    assert report.from_missed == sent
    assert report.not_sent == report.taken == []
    fires = {f.fire_time: f for f in outage.history("poll")}
    assert {fires[t].claimed_by for t in sent} == {"api-1"}
    with pytest.raises(ValueError, match="must be an aware datetime"):
        actions.backfill(app, outage, "poll", base.replace(tzinfo=None), None, node="api-1")


def test_a_task_disabled_while_it_backfills_sends_no_more(
    outage: Store, base: datetime, app: Celery
) -> None:
    """The guard drops the fires of a disabled task: the claims not sent yet are dropped
    (recorded so), not sent."""

    def disable_after_first(claim: Claim) -> None:
        outage.disable("poll")

    report = actions.backfill(
        app, outage, "poll", base, base + 2 * HOUR, node="api-1", on_sent=disable_after_first
    )
    assert [c.fire_time for c in report.sent] == [base]
    assert [c.fire_time for c in report.not_sent] == [base + HOUR, base + 2 * HOUR]
    states = {f.fire_time: f.state for f in outage.history("poll")}
    assert [states[base + n * HOUR] for n in range(3)] == ["published", "dropped", "dropped"]


def test_a_crontasks_backfilled_fires_start_and_leave_its_schedule_alone(
    run: Run, store: Store, app: Celery, base: datetime, queue: str
) -> None:
    """A backfilled fire is older than the fires that already ran: without a mark the
    CronTask guard would drop it ("superseded", "early"). Its message says it was asked
    for (``cronstore_requested: backfill``), so it starts, and it does not move the task's
    last run: the next scheduled fire is not judged early against it."""

    @app.task(base=CronTask, name="app.guarded", shared=False)
    def guarded() -> None:
        """A CronTask the CLI's app knows."""

    frozen = FrozenClock(base - HOUR / 2)
    beat_side = Store(store.url, clock=frozen)
    beat_side.add("guarded", task="app.guarded", timer="every 1h", options={"queue": queue})
    frozen.set(base + 5 * HOUR)  # beat sends base+5h (the older ones recorded missed)
    claimer = Claimer(beat_side, "beat-1")
    [latest] = claimer.claim_due().claims
    claimer.mark_published([latest])
    started = runs.start_fire(beat_side.db, latest.task_id, node="w1")
    assert started.started
    last_run = beat_side.get("guarded").last_run
    drain(app, queue)

    run("backfill", "guarded", "--from", z(base + HOUR), "--to", z(base + 2 * HOUR))
    messages = drain(app, queue)
    assert [m.headers["cronstore_requested"] for m in messages] == ["backfill", "backfill"]
    frozen.set(base + 5 * HOUR + timedelta(minutes=1))
    for message in messages:
        decision = runs.start_fire(
            beat_side.db,
            message.headers["id"],
            node="w1",
            requested=message.headers["cronstore_requested"] == "backfill",
        )
        assert decision.started, decision.reason
    assert beat_side.get("guarded").last_run == last_run
    frozen.set(base + 6 * HOUR)
    [nxt] = claimer.claim_due().claims
    claimer.mark_published([nxt])
    assert runs.start_fire(beat_side.db, nxt.task_id, node="w1").started  # not "early"
    beat_side.close()
