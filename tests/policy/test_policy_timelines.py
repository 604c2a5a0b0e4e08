"""The four Nuntium timelines (tests/nuntium.py) through the pure rules alone.

No store, no clock, no Celery: "Cron" rows are :func:`~celery_cronstore.policy.plan` of the
task as it stands, task rows are :func:`~celery_cronstore.policy.decide_start` of a
snapshot built from what the ledger would hold. A started run sets ``last_run`` to its
start (the seed's rule) and gets the time box :func:`~celery_cronstore.policy.deadline`
(interval / 2). test_crontask_timelines.py plays the same tables through the real
CronTask and store.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest
from nuntium import CONGESTED, DROPPED, FORCED, STANDARD, TIMER, TOLERANCE, mmss, rows
from task_rows import periodic_task
from timeline import T0

from celery_cronstore import policy
from celery_cronstore.policy import StartDecision, StartSnapshot
from celery_cronstore.timers import parse_timer

A = periodic_task(
    task="nuntium.A",
    timer=TIMER,
    next_run=None,  # planned by the "Initial state" row
    created_at=T0,
    updated_at=T0,
)


@dataclasses.dataclass
class Run:
    """One fire of A in the ledger."""

    fire_time: datetime
    interval: float | None
    state: str = "published"
    started_at: datetime | None = None
    deadline: datetime | None = None
    reason: str | None = None


class Replay:
    """Plays one table through ``plan`` and ``decide_start``, holding what a store would."""

    def __init__(self) -> None:
        self.task = A
        self.timer = parse_timer(TIMER)
        self.runs: dict[str, Run] = {}
        self.checked: list[StartSnapshot] = []

    def play(self, table: str) -> None:
        for when, event, next_run, last_run in rows(table):
            self.event(mmss(when), event)
            self.expect(when, event, next_run, last_run)

    def event(self, now: datetime, event: str) -> None:
        words = event.split()
        if event == "Initial state":
            self.cron(now, expect=None)
        elif event == "Cron executes":
            # Beat only plans due rows; between grid points the row is not due.
            assert self.task.next_run is not None
            assert self.task.next_run > now, "a look between grid points finds nothing due"
        elif words[:2] == ["Cron", "enqueues"]:
            self.cron(now, expect=words[2])
        elif words[1:] == ["begins", "execution"]:
            assert self.begin(words[0], now).outcome == "started"
        elif words[1:] == ["ends", "execution"]:
            self.end(words[0], now, "succeeded")
        elif words[1:] == ["forced", "to", "end"]:
            run = self.runs[words[0]]
            assert run.deadline is not None
            assert now >= run.deadline, "forced to end only once the time box is over"
            self.end(words[0], now, "timed_out")
        elif words[1:] == ["executes"]:
            assert self.begin(words[0], now).outcome == "started"
            self.end(words[0], now, "succeeded")
        elif words[1:] == ["is", "dropped"]:
            decision = self.begin(words[0], now)
            assert decision.outcome == "dropped"
            assert decision.recorded
        else:  # pragma: no cover - a typo in a table
            raise AssertionError(f"unknown event {event!r}")

    def cron(self, now: datetime, *, expect: str | None) -> None:
        plan = policy.plan(
            self.task,
            self.timer,
            now,
            _not_asked,  # overlap policy allow: nothing in flight is looked up
            node="cron",
            lease=timedelta(seconds=30),
            grace=timedelta(seconds=30),
        )
        if expect is None:
            assert plan.claims == []
        else:
            (claim,) = plan.claims
            assert [e.state for e in plan.entries] == ["claimed"]
            assert claim.fire_time == now
            assert claim.interval == 60.0
            self.runs[expect] = Run(claim.fire_time, claim.interval)
        self.task = dataclasses.replace(
            self.task,
            next_run=plan.update.next_run,
            last_fire=plan.update.last_fire or self.task.last_fire,
        )

    def begin(self, name: str, now: datetime) -> StartDecision:
        run = self.runs[name]
        snap = StartSnapshot(
            task_id=name,
            now=now,
            retries=0,
            state=run.state,
            fire_time=run.fire_time,
            enabled=self.task.enabled,
            start_deadline=self.task.start_deadline,
            overlap_policy=self.task.overlap_policy,
            misfire_policy=self.task.misfire_policy,
            last_run=self.task.last_run,
            interval=run.interval,
            tolerance=TOLERANCE,
            running=_not_asked,
            later_started=lambda: max(
                (
                    r.fire_time
                    for r in self.runs.values()
                    if r.fire_time > run.fire_time and r.started_at is not None
                ),
                default=None,
            ),
            previous_fire=lambda: max(
                (r.fire_time for r in self.runs.values() if r.fire_time < run.fire_time),
                default=None,
            ),
        )
        self.checked.append(snap)
        decision = policy.decide_start(snap)
        if decision.started:
            run.state, run.started_at = "started", now
            run.deadline = policy.deadline(now, run.interval)
            self.task = dataclasses.replace(self.task, last_run=now)
        else:
            run.state, run.reason = decision.outcome, decision.reason
        return decision

    def end(self, name: str, now: datetime, state: str) -> None:
        run = self.runs[name]
        assert run.state == "started"
        run.state = state

    def expect(self, when: str, event: str, next_run: str, last_run: str) -> None:
        assert self.task.next_run == mmss(next_run), f"{when} {event}: nextRun"
        if last_run == "-":
            assert self.task.last_run is None, f"{when} {event}: lastRun"
        elif last_run.endswith("*"):  # seed erratum (tests/nuntium.py)
            assert self.checked[-1].last_run == mmss(last_run[:-1]), f"{when} {event}: checked"
            assert self.task.last_run == mmss(when), f"{when} {event}: lastRun = start"
        else:
            assert self.task.last_run == mmss(last_run), f"{when} {event}: lastRun"

    def states(self) -> dict[str, str]:
        return {name: run.state for name, run in self.runs.items()}


def _not_asked() -> tuple[datetime, str] | None:
    raise AssertionError("overlap policy allow: nothing in flight should be looked up")


@pytest.fixture
def replay() -> Replay:
    return Replay()


def test_standard_flow(replay: Replay) -> None:
    replay.play(STANDARD)
    assert replay.states() == {"A1": "succeeded", "A2": "started"}
    assert replay.runs["A1"].deadline == mmss("01:05")  # 00:35 + interval / 2
    # 01:32 - 00:35 = 57 s: inside interval - tolerance, so A2 runs.
    assert replay.checked[-1].last_run == mmss("01:32") - timedelta(seconds=57)


def test_congested_queue_keeps_the_spacing(replay: Replay) -> None:
    replay.play(CONGESTED)
    assert replay.states() == {"A1": "succeeded", "A2": "started", "A3": "published"}
    assert replay.checked[-1].fire_time == mmss("01:30")
    assert replay.runs["A2"].deadline == mmss("03:07")


def test_a_run_too_close_to_the_last_one_is_dropped(replay: Replay) -> None:
    replay.play(DROPPED)
    assert replay.states() == {"A1": "succeeded", "A2": "dropped", "A3": "succeeded"}
    reason = replay.runs["A2"].reason
    assert reason == (
        "early: started at 2026-01-05T12:02:03+00:00, before last run "
        "2026-01-05T12:01:35+00:00 + interval 60s - tolerance 5s = 2026-01-05T12:02:30+00:00"
    )


def test_a_run_forced_to_end_keeps_its_start_as_last_run(replay: Replay) -> None:
    replay.play(FORCED)
    assert replay.states() == {"A1": "timed_out", "A2": "started"}
    assert replay.runs["A1"].deadline == mmss("01:05")


def second_fire(now: str, last_run: str, tolerance: float) -> StartSnapshot:
    """Return the snapshot of A2 (fire 01:30, previous fire 00:30) delivered at ``now``."""
    return StartSnapshot(
        task_id="A2",
        now=mmss(now),
        retries=0,
        state="published",
        fire_time=mmss("01:30"),
        enabled=True,
        start_deadline=None,
        overlap_policy="allow",
        misfire_policy="run_once",
        last_run=mmss(last_run),
        interval=60.0,
        tolerance=tolerance,
        running=_not_asked,
        later_started=lambda: None,
        previous_fire=lambda: mmss("00:30"),
    )


@pytest.mark.parametrize(
    ("table", "now", "last_run", "tolerance", "outcome"),
    [
        # STANDARD 01:32 - 00:35 = 57 s must run: 57 >= 60 - tolerance needs 3 s or more.
        ("standard", "01:32", "00:35", 2.0, "dropped"),
        ("standard", "01:32", "00:35", 3.0, "started"),
        ("standard", "01:32", "00:35", TOLERANCE, "started"),
        # DROPPED 02:03 - 01:35 = 28 s must drop: 28 < 60 - tolerance needs under 32 s.
        ("dropped", "02:03", "01:35", TOLERANCE, "dropped"),
        ("dropped", "02:03", "01:35", 31.0, "dropped"),
        ("dropped", "02:03", "01:35", 32.0, "started"),
        # CONGESTED 02:37 - 01:35 = 62 s: runs whatever the tolerance.
        ("congested", "02:37", "01:35", 0.0, "started"),
    ],
)
def test_the_tables_bound_the_tolerance(
    table: str, now: str, last_run: str, tolerance: float, outcome: str
) -> None:
    assert policy.decide_start(second_fire(now, last_run, tolerance)).outcome == outcome
