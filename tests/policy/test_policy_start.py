"""The CronTask guard's start decision as a table of snapshots: no database, no clock.

Each row is one :class:`~celery_cronstore.policy.StartSnapshot` (a base one, changed) and
what :func:`~celery_cronstore.policy.decide_start` must answer, including which of the lazy
reads (``running``, ``later_started``, ``previous_fire``) it asked for: the guard reads
those rows inside its transaction, so asking needlessly costs every run a query.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest
from timeline import T0, at

from celery_cronstore.policy import StartDecision, StartSnapshot, deadline, decide_start

TASK_ID = "0b8f7f0e-1d7e-5d55-9e0c-6f1a2b3c4d5e"
#: The fire: due at T0, delivered 2 s later; the previous fire ran a minute before.
FIRE = T0
NOW = at(2)
EARLIER = T0 - timedelta(minutes=1)
LATER = T0 + timedelta(minutes=1)


class Reads:
    """The lazy reads of one snapshot: canned answers, and which ones were asked."""

    def __init__(
        self,
        running: tuple[datetime, str] | None = None,
        later_started: datetime | None = None,
        previous_fire: datetime | None = EARLIER,
    ) -> None:
        self.answers: dict[str, Any] = {
            "running": running,
            "later_started": later_started,
            "previous_fire": previous_fire,
        }
        self.asked: list[str] = []

    def _read(self, name: str) -> Any:
        assert name not in self.asked, f"{name} was read twice"
        self.asked.append(name)
        return self.answers[name]

    def running(self) -> tuple[datetime, str] | None:
        answer: tuple[datetime, str] | None = self._read("running")
        return answer

    def later_started(self) -> datetime | None:
        answer: datetime | None = self._read("later_started")
        return answer

    def previous_fire(self) -> datetime | None:
        answer: datetime | None = self._read("previous_fire")
        return answer


def snapshot(reads: Reads, **changes: Any) -> StartSnapshot:
    """Return a startable snapshot (on time, last run a minute ago), changed."""
    base = StartSnapshot(
        task_id=TASK_ID,
        now=NOW,
        retries=0,
        state="published",
        fire_time=FIRE,
        enabled=True,
        start_deadline=None,
        overlap_policy="allow",
        misfire_policy="run_once",
        last_run=EARLIER + timedelta(seconds=2),
        interval=60.0,
        tolerance=5.0,
        running=reads.running,
        later_started=reads.later_started,
        previous_fire=reads.previous_fire,
    )
    return dataclasses.replace(base, **changes)


ALL_READS = ["running", "later_started", "previous_fire"]
BUSY = (EARLIER, "started")

#: (id, snapshot changes, lazy answers, outcome, reason, reads asked)
TABLE: list[tuple[str, dict[str, Any], dict[str, Any], str, str | None, list[str]]] = [
    # 1. A Celery retry of a started fire runs again: no other check, no read.
    ("retry", {"retries": 1, "state": "retrying"}, {}, "retry", None, []),
    (
        "retry-even-disabled-early-and-overlapping",
        {
            "retries": 2,
            "state": "retrying",
            "enabled": False,
            "overlap_policy": "skip",
            "last_run": NOW,
            "start_deadline": 0.0,
        },
        {"running": BUSY},
        "retry",
        None,
        [],
    ),
    # 2. Anything not claimed or published already started or ended: a duplicate.
    *[
        (
            f"duplicate-{state}",
            {"state": state},
            {},
            "duplicate",
            f"duplicate delivery: fire {TASK_ID} is already {state}",
            [],
        )
        for state in ("started", "succeeded", "failed", "timed_out", "dropped", "skipped")
    ],
    (
        "duplicate-retrying-without-retries",  # a redelivery, not Celery's retry message
        {"state": "retrying"},
        {},
        "duplicate",
        f"duplicate delivery: fire {TASK_ID} is already retrying",
        [],
    ),
    (
        "claimed-starts",
        {"state": "claimed"},
        {},
        "started",
        None,
        ["later_started", "previous_fire"],
    ),
    (
        "a-retry-count-on-a-published-fire-is-checked-as-usual",
        {"retries": 1, "last_run": at(1)},
        {},
        "dropped",
        None,  # (early; the reason is checked in its own test)
        ["later_started", "previous_fire"],
    ),
    # 3. Disabled: dropped before anything is read.
    (
        "disabled",
        {"enabled": False, "overlap_policy": "skip", "start_deadline": 0.0},
        {"running": BUSY},
        "dropped",
        "periodic task is disabled",
        [],
    ),
    # 4. Past the starting deadline: expired (before the overlap read).
    (
        "expired",
        {"start_deadline": 1.5, "overlap_policy": "skip"},
        {"running": BUSY},
        "expired",
        "not started: 2.0s late, past the starting deadline of 1.5s",
        [],
    ),
    (
        "deadline-exactly",
        {"start_deadline": 2},
        {},
        "started",
        None,
        ["later_started", "previous_fire"],
    ),
    # 5. Overlap skip and a predecessor still running: skipped.
    (
        "skipped",
        {"overlap_policy": "skip"},
        {"running": BUSY},
        "skipped",
        "not started: fire 2026-01-05T11:59:00+00:00 is still started (overlap policy skip)",
        ["running"],
    ),
    (
        "skip-nothing-running",
        {"overlap_policy": "skip"},
        {},
        "started",
        None,
        ALL_READS,
    ),
    (
        "allow-never-reads-running",
        {"overlap_policy": "allow"},
        {"running": BUSY},
        "started",
        None,
        ["later_started", "previous_fire"],
    ),
    # 6. A later fire already started: this one is superseded.
    (
        "superseded",
        {"overlap_policy": "skip"},
        {"later_started": LATER},
        "dropped",
        "superseded: the later fire 2026-01-05T12:01:00+00:00 already started",
        ["running", "later_started"],
    ),
    (
        "superseded-first-run",
        {"last_run": None},
        {"later_started": LATER},
        "dropped",
        "superseded: the later fire 2026-01-05T12:01:00+00:00 already started",
        ["later_started"],
    ),
    # 7. Too soon after the last run: dropped as early.
    (
        "early",
        {"last_run": at(-30)},
        {},
        "dropped",
        "early: started at 2026-01-05T12:00:02+00:00, before last run "
        "2026-01-05T11:59:30+00:00 + interval 60s - tolerance 5s = 2026-01-05T12:00:25+00:00",
        ["later_started", "previous_fire"],
    ),
    # ... but not under misfire policy run_all: the user asked for every fire, backfilled
    # ones back to back included (regression: a 60-s outage of a 10-s timer sent 6 fires
    # and the guard ran one of them).
    (
        "run-all-backfill-is-not-early",
        {"last_run": at(-30), "misfire_policy": "run_all"},
        {},
        "started",
        None,
        ["later_started"],
    ),
    # ... nor for a re-run of a fire whose worker went silent: the last run it would be
    # judged against is its own first start (policy.abandon).
    (
        "rerun-of-an-abandoned-fire-is-not-early",
        {"last_run": at(-1), "reruns": 1},
        {},
        "started",
        None,
        ["later_started"],
    ),
    # A re-run still goes through every other rule: superseded, disabled, duplicate.
    (
        "rerun-superseded",
        {"reruns": 1},
        {"later_started": LATER},
        "dropped",
        "superseded: the later fire 2026-01-05T12:01:00+00:00 already started",
        ["later_started"],
    ),
    ("rerun-disabled", {"reruns": 1, "enabled": False}, {}, "dropped", None, []),
    ("rerun-duplicate", {"reruns": 1, "state": "started"}, {}, "duplicate", None, []),
    (
        "early-boundary-is-on-time",  # now == last_run + interval - tolerance
        {"last_run": at(-53)},
        {},
        "started",
        None,
        ["later_started", "previous_fire"],
    ),
    (
        "early-by-a-microsecond",
        {"last_run": at(-53) + timedelta(microseconds=1)},
        {},
        "dropped",
        None,
        ["later_started", "previous_fire"],
    ),
    (
        "tolerance-widens-the-window",
        {"last_run": at(-30), "tolerance": 40.0},
        {},
        "started",
        None,
        ["later_started", "previous_fire"],
    ),
    # The gap is the one that led up to THIS fire (seconds 19, 20, 41: the on-time :20
    # run after a :19 run is not early although the next fire is 21 s away).
    (
        "irregular-timer-uses-the-gap-before-this-fire",
        {"interval": 21.0, "last_run": at(-1), "now": FIRE},
        {"previous_fire": at(-1)},
        "started",
        None,
        ["later_started", "previous_fire"],
    ),
    (
        "gap-is-at-most-the-interval",  # previous fire long ago (a missed backlog)
        {"interval": 60.0, "last_run": at(-10)},
        {"previous_fire": T0 - timedelta(hours=3)},
        "dropped",
        None,
        ["later_started", "previous_fire"],
    ),
    (
        "no-previous-fire-uses-the-interval",
        {"last_run": at(-10)},
        {"previous_fire": None},
        "dropped",
        None,
        ["later_started", "previous_fire"],
    ),
    # 8. Otherwise: started. No early check without a last run or an interval.
    ("started", {}, {}, "started", None, ["later_started", "previous_fire"]),
    ("first-run", {"last_run": None}, {}, "started", None, ["later_started"]),
    ("no-interval", {"interval": None, "last_run": NOW}, {}, "started", None, ["later_started"]),
]


@pytest.mark.parametrize(
    ("changes", "answers", "outcome", "reason", "asked"),
    [pytest.param(*row[1:], id=row[0]) for row in TABLE],
)
def test_start_decision(
    changes: dict[str, Any],
    answers: dict[str, Any],
    outcome: str,
    reason: str | None,
    asked: list[str],
) -> None:
    reads = Reads(**answers)
    decision = decide_start(snapshot(reads, **changes))
    assert decision.outcome == outcome
    if reason is not None or outcome in ("started", "retry"):
        assert decision.reason == reason
    else:
        assert decision.reason  # every refusal says why
    assert reads.asked == asked


@pytest.mark.parametrize(
    ("outcome", "started", "recorded"),
    [
        ("started", True, False),
        ("retry", True, False),
        ("duplicate", False, False),  # the ledger row belongs to the first delivery
        ("dropped", False, True),
        ("skipped", False, True),
        ("expired", False, True),
    ],
)
def test_what_a_decision_means(outcome: str, started: bool, recorded: bool) -> None:
    decision = StartDecision(outcome)
    assert (decision.started, decision.recorded) == (started, recorded)


@pytest.mark.parametrize(
    ("start", "interval", "expected"),
    [
        (T0, 60.0, at(30)),
        (T0, 1.0, at(0.5)),
        (T0, None, None),
    ],
)
def test_the_time_box_is_half_the_interval(
    start: datetime, interval: float | None, expected: datetime | None
) -> None:
    assert deadline(start, interval) == expected
