"""The oracle: compare the ledger and the recorded deliveries with each timer's grid.

For every periodic task, the grid is every point ``parse_timer(...).next_after`` gives
from the task's creation to the moment its disable committed. Checked:

* no fire claimed twice: each grid point is covered by at most one ledger row (a row, or
  a ``missed`` row's range), and no ledger row lies off the grid;
* one identity: every delivery carries the ledger's task id for its fire time, and every
  delivered task id belongs to a ledger row;
* start once: at most one body start per fire (the recorder table has no unique key);
* nothing silently lost: every expected grid point was delivered, or its ledger row is
  missed/expired/skipped/dropped with a reason;
* nothing early: no delivery before the fire time, and no claim earlier than the
  claim-ahead (``cronstore_claim_ahead``, 0.1 s) before it (both on the database clock);
* no false "early" drop: the CronTask guard never drops an on-time run as early when
  the run before it started on time;
* nothing after a disable: no ledger row after the disable committed (but a fire claimed
  ahead just before it, for a time just after it, recorded dropped), and no start of a
  run after it (the guard refuses those).

Grid points in the last ``tail`` seconds before a disable are not *expected* (beat may
not have looked yet), but everything else above is checked for them too.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from celery_cronstore import parse_timer
from celery_cronstore.store.schema import fire, periodic_task
from harness.app import CLAIM_AHEAD, events

RECORDED = ("missed", "expired", "skipped", "dropped")
#: States that are not an end: a fire left in one after the drain is stuck.
IN_FLIGHT = ("claimed", "published", "started")
#: ``cronstore_tolerance`` of the harness app (the CronTask early-drop slack).
TOLERANCE = timedelta(seconds=1.0)
#: How long before its fire time a fire may be claimed (``cronstore_claim_ahead``).
AHEAD = timedelta(seconds=CLAIM_AHEAD)


@dataclass
class Result:
    """What one scenario run showed."""

    scenario: str
    expected: int = 0
    delivered: int = 0
    recorded: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0  # extra deliveries of a fire (allowed: the guard refuses them)
    double_starts: int = 0
    lost: int = 0
    #: Ledger rows still claimed, published or started once everything was drained.
    stuck: int = 0
    lateness: list[float] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    samples: list[Any] = field(default_factory=list)  # harness.sampler.Sample, over time

    @property
    def ok(self) -> bool:
        return not self.violations and self.lost == 0 and self.double_starts == 0

    def percentile(self, q: float) -> float | None:
        if not self.lateness:
            return None
        if len(self.lateness) == 1:
            return self.lateness[0]
        cuts = statistics.quantiles(self.lateness, n=100, method="inclusive")
        return cuts[min(98, max(0, round(q * 100) - 1))]

    def violate(self, message: str, limit: int = 40) -> None:
        if len(self.violations) < limit:
            self.violations.append(message)
        elif len(self.violations) == limit:
            self.violations.append("... (more violations not listed)")


def grid(timer: Any, start: datetime, end: datetime) -> list[datetime]:
    """Return every fire time of ``timer`` in ``(start, end]``."""
    points, cursor = [], start
    while True:
        cursor = timer.next_after(cursor)
        if cursor is None or cursor > end:
            return points
        points.append(cursor)


def judge(
    scenario: str,
    engine: sa.Engine,
    disabled_at: dict[str, datetime],
    *,
    tail: float = 2.0,
) -> Result:
    """Check the run recorded in ``engine``'s database; return the counts and violations."""
    result = Result(scenario)
    with engine.connect() as conn:
        tasks = {r.id: r for r in conn.execute(sa.select(periodic_task))}
        ledger = conn.execute(sa.select(fire)).all()
        recorded = conn.execute(sa.select(events)).all()

    by_task: dict[int, list[Any]] = defaultdict(list)
    by_task_id: dict[str, Any] = {}
    result.stuck = sum(row.state in IN_FLIGHT for row in ledger)
    for row in ledger:
        by_task[row.periodic_task_id].append(row)
        by_task_id[row.task_id] = row
    deliveries: dict[str, list[Any]] = defaultdict(list)
    starts: Counter[str] = Counter()
    expired_at_worker: set[str] = set()
    for event in recorded:
        if event.kind == "delivery":
            deliveries[event.task_id].append(event)
        elif event.kind == "start":
            starts[event.task_id] += 1
        elif event.kind == "expired":
            expired_at_worker.add(event.task_id)

    # One identity, start once, nothing early (deliveries).
    for task_id, seen in deliveries.items():
        row = by_task_id.get(task_id)
        if row is None:
            result.violate(f"delivery of task id {task_id} that has no ledger row")
            continue
        for event in seen:
            if event.fire_time != row.fire_time:
                result.violate(
                    f"task id {task_id} delivered for {event.fire_time}, ledger says "
                    f"{row.fire_time}"
                )
            if event.at < row.fire_time:
                result.violate(f"{task_id} delivered at {event.at}, before {row.fire_time}")
        result.duplicates += len(seen) - 1
    for task_id, count in starts.items():
        if count > 1:
            result.double_starts += count - 1
            result.violate(f"fire {task_id} started {count} times")
    ids_per_fire: dict[tuple[str | None, datetime | None], set[str]] = defaultdict(set)
    for event in recorded:
        if event.kind == "delivery":
            ids_per_fire[(event.name, event.fire_time)].add(event.task_id)
    for (name, when), ids in ids_per_fire.items():
        if len(ids) > 1:
            result.violate(f"{name} @ {when} delivered under {len(ids)} task ids")

    for pt_id, task in tasks.items():
        end = disabled_at.get(task.name)
        if end is None:
            result.violate(f"{task.name}: never disabled, cannot be judged")
            continue
        timer = parse_timer(task.timer, kind=task.timer_kind, tz=task.tz)
        points = grid(timer, task.created_at, end)
        on_grid = set(points)
        cover: Counter[datetime] = Counter()
        row_of: dict[datetime, Any] = {}
        for row in by_task[pt_id]:
            covered = [row.fire_time]
            if row.fire_until is not None:
                covered = [p for p in points if row.fire_time <= p <= row.fire_until]
            beyond = row.fire_time > end  # the grid ends at the disable
            if beyond and not _stopped_by_the_disable(row, end):
                result.violate(f"{task.name}: fire {row.fire_time} claimed after the disable")
            elif not (_on_timer(timer, row.fire_time) if beyond else row.fire_time in on_grid):
                result.violate(f"{task.name}: ledger fire {row.fire_time} is not on the grid")
            if len(covered) != row.fire_count:
                result.violate(
                    f"{task.name}: {row.state} row at {row.fire_time} counts {row.fire_count} "
                    f"fires, the grid has {len(covered)} in its range"
                )
            if row.claimed_at is not None and row.claimed_at < row.fire_time - AHEAD:
                result.violate(
                    f"{task.name}: fire {row.fire_time} claimed early at {row.claimed_at}"
                )
            if row.started_at is not None and row.started_at > end:
                result.violate(
                    f"{task.name}: fire {row.fire_time} started at {row.started_at}, after "
                    f"the disable at {end}"
                )
            for point in covered:
                cover[point] += 1
                row_of[point] = row
        _check_early_drops(result, task.name, by_task[pt_id])
        for point, count in cover.items():
            if count > 1:
                result.violate(f"{task.name}: fire {point} claimed {count} times")
        horizon = end - timedelta(seconds=tail)
        for point in points:
            if point > horizon:
                continue
            result.expected += 1
            row = row_of.get(point)
            if row is None:
                result.lost += 1
                result.violate(f"{task.name}: fire {point} has no ledger row (lost)")
                continue
            seen = deliveries.get(row.task_id) if row.fire_until is None else None
            if seen:
                result.delivered += 1
                first = min(e.at for e in seen)
                result.lateness.append((first - point).total_seconds())
                if row.state in RECORDED and not row.reason:
                    result.violate(f"{task.name}: fire {point} {row.state} without a reason")
                continue
            if row.state in RECORDED:
                result.recorded[row.state] += 1
                if not row.reason:
                    result.violate(f"{task.name}: fire {point} {row.state} without a reason")
                continue
            result.lost += 1
            where = (
                " (the worker discarded it as expired)" if row.task_id in expired_at_worker else ""
            )
            result.violate(
                f"{task.name}: fire {point} is {row.state} in the ledger but was never "
                f"delivered{where}"
            )
    return result


def _on_timer(timer: Any, when: datetime) -> bool:
    """Whether ``when`` is one of ``timer``'s fire times."""
    return bool(timer.next_after(when - timedelta(microseconds=1)) == when)


def _stopped_by_the_disable(row: Any, end: datetime) -> bool:
    """A fire claimed ahead, before the disable committed, for a time just after it: it
    must have been dropped, never published."""
    return (
        row.fire_time <= end + AHEAD and row.state == "dropped" and "disabled" in (row.reason or "")
    )


def _check_early_drops(result: Result, name: str, rows: list[Any]) -> None:
    """Flag a fire dropped as "early" although the run before it started on time.

    The early-drop rule only refuses a run that follows a *late* run too closely; after an
    on-time start of an earlier fire, nothing that starts at or after its own fire time
    is early.
    """
    started = sorted((r for r in rows if r.started_at is not None), key=lambda r: r.started_at)
    for row in rows:
        if row.state != "dropped" or not (row.reason or "").startswith("early"):
            continue
        before = [r for r in started if r.started_at <= row.finished_at]
        if not before:
            continue
        last = before[-1]
        if last.fire_time < row.fire_time and last.started_at <= last.fire_time + TOLERANCE:
            result.violate(
                f"{name}: on-time fire {row.fire_time} dropped as early after "
                f"{last.fire_time} started on time ({row.reason})"
            )
