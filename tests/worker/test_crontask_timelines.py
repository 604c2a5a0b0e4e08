"""The four Nuntium timelines (seeds/000): the early-drop rule and the interval/2 time box.

The tables are in ``tests/nuntium.py`` (test_policy_timelines.py plays them through the
pure rules). Here they are played with a FrozenClock against an in-memory store: "Cron"
rows are ``Claimer.claim_due()``, task rows run the real ``CronTask`` (eagerly, in a thread
so that a run can span several rows) with the default ``cronstore_tolerance`` (5 s).
For the seed's erratum rows (``*``) we assert both: the guard compared against the printed
lastRun, and the store now holds the start time.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded
from nuntium import CONGESTED, DROPPED, FORCED, STANDARD, TIMER, mmss, rows
from timeline import T0

from celery_cronstore.store import Claim, Claimer, Store, runs
from celery_cronstore.testing import FrozenClock, memory_store
from celery_cronstore.worker import task as task_module
from celery_cronstore.worker.task import CronTask, use_store


@dataclass
class Control:
    """Drives one run's body from the timeline (the body waits for its next command)."""

    commands: queue.Queue[str] = field(default_factory=queue.Queue)
    started: threading.Event = field(default_factory=threading.Event)
    seen: dict[str, Any] = field(default_factory=dict)
    thread: threading.Thread | None = None
    result: Any = None


class Timeline:
    """Plays the rows of one table against a store, a claimer and a CronTask."""

    def __init__(self, clock: FrozenClock, store: Store, app: Celery, spy: list[Any]) -> None:
        self.clock, self.store, self.app, self.spy = clock, store, app, spy
        self.claimer = Claimer(store, "cron")
        self.claims: dict[str, Claim] = {}
        self.controls: dict[str, Control] = {}
        self.log: list[str] = []
        controls = self.controls

        @app.task(base=CronTask, bind=True, shared=False, name="nuntium.A")
        def task_a(self: CronTask) -> str:
            control = controls[self.request.id]
            control.seen.update(resume=self.resume_state, deadline=self.deadline)
            control.started.set()
            command = control.commands.get(timeout=10)
            if command == "force":  # the cooperative time box
                control.seen.update(out_of_time=self.out_of_time(), left=self.time_left())
                self.checkpoint({"stopped_at": self.time_left()})
                return "stopped early"
            if command == "soft-limit":  # what prefork's soft time limit raises
                self.checkpoint({"stopped_at": "soft limit"})
                raise SoftTimeLimitExceeded()
            control.seen.update(out_of_time=self.out_of_time(), left=self.time_left())
            return "done"

        self.task = task_a

    def play(self, table: str, *, force: str = "force") -> None:
        for when, event, next_run, last_run in rows(table):
            self.clock.set(mmss(when))
            self.event(event, force=force)
            self.expect(when, event, next_run, last_run)

    def event(self, event: str, *, force: str) -> None:
        words = event.split()
        if event == "Initial state":
            return
        if event == "Cron executes":
            assert self.cron() == [], "a look between grid points enqueues nothing"
            return
        if words[:2] == ["Cron", "enqueues"]:
            (claim,) = self.cron()
            assert claim.fire_time == self.clock()
            assert claim.interval == 60.0
            self.claims[words[2]] = claim
            return
        name, verb = words[0], " ".join(words[1:])
        if verb == "begins execution":
            self.begin(name)
        elif verb == "ends execution":
            self.end(name, "end")
        elif verb == "forced to end":
            self.end(name, force)
        elif verb == "executes":
            self.begin(name)
            self.end(name, "end")
        elif verb == "is dropped":
            self.begin(name, expect_start=False)
        else:  # pragma: no cover - a typo in a table
            raise AssertionError(f"unknown event {event!r}")

    def cron(self) -> list[Claim]:
        result = self.claimer.claim_due()
        self.claimer.mark_published(result.claims)
        return result.claims

    def begin(self, name: str, *, expect_start: bool = True) -> None:
        claim = self.claims[name]
        control = self.controls[claim.task_id] = Control()
        headers = {
            "celery_beat_task": True,
            "cronstore_name": claim.name,
            "cronstore_fire_time": claim.fire_time.isoformat(),
            "cronstore_interval": claim.interval,
        }

        def deliver() -> None:
            control.result = self.task.apply(task_id=claim.task_id, headers=headers)

        control.thread = threading.Thread(target=deliver, daemon=True)
        control.thread.start()
        if expect_start:
            assert control.started.wait(10), f"{name} did not start"
        else:
            control.thread.join(10)
            assert not control.started.is_set(), f"{name} ran its body"
            assert control.result.state == "IGNORED"

    def end(self, name: str, command: str) -> None:
        control = self.controls[self.claims[name].task_id]
        control.commands.put(command)
        assert control.thread is not None
        control.thread.join(10)
        assert not control.thread.is_alive()

    def expect(self, when: str, event: str, next_run: str, last_run: str) -> None:
        task = self.store.get("A")
        assert task.next_run == mmss(next_run), f"{when} {event}: nextRun"
        if last_run == "-":
            assert task.last_run is None, f"{when} {event}: lastRun"
        elif last_run.endswith("*"):  # seed erratum (see the module docstring)
            assert self.spy[-1].last_run == mmss(last_run[:-1]), f"{when} {event}: checked"
            assert task.last_run == mmss(when), f"{when} {event}: lastRun = start"
        else:
            assert task.last_run == mmss(last_run), f"{when} {event}: lastRun"

    def states(self) -> dict[str, tuple[str, str | None]]:
        by_id = {f.task_id: (f.state, f.reason) for f in self.store.history("A")}
        return {name: by_id[claim.task_id] for name, claim in self.claims.items()}

    def seen(self, name: str) -> dict[str, Any]:
        return self.controls[self.claims[name].task_id].seen

    def finish(self) -> None:
        for control in self.controls.values():
            if control.thread is not None and control.thread.is_alive():
                control.commands.put("end")
                control.thread.join(10)


@pytest.fixture
def timeline(monkeypatch: pytest.MonkeyPatch) -> Iterator[Timeline]:
    clock = FrozenClock(T0)
    store = memory_store(clock)
    store.add("A", task="nuntium.A", timer=TIMER)
    app = Celery("nuntium", set_as_current=False)
    use_store(app, store)
    spy: list[runs.RunStart] = []
    real = runs.start_fire

    def start_fire(*args: Any, **kwargs: Any) -> runs.RunStart:
        decision = real(*args, **kwargs)
        spy.append(decision)
        return decision

    monkeypatch.setattr(task_module.runs, "start_fire", start_fire)
    line = Timeline(clock, store, app, spy)
    yield line
    line.finish()
    use_store(app, None)
    store.close()


def test_standard_flow(timeline: Timeline) -> None:
    timeline.play(STANDARD)
    assert timeline.states() == {"A1": ("succeeded", None), "A2": ("started", None)}
    assert timeline.seen("A1")["deadline"] == mmss("01:05")  # 00:35 + interval / 2
    assert timeline.seen("A1")["out_of_time"] is False
    assert timeline.seen("A1")["left"] == 20.0  # ended at 00:45


def test_congested_queue_keeps_the_spacing(timeline: Timeline) -> None:
    timeline.play(CONGESTED)
    # 02:37 - 01:35 = 62 s >= interval - tolerance: A2 runs although enqueued at 01:30.
    states = timeline.states()
    assert states["A1"] == ("succeeded", None)
    assert states["A2"] == ("started", None)
    assert states["A3"] == ("published", None)
    assert timeline.spy[-1].fire_time == mmss("01:30")


def test_a_run_too_close_to_the_last_one_is_dropped(timeline: Timeline) -> None:
    timeline.play(DROPPED)
    states = timeline.states()
    assert states["A1"] == ("succeeded", None)
    assert states["A3"] == ("succeeded", None)
    state, reason = states["A2"]
    assert state == "dropped"
    assert reason is not None
    assert reason.startswith("early: started at 2026-01-05T12:02:03")
    assert "interval 60s - tolerance 5s = 2026-01-05T12:02:30" in reason
    dropped = next(f for f in timeline.store.history("A") if f.state == "dropped")
    assert dropped.node is not None
    assert dropped.started_at is None
    assert dropped.finished_at == mmss("02:03")


@pytest.mark.parametrize("force", ["force", "soft-limit"])
def test_a_run_forced_to_end_keeps_its_start_as_last_run(timeline: Timeline, force: str) -> None:
    timeline.play(FORCED, force=force)
    states = timeline.states()
    state, reason = states["A1"]
    assert state == "timed_out"
    assert reason is not None
    assert "time box of 30s" in reason
    assert states["A2"] == ("started", None)
    if force == "force":
        assert timeline.seen("A1")["out_of_time"] is True
        assert timeline.seen("A1")["left"] == 0.0
        resumed: Any = {"stopped_at": 0.0}
    else:
        resumed = {"stopped_at": "soft limit"}
    # A1 stopped cleanly where it was; A2 resumes from there.
    assert timeline.seen("A2")["resume"] == resumed
    assert timeline.seen("A1")["resume"] is None
    a1 = next(f for f in timeline.store.history("A") if f.fire_time == mmss("00:30"))
    assert (a1.started_at, a1.finished_at) == (mmss("00:35"), mmss("01:05"))
