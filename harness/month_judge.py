"""The month's oracle: every grid point accounted for once, as the ledger is written.

The ledger is pruned while the month runs, so it cannot be judged at the end. It is read
as it grows instead (new rows in key order, every simulated hour; the pruner only takes
rows days old) and each task's grid is followed with a cursor: the next row of a task
must start at the grid point right after the last one covered (else points were lost, or
covered twice), lie on the grid, and a ``missed`` row's count must be the number of grid
points in its range. Rows still in flight are looked at again until they end; a row that
disappears while ``published`` (a plain fire whose message was lost, pruned) is a fire
lost without a trace. Memory stays O(tasks + fires in flight): the judge's own RSS does
not grow with the month.
"""

from __future__ import annotations

import os
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from celery_cronstore import parse_timer
from celery_cronstore.store import Store
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.testing import FrozenClock
from celery_cronstore.timers import Timer

__all__ = ["Ledger", "Report", "rss_mb"]

_TICK = timedelta(microseconds=1)
#: Ledger states a fire ends in.
ENDED = (
    "succeeded",
    "failed",
    "timed_out",
    "abandoned",
    "missed",
    "expired",
    "dropped",
    "skipped",
    "lost",
)
#: Ended without running: each needs a reason.
REASONED = ("missed", "expired", "dropped", "skipped", "abandoned", "lost")
_CHUNK = 1000


def rss_mb() -> float:
    """Resident set size of this process in MB (Linux)."""
    with open(f"/proc/{os.getpid()}/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


@dataclass
class _Task:
    timer: Timer
    created: datetime
    #: The newest grid point accounted for (the creation time before the first).
    covered: datetime
    name: str


@dataclass
class _Open:
    periodic_task_id: int
    task_id: str
    state: str
    leased: bool
    count: int


@dataclass
class Report:
    """What one month showed, and whether the contract held."""

    backend: str = ""
    tasks: int = 0
    days: float = 0.0
    expected: int = 0
    accounted: int = 0
    #: Grid points per end state (``started``: fires whose run started, whatever its end).
    ends: Counter[str] = field(default_factory=Counter)
    started: int = 0
    doubled: int = 0
    double_starts: int = 0
    unaccounted: int = 0  # grid points with no ledger row at all
    lost_silent: int = 0  # published, never started, never recorded (plain, message lost)
    ran_unrecorded: int = 0  # plain run whose start the database refused: ledger says published
    stuck: int = 0
    violations: list[str] = field(default_factory=list)
    ledger_per_day: list[tuple[int, int]] = field(default_factory=list)
    inserted_per_day: list[int] = field(default_factory=list)
    rss_per_day: list[tuple[int, float]] = field(default_factory=list)
    tick_start_ms: float = 0.0
    tick_end_ms: float = 0.0
    rss_start_mb: float = 0.0
    rss_end_mb: float = 0.0
    wall_seconds: float = 0.0
    claim_seconds: list[float] = field(default_factory=list)
    catch_up_claims: list[float] = field(default_factory=list)
    outage_hours: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    # what the simulation saw
    published: int = 0
    deliveries: int = 0
    messages_lost: int = 0
    refusals: Counter[str] = field(default_factory=Counter)
    start_errors: int = 0
    plain_unrecorded_starts: int = 0
    plain_reruns: int = 0
    unrecorded_expiries: int = 0
    outboxed: int = 0
    killed_runs: int = 0
    abandoned_by_beat: int = 0
    redelivered: int = 0
    reclaimed: int = 0
    pruned: int = 0
    beat_errors: int = 0
    bound: int = 0

    def violate(self, message: str) -> None:
        if len(self.violations) < 40:
            self.violations.append(message)
        elif len(self.violations) == 40:
            self.violations.append("... (more not listed)")

    @property
    def ok(self) -> bool:
        return not self.violations

    def judge(self, s: Any) -> None:
        """Add the whole-run checks (counts, bounds) to the per-row ones."""
        if self.accounted != self.expected:
            self.violate(f"{self.accounted} grid points accounted for, {self.expected} expected")
        for what, n in (
            ("grid point(s) with no ledger row", self.unaccounted),
            ("grid point(s) covered twice", self.doubled),
            ("fire(s) started twice", self.double_starts),
            ("plain fire(s) lost silently (published, never started)", self.lost_silent),
            ("plain run(s) the ledger never heard of (still published)", self.ran_unrecorded),
            ("fire(s) stuck in flight after the drain", self.stuck),
        ):
            if n:
                self.violate(f"{n} {what}")
        # Bounded: never more than the history kept (plus a day of slack) of the busiest
        # days, one newest row per task and what is in flight.
        if s.history_days and self.inserted_per_day:
            busiest = sorted(self.inserted_per_day, reverse=True)
            keep = int(s.history_days) + 2
            self.bound = sum(busiest[:keep]) + self.tasks
            worst = max(rows for _, rows in self.ledger_per_day)
            if worst > self.bound:
                self.violate(f"ledger reached {worst} rows, over its bound {self.bound}")
        if self.tick_end_ms > 2 * self.tick_start_ms + 1.0:
            self.violate(
                f"idle tick grew from {self.tick_start_ms:.2f} ms to {self.tick_end_ms:.2f} ms"
            )
        if self.rss_end_mb - self.rss_start_mb > 100:
            self.violate(f"RSS grew from {self.rss_start_mb:.0f} to {self.rss_end_mb:.0f} MB")

    def render(self) -> str:
        """The report as Markdown (one backend)."""
        e = self.ends
        claim = sorted(self.claim_seconds)
        p99 = claim[min(len(claim) - 1, int(len(claim) * 0.99))] if claim else 0.0
        lines = [
            f"### {self.backend}: {self.tasks} tasks, {self.days:g} days, "
            f"{self.wall_seconds / 60:.1f} min wall — {'PASS' if self.ok else 'FAIL'}",
            "",
            "| fires expected | accounted | started | succeeded / failed / timed out | "
            "missed | expired | dropped | skipped | abandoned | lost | lost silently | "
            "doubled | double starts | stuck |",
            "|" + "---|" * 14,
            f"| {self.expected} | {self.accounted} | {self.started} | "
            f"{e['succeeded']} / {e['failed']} / {e['timed_out']} | {e['missed']} | "
            f"{e['expired']} | {e['dropped']} | {e['skipped']} | {e['abandoned']} | "
            f"{e['lost']} | {self.lost_silent + self.ran_unrecorded} | {self.doubled} | "
            f"{self.double_starts} | {self.stuck} |",
            "",
            f"idle tick (peek, median of 200): {self.tick_start_ms:.2f} ms at start, "
            f"{self.tick_end_ms:.2f} ms at the end; RSS {self.rss_start_mb:.0f} MB at start, "
            f"{self.rss_end_mb:.0f} MB at the end",
            f"claims: {len(claim)}, median {_ms(statistics.median(claim) if claim else 0)}, "
            f"p99 {_ms(p99)}, max {_ms(claim[-1] if claim else 0)}; catch-up claims after "
            f"beat outages ({self.outage_hours:.1f} h in all): "
            + ", ".join(_ms(x) for x in self.catch_up_claims),
            "ledger rows per day: "
            + " ".join(f"{rows}" for _, rows in self.ledger_per_day)
            + (f" (bound {self.bound})" if self.bound else ""),
            "faults: " + ", ".join(f"{k} x{v}" for k, v in sorted(self.faults.items())),
            f"simulation: {self.published} publishes, {self.deliveries} deliveries, "
            f"{self.messages_lost} messages lost by broker restarts, guard refusals "
            f"{dict(self.refusals)}, {self.start_errors} starts refused by the database, "
            f"{self.plain_unrecorded_starts} plain starts not recorded, {self.plain_reruns} "
            f"plain bodies run again, {self.outboxed} end records through the outbox, "
            f"{self.killed_runs} runs killed, beat: {self.abandoned_by_beat} abandoned, "
            f"{self.redelivered} redelivered, {self.reclaimed} reclaimed, {self.pruned} "
            f"pruned, {self.beat_errors} tick errors",
        ]
        if self.violations:
            lines += ["", "violations:", *(f"- {v}" for v in self.violations)]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "claim_seconds"}
        out["claims"] = len(self.claim_seconds)
        out["ok"] = self.ok
        return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


class Ledger:
    """Follows the fire ledger as it is written; accounts each grid point once."""

    def __init__(self, store: Store, clock: FrozenClock, start: datetime, end: datetime) -> None:
        self.store = store
        self.clock = clock
        self.end = end
        self.cursor = 0
        self.report = Report()
        self.tasks: dict[int, _Task] = {}
        with store.engine.connect() as conn:
            for row in conn.execute(sa.select(periodic_task)):
                timer = parse_timer(row.timer, kind=row.timer_kind, tz=row.tz)
                self.tasks[row.id] = _Task(timer, row.created_at, row.created_at, row.name)
        self.open: dict[int, _Open] = {}
        self.counts: Counter[str] = Counter()
        #: Task ids started recently (a double start shows up within hours, not days).
        self.recent: dict[str, datetime] = {}
        #: Plain fires whose body ran while the database refused to record the start.
        self.ran_unrecorded: set[str] = set()
        self.inserted_today = 0
        self.day = start.date()
        self._purge_at = start

    def expected_total(self) -> int:
        return sum(_count(t.timer, t.created, self.end) for t in self.tasks.values())

    def started(self, task_id: str, now: datetime) -> bool:
        """Note a start; return ``False`` if the fire had started already."""
        if now >= self._purge_at:
            cutoff = now - timedelta(days=2)
            self.recent = {k: v for k, v in self.recent.items() if v >= cutoff}
            self._purge_at = now + timedelta(hours=6)
        if task_id in self.recent:
            return False
        self.recent[task_id] = now
        return True

    def rows(self) -> int:
        with self.store.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(fire)).scalar_one())

    def scan(self) -> None:
        """Account the rows written since the last scan; follow the open ones."""
        r = self.report
        today = self.clock().date()
        if today != self.day:
            r.inserted_per_day.append(self.inserted_today)
            self.inserted_today, self.day = 0, today
        f = fire.c
        with self.store.engine.connect() as conn:
            while True:
                batch = conn.execute(
                    sa.select(
                        f.id,
                        f.periodic_task_id,
                        f.fire_time,
                        f.fire_until,
                        f.fire_count,
                        f.state,
                        f.task_id,
                        f.started_at,
                        f.lease_until,
                        f.reason,
                    )
                    .where(f.id > self.cursor)
                    .order_by(f.id)
                    .limit(5000)
                ).all()
                if not batch:
                    break
                self.cursor = batch[-1].id
                self.inserted_today += len(batch)
                for row in sorted(batch, key=lambda x: (x.periodic_task_id, x.fire_time)):
                    self._account(row)
            self._follow(conn)

    def _account(self, row: Any) -> None:
        r = self.report
        task = self.tasks.get(row.periodic_task_id)
        if task is None:
            r.violate(f"ledger row {row.id} of an unknown task {row.periodic_task_id}")
            return
        if row.fire_time > self.end:
            return  # after the judged month
        timer = task.timer
        if timer.next_after(row.fire_time - _TICK) != row.fire_time:
            r.violate(f"{task.name}: ledger fire {row.fire_time} is not on the grid")
        due = timer.next_after(task.covered)
        if row.fire_time <= task.covered:
            r.doubled += row.fire_count
            r.violate(
                f"{task.name}: {row.state} row at {row.fire_time} covers points already "
                f"accounted for (up to {task.covered})"
            )
        elif due is not None and row.fire_time > due:
            gap = _count(timer, task.covered, row.fire_time - _TICK)
            r.unaccounted += gap
            r.violate(f"{task.name}: {gap} grid point(s) from {due} have no ledger row")
        until = row.fire_until or row.fire_time
        count = _count(timer, row.fire_time - _TICK, min(until, self.end))
        if until <= self.end and count != row.fire_count:
            r.violate(
                f"{task.name}: {row.state} row at {row.fire_time} counts {row.fire_count} "
                f"fire(s), the grid has {count} up to {until}"
            )
        task.covered = max(task.covered, min(until, self.end))
        r.accounted += count
        if row.state in ENDED:
            self._ended(task.name, row.state, row.started_at, row.reason, count)
        else:
            self.open[row.id] = _Open(
                row.periodic_task_id, row.task_id, row.state, row.lease_until is not None, count
            )

    def _ended(
        self, name: str, state: str, started_at: Any, reason: str | None, count: int
    ) -> None:
        self.counts[state] += count
        self.report.ends[state] += count
        if started_at is not None:
            self.counts["started"] += 1
            self.report.started += 1
        if state in REASONED and not reason:
            self.report.violate(f"{name}: a {state} fire without a reason")

    def _follow(self, conn: sa.Connection) -> None:
        ids = sorted(self.open)
        f = fire.c
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            seen = set()
            for row in conn.execute(
                sa.select(f.id, f.state, f.started_at, f.reason, f.lease_until).where(
                    f.id.in_(chunk)
                )
            ):
                seen.add(row.id)
                item = self.open[row.id]
                if row.state in ENDED:
                    name = self.tasks[item.periodic_task_id].name
                    self._ended(name, row.state, row.started_at, row.reason, item.count)
                    del self.open[row.id]
                else:
                    item.state, item.leased = row.state, row.lease_until is not None
            for gone in set(chunk) - seen:
                item = self.open.pop(gone)
                self._vanished(item)

    def _vanished(self, item: _Open) -> None:
        name = self.tasks[item.periodic_task_id].name
        if item.state == "published" and not item.leased:
            if item.task_id in self.ran_unrecorded:
                self.report.ran_unrecorded += item.count
            else:
                self.report.lost_silent += item.count
            self.report.ends["published (pruned)"] += item.count
        else:
            self.report.stuck += item.count
            self.report.violate(f"{name}: a {item.state} fire was pruned while in flight")

    def finish(self, report: Report) -> None:
        """Close the books at the end of the drain: what is still open is lost or stuck."""
        self.scan()
        r = self.report
        r.inserted_per_day.append(self.inserted_today)
        for item in self.open.values():
            name = self.tasks[item.periodic_task_id].name
            if item.state == "published" and not item.leased:
                if item.task_id in self.ran_unrecorded:
                    r.ran_unrecorded += item.count
                else:
                    r.lost_silent += item.count
                r.ends["published (never started)"] += item.count
            else:
                r.stuck += item.count
                r.violate(f"{name}: fire {item.task_id} still {item.state} after the drain")
        for task in self.tasks.values():
            left = _count(task.timer, task.covered, self.end)
            if left:
                r.unaccounted += left
                r.violate(f"{task.name}: {left} grid point(s) before the end never claimed")
        for name in (
            "accounted",
            "started",
            "doubled",
            "unaccounted",
            "lost_silent",
            "ran_unrecorded",
            "stuck",
            "inserted_per_day",
        ):
            setattr(report, name, getattr(r, name))
        report.ends.update(r.ends)
        report.violations = [*r.violations, *report.violations]


def _count(timer: Timer, after: datetime, until: datetime) -> int:
    """Grid points of ``timer`` in ``(after, until]``."""
    if until <= after:
        return 0
    found = timer.count_between(after, until, limit=10**7)
    assert found is not None
    return found
