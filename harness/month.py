"""``python -m harness.month``: a month of beat, workers and faults in minutes.

The real store code (``Claimer``, ``runs``, the pruner, ``worker.Liveness``) runs
against a real database (a SQLite file, or a scratch PostgreSQL / MariaDB database)
while a :class:`~celery_cronstore.testing.FrozenClock` injected into the store drives
time: the simulation jumps from one event to the next (a fire falling due, a message
reaching a worker, a run ending, a heartbeat, a housekeeping, a fault), so a month of
1,000 periodic tasks takes minutes. What is simulated is only what sits outside the
package: the broker (a queue that loses what it holds when it restarts), the worker
processes (queue delay, run time, kill -9) and the faults. See ``docs/reliability.md``,
"A month in an hour".

Examples::

    .venv/bin/python -m harness.month                          # 1,000 tasks, 30 days, SQLite
    .venv/bin/python -m harness.month --db postgresql --tasks 200 --days 5
    .venv/bin/python -m harness.month --db sqlite,postgresql,mysql --json var/month.json

Exit status 1 when the contract is broken (see :mod:`harness.month_judge`).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import logging
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from celery_cronstore.policy import retention as retention_rule
from celery_cronstore.records import Claim
from celery_cronstore.store import Claimer, Store, runs
from celery_cronstore.store.retention import Pruner
from celery_cronstore.testing import FrozenClock
from celery_cronstore.worker import Liveness
from harness.month_judge import Ledger, Report, rss_mb
from harness.scratch import scratch_database

logger = logging.getLogger("harness.month")

ADMIN_URLS = {
    "postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/test",
    "mysql": "mysql+pymysql://root@127.0.0.1:3306/test",
}

# (weight per 1,000 tasks, timer, kind, zone). Zones with DST changes inside the default
# month (2026-03-20 .. 04-19: Europe on 03-29, Sydney on 04-05); "30 2 * * *" in Berlin
# falls in the spring gap, in Sydney in the autumn fold.
MIX: list[tuple[int, str, str, str]] = [
    (1, "every 1m", "interval", "UTC"),
    (1, "*/5 * * * *", "cron", "America/New_York"),
    (1, "*/15 * * * *", "cron", "Europe/Berlin"),
    (2, "every 15m", "interval", "UTC"),
    (2, "every 30m", "interval", "UTC"),
    (4, "0 * * * *", "cron", "Europe/Berlin"),
    (4, "0 * * * *", "cron", "America/New_York"),
    (4, "every 1h", "interval", "UTC"),
    (3, "30 * * * *", "cron", "Australia/Sydney"),
    (15, "every 2h", "interval", "UTC"),
    (25, "0 */4 * * *", "cron", "Europe/London"),
    (50, "every 6h", "interval", "UTC"),
    (60, "every 12h", "interval", "UTC"),
    (80, "30 2 * * *", "cron", "Europe/Berlin"),
    (100, "0 9 * * *", "cron", "America/New_York"),
    (60, "30 2 * * *", "cron", "Australia/Sydney"),
    (100, "Mon..Fri 09:30", "calendar", "Europe/London"),
    (80, "Mon..Fri 09:30", "calendar", "America/New_York"),
    (50, "Sat 03:00", "calendar", "UTC"),
    (200, "every 1d", "interval", "UTC"),
    (50, "*-*-01 00:00", "calendar", "Europe/Berlin"),
    (68, "@daily", "cron", "UTC"),
    (40, "once", "once", "Europe/Berlin"),  # an instant inside the run
]


@dataclass
class Settings:
    tasks: int = 1000
    days: float = 30.0
    start: str = "2026-03-20T00:00:00Z"
    seed: int = 12
    history_days: float = 7.0
    housekeeping: float = 30.0  # simulated seconds between housekeepings (Scheduler: 5 s)
    poll: float = 60.0  # cronstore_poll_interval (nothing edits tasks: only bounds a sleep)
    lease: float = 30.0
    start_timeout: float = 300.0
    abandon_after: float = 120.0
    tolerance: float = 5.0
    workers: int = 4
    faults: bool = True
    drain: float = 7200.0  # seconds after the end for in-flight fires to end
    verbose: bool = False


@dataclass
class Spec:
    """One periodic task of the run and how its (simulated) body behaves."""

    name: str
    timer: str
    kind: str
    tz: str
    guarded: bool
    misfire: str
    limit: int
    overlap: str
    deadline: float | None
    slow: bool
    fail_rate: float


def make_specs(s: Settings, rng: random.Random, start: datetime) -> list[Spec]:
    """The task mix: ``MIX`` by weight (largest remainder), each kind at least once."""
    kinds = range(len(MIX))
    total = sum(w for w, *_ in MIX)
    quotas = [s.tasks * w / total for w, *_ in MIX]
    counts = [math.floor(q) for q in quotas]
    for i in sorted(kinds, key=lambda i: quotas[i] - counts[i], reverse=True)[
        : s.tasks - sum(counts)
    ]:
        counts[i] += 1
    for i in kinds:  # every kind at least once (from the most common) while there is room
        biggest = max(kinds, key=lambda k: counts[k])
        if counts[i] == 0 and counts[biggest] > 1:
            counts[i], counts[biggest] = 1, counts[biggest] - 1
    order = [i for i in kinds for _ in range(counts[i])]
    specs = []
    span = s.days * 86400
    for n, i in enumerate(order):
        _, timer, kind, tz = MIX[i]
        if kind == "once":
            at = start + timedelta(seconds=rng.uniform(0.05, 0.95) * span)
            timer = at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        misfire = rng.choices(["run_once", "run_all", "skip"], [6, 2, 2])[0]
        specs.append(
            Spec(
                name=f"t{n:05d}",
                timer=timer,
                kind=kind,
                tz=tz,
                guarded=rng.random() < 0.5,
                misfire=misfire,
                limit=rng.choice([5, 10, 20]) if misfire == "run_all" else 100,
                overlap="skip" if rng.random() < 0.2 else "allow",
                deadline=rng.choice([60.0, 300.0, 900.0]) if rng.random() < 0.15 else None,
                slow=rng.random() < 0.03,
                fail_rate=0.02,
            )
        )
    return specs


# -- the simulated world -------------------------------------------------------------------


class DatabaseDown(Exception):
    pass


@dataclass
class Message:
    claim: Claim
    epoch: int  # the broker's life it was published in (a restart loses the older ones)
    guarded: bool


@dataclass
class Worker:
    node: str
    live: Liveness
    alive: bool = True
    #: task id -> generation of the run (a finish event for an older one is ignored).
    running: dict[str, int] = field(default_factory=dict)


class World:
    """Beats, workers, broker and faults around one store; one event loop."""

    def __init__(self, s: Settings, store: Store, clock: FrozenClock, url: str) -> None:
        self.s = s
        self.store = store
        self.clock = clock
        self.url = url
        self.rng = random.Random(s.seed)
        self.events: list[tuple[datetime, int, str, Any]] = []
        self.seq = itertools.count()
        self.db_down = False
        self.broker_up = True
        self.broker_epoch = 0
        self.claiming = True
        self.specs: dict[int, Spec] = {}
        self.intervals: dict[int, float] = {}
        self.beats: dict[str, BeatSim] = {}
        self.workers: list[Worker] = []
        self.worker_serial = itertools.count(1)
        self.run_serial = itertools.count(1)
        self.report = Report()
        self.ledger: Ledger | None = None
        self.keep = retention_rule.retention(s.history_days)
        sa.event.listen(store.engine, "before_cursor_execute", self._gate)

    # -- plumbing ---------------------------------------------------------------------

    def _gate(self, *_: Any) -> None:
        if self.db_down:
            raise sa.exc.OperationalError("simulated", {}, DatabaseDown("database restarting"))

    def at(self, when: datetime, kind: str, payload: Any = None) -> None:
        heapq.heappush(self.events, (when, next(self.seq), kind, payload))

    def later(self, seconds: float, kind: str, payload: Any = None) -> None:
        self.at(self.clock() + timedelta(seconds=seconds), kind, payload)

    # -- workers ----------------------------------------------------------------------

    def spawn_worker(self) -> Worker:
        live = Liveness(self.store, self.s.abandon_after)
        live._next_clock_check = math.inf  # the frozen clock is "off" the host's by design
        worker = Worker(f"worker-{next(self.worker_serial)}", live)
        self.workers.append(worker)
        self.later(self.s.abandon_after / 4, "worker_beat", worker)
        return worker

    def deliver(self, msg: Message) -> None:
        """A worker takes the message (if the broker still has it)."""
        if msg.epoch != self.broker_epoch:
            self.report.messages_lost += 1
            return
        alive = [w for w in self.workers if w.alive]
        if not alive:
            self.later(5.0, "deliver", msg)
            return
        worker = self.rng.choice(alive)
        claim = msg.claim
        self.report.deliveries += 1
        now = self.clock()
        if claim.expires is not None and now > claim.expires:
            # Celery discards an expired message; the worker's signal records it.
            try:
                runs.expire_fire(self.store.db, claim.task_id, "not started: the message expired")
            except SQLAlchemyError:
                self.report.unrecorded_expiries += 1
            return
        spec = self.specs[claim.periodic_task_id]
        if msg.guarded:
            try:
                decision = runs.start_fire(
                    self.store.db,
                    claim.task_id,
                    node=worker.node,
                    tolerance=self.s.tolerance,
                    interval=claim.interval,
                    abandon_after=self.s.abandon_after,
                )
            except SQLAlchemyError:
                self.report.start_errors += 1  # the task raises; its start lease redelivers
                return
            if not decision.started:
                self.report.refusals[decision.outcome] += 1
                return
            self.ledger_start(claim.task_id)
        else:
            try:
                recorded = runs.record_start(
                    self.store.db,
                    claim.task_id,
                    node=worker.node,
                    abandon_after=self.s.abandon_after,
                )
            except SQLAlchemyError:
                recorded = False
                self.report.plain_unrecorded_starts += 1
                if self.ledger is not None:
                    self.ledger.ran_unrecorded.add(claim.task_id)
            if recorded:
                self.ledger_start(claim.task_id)
            else:
                self.report.plain_reruns += 1  # the body runs anyway: no guard
        worker.live.running.add(claim.task_id)
        run = next(self.run_serial)
        worker.running[claim.task_id] = run
        seconds, state = self.run_time(spec, claim)
        self.later(seconds, "finish", (worker, claim.task_id, run, state))

    def ledger_start(self, task_id: str) -> None:
        if self.ledger is not None and not self.ledger.started(task_id, self.clock()):
            self.report.double_starts += 1

    def run_time(self, spec: Spec, claim: Claim) -> tuple[float, str]:
        interval = claim.interval or 86400.0
        if spec.slow:
            seconds = self.rng.uniform(0.3, 2.0) * min(interval, 3600.0)
        else:
            seconds = min(self.rng.lognormvariate(-0.5, 1.0), 600.0)
        state = "failed" if self.rng.random() < spec.fail_rate else "succeeded"
        if self.specs_guarded(claim) and seconds > interval / 2:
            return interval / 2, "timed_out"  # CronTask's time box
        return seconds, state

    def specs_guarded(self, claim: Claim) -> bool:
        return self.specs[claim.periodic_task_id].guarded

    def finish(self, worker: Worker, task_id: str, run: int, state: str) -> None:
        if not worker.alive or worker.running.get(task_id) != run:
            return
        del worker.running[task_id]
        details: dict[str, Any] = {"result": 1} if state == "succeeded" else {"error": state}
        if worker.live.finish(task_id, state, **details) is None:
            self.report.outboxed += 1

    def worker_beat(self, worker: Worker) -> None:
        if not worker.alive:
            return
        if worker.live.running or worker.live.outbox:
            # The database may be away: Liveness tries again next round.
            with contextlib.suppress(SQLAlchemyError):
                worker.live.beat()
        self.later(self.s.abandon_after / 4, "worker_beat", worker)

    def kill_worker(self) -> None:
        alive = [w for w in self.workers if w.alive]
        if not alive:
            return
        victim = max(alive, key=lambda w: (len(w.running), self.rng.random()))
        victim.alive = False  # kill -9: no finish, no heartbeat, its outbox gone
        self.report.faults["worker kill -9"] += 1
        self.report.killed_runs += len(victim.running)
        self.later(self.rng.uniform(5, 60), "worker_up")

    # -- the loop ---------------------------------------------------------------------

    def run(self, until: datetime) -> None:
        while self.events and self.events[0][0] <= until:
            when, _, kind, payload = heapq.heappop(self.events)
            if when > self.clock():
                self.clock.set(when)
            self.dispatch(kind, payload)

    def dispatch(self, kind: str, payload: Any) -> None:
        if kind == "beat_wake":
            beat = self.beats.get(payload)
            if beat is not None and beat.alive:
                beat.tick()
        elif kind == "deliver":
            self.deliver(payload)
        elif kind == "finish":
            self.finish(*payload)
        elif kind == "worker_beat":
            self.worker_beat(payload)
        elif kind == "worker_up":
            self.spawn_worker()
        elif kind == "fault":
            self.fault(*payload)
        elif kind == "day":
            payload()
        else:  # pragma: no cover
            raise ValueError(kind)

    # -- faults -----------------------------------------------------------------------

    def plan_faults(self, start: datetime, end: datetime) -> None:
        span = (end - start).total_seconds()
        days = span / 86400
        rng = self.rng

        def moments(count: int) -> list[datetime]:
            return [start + timedelta(seconds=rng.uniform(0.02, 0.97) * span) for _ in range(count)]

        for when in moments(max(1, round(days / 8))):
            self.at(when, "fault", ("beat_down", rng.uniform(1, min(6, 2 * days)) * 3600))
        for when in moments(max(1, round(days / 2))):
            # Just after a full hour: the burst of :00 fires is still queued, and lost.
            hour = when.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
            self.at(hour + timedelta(seconds=0.1), "fault", ("broker_down", rng.uniform(10, 120)))
        for when in moments(max(1, round(days / 2))):
            self.at(when, "fault", ("db_down", rng.uniform(5, 90)))
        for when in moments(max(2, round(days))):
            self.at(when, "fault", ("worker_kill", None))
        for when in moments(max(1, round(days / 4))):
            self.at(when, "fault", ("replica", rng.uniform(1, min(12, 4 * days)) * 3600))

    def fault(self, kind: str, arg: Any) -> None:
        if kind == "worker_kill":
            self.kill_worker()
        elif kind == "beat_down":
            beat = self.beats.get("beat-a")
            if beat is not None and beat.alive:
                beat.kill()
                self.report.faults["beat outage"] += 1
                self.report.outage_hours += arg / 3600
                self.later(arg, "fault", ("beat_up", "beat-a"))
        elif kind == "beat_up":
            self.start_beat(arg, catch_up=True)
        elif kind == "replica":
            if "beat-b" not in self.beats or not self.beats["beat-b"].alive:
                self.start_beat("beat-b")
                self.report.faults["second beat"] += 1
                self.later(arg, "fault", ("replica_down", None))
        elif kind == "replica_down":
            beat = self.beats.get("beat-b")
            if beat is not None:
                beat.kill()
        elif kind == "broker_down":
            self.broker_up = False
            self.broker_epoch += 1  # what it held is gone (Redis without persistence)
            self.report.faults["broker restart"] += 1
            self.later(arg, "fault", ("broker_up", None))
        elif kind == "broker_up":
            self.broker_up = True
        elif kind == "db_down":
            self.db_down = True
            self.report.faults["database restart"] += 1
            self.restart_database()
            self.later(arg, "fault", ("db_up", None))
        elif kind == "db_up":
            self.db_down = False

    def restart_database(self) -> None:
        """Cut every connection of the store (SQLite: close them)."""
        name = self.store.engine.url.database
        dialect = self.store.engine.dialect.name
        self.store.engine.dispose()
        if dialect == "sqlite":
            return
        admin = sa.create_engine(
            self.store.engine.url.render_as_string(hide_password=False),
            isolation_level="AUTOCOMMIT",
        )
        try:
            with admin.connect() as conn:
                if dialect == "postgresql":
                    conn.execute(
                        sa.text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = :db AND pid <> pg_backend_pid()"
                        ),
                        {"db": name},
                    )
                else:
                    ids = conn.execute(
                        sa.text(
                            "SELECT id FROM information_schema.processlist "
                            "WHERE db = :db AND id <> CONNECTION_ID()"
                        ),
                        {"db": name},
                    ).scalars()
                    for pid in list(ids):
                        conn.exec_driver_sql(f"KILL {int(pid)}")
        except SQLAlchemyError as exc:
            logger.warning("could not cut connections: %s", exc)
        finally:
            admin.dispose()

    def heal(self) -> None:
        """End every fault (the end of the month): all up, every beat a fresh look."""
        self.db_down = False
        self.broker_up = True
        if "beat-a" not in self.beats or not self.beats["beat-a"].alive:
            self.start_beat("beat-a", catch_up=True)
        while sum(w.alive for w in self.workers) < self.s.workers:
            self.spawn_worker()
        self.events = [e for e in self.events if e[2] != "fault"]
        heapq.heapify(self.events)

    def start_beat(self, name: str, *, catch_up: bool = False) -> BeatSim:
        old = self.beats.get(name)
        life = 1 if old is None else old.life + 1
        beat = BeatSim(self, name, life, catch_up=catch_up)
        self.beats[name] = beat
        self.at(self.clock(), "beat_wake", name)
        return beat


class SoakSeam:
    """What beat's app would say about the soak's two tasks (the store's task seam)."""

    def registered(self, name: str) -> str | None:
        """Return ``None``: both tasks may be sent."""
        return None

    def guarded(self, name: str) -> bool:
        """Return ``True``: every fire's start is watched (workers record plain starts too)."""
        return True

    def redeliverable(self, name: str) -> bool:
        """Return whether ``name`` is the CronTask: its guard starts one copy; a plain task's
        lost message is recorded lost (sending it again could run it twice)."""
        return name == "soak.guarded"

    def call_problem(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """Return ``None``: every call fits."""
        return None


class BeatSim:
    """One beat process: the Scheduler's tick and housekeeping, against a simulated broker."""

    def __init__(self, world: World, name: str, life: int, *, catch_up: bool = False) -> None:
        self.world = world
        self.name = name
        self.life = life
        s = world.s
        self.claimer = Claimer(
            world.store,
            f"{name}.{life}",
            lease=s.lease,
            start_timeout=s.start_timeout,
            misfire_grace=30.0,
            seam=SoakSeam(),
        )
        self.pruner = Pruner(world.store.db)
        self.alive = True
        self.pending: list[Claim] = []
        self.next_housekeeping = world.clock()
        self.started_at = world.clock()
        self.catch_up = catch_up

    def kill(self) -> None:
        """kill -9: claims not yet published stay claimed until their lease runs out."""
        self.alive = False
        self.claimer.close()

    def monotonic(self) -> float:
        return (self.world.clock() - self.started_at).total_seconds()

    def tick(self) -> None:
        w = self.world
        try:
            wait = self._tick()
        except SQLAlchemyError:
            w.report.beat_errors += 1
            wait = 1.0
        w.later(max(wait, 0.05), "beat_wake", self.name)

    def _tick(self) -> float:
        w = self.world
        now = w.clock()
        if now >= self.next_housekeeping:
            self.housekeeping()
        if self.pending and not self.publish(self.claimer.recheck(self.pending)):
            return 1.0
        if not w.claiming:
            return w.s.poll
        db_now, earliest = self.claimer.peek()
        if earliest is None or earliest > db_now:
            wait = w.s.poll if earliest is None else (earliest - db_now).total_seconds()
            return min(w.s.poll, wait, (self.next_housekeeping - now).total_seconds())
        started = time.perf_counter()
        result = self.claimer.claim_due()
        spent = time.perf_counter() - started
        w.report.claim_seconds.append(spent)
        if self.catch_up:
            w.report.catch_up_claims.append(spent)
            self.catch_up = False
        if result.claims and not self.publish(result.claims):
            return 1.0
        return 0.0 if result.rows else 0.1

    def housekeeping(self) -> None:
        w = self.world
        self.next_housekeeping = w.clock() + timedelta(seconds=w.s.housekeeping)
        self.claimer.heartbeat(self.started_at)
        w.report.abandoned_by_beat += self.claimer.abandon_silent()
        # As beat does: a CronTask's lost message is sent again (its guard starts one copy);
        # a plain task's is recorded lost (sending it again could run it twice): SoakSeam.
        w.report.redelivered += self.claimer.redeliver_unstarted()
        reclaimed = self.claimer.reclaim_expired()
        w.report.reclaimed += len(reclaimed)
        try:
            step = self.pruner.pace(w.keep, self.monotonic())
        except SQLAlchemyError:
            step = None
        if step is not None:
            w.report.pruned += step.deleted
        if reclaimed:
            self.pending = [*self.pending, *reclaimed]

    def publish(self, claims: list[Claim]) -> bool:
        """Send ``claims``; keep them pending while the broker is down."""
        w = self.world
        if not claims:
            self.pending = []
            return True
        if not w.broker_up:
            self.pending = claims
            return False
        for claim in claims:
            guarded = w.specs[claim.periodic_task_id].guarded
            msg = Message(claim, w.broker_epoch, guarded)
            delay = w.rng.lognormvariate(-1.5, 1.0)
            if w.rng.random() < 0.01:
                delay += w.rng.uniform(30, 300)  # a busy queue
            w.later(delay, "deliver", msg)
        w.report.published += len(claims)
        self.pending = []
        # Every fire's start is watched (SoakSeam): workers record plain starts too.
        self.claimer.mark_published(claims)
        return True


# -- one backend -----------------------------------------------------------------------------


def _no_sync_commit(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("SET synchronous_commit TO off")
    cursor.close()
    dbapi_connection.commit()


def peek_cost(claimer: Claimer, runs_: int = 200) -> float:
    samples = []
    for _ in range(runs_):
        started = time.perf_counter()
        claimer.peek()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def simulate(s: Settings, url: str, backend: str, out: Callable[[str], None] = print) -> Report:
    """Run the month on the database at ``url``; return the figures and the verdict."""
    wall = time.perf_counter()
    start = datetime.fromisoformat(s.start.replace("Z", "+00:00"))
    end = start + timedelta(days=s.days)
    clock = FrozenClock(start)
    store = Store(url, clock=clock)
    if store.engine.dialect.name == "postgresql":
        # The server's fsync per commit is not what the soak measures (a restart here
        # cuts connections; it never crashes the server).
        sa.event.listen(store.engine, "connect", _no_sync_commit)
    store.upgrade()
    world = World(s, store, clock, url)
    rng = random.Random(s.seed)
    try:
        for spec in make_specs(s, rng, start):
            task = store.add(
                spec.name,
                task="soak.guarded" if spec.guarded else "soak.plain",
                timer=spec.timer,
                kind=spec.kind,
                tz=spec.tz,
                misfire_policy=spec.misfire,
                misfire_limit=spec.limit,
                overlap_policy=spec.overlap,
                start_deadline=spec.deadline,
            )
            world.specs[task.id] = spec
        ledger = Ledger(store, clock, start, end)
        world.ledger = ledger
        report = world.report
        report.backend, report.tasks, report.days = backend, s.tasks, s.days
        probe = Claimer(store, "probe")
        report.tick_start_ms = peek_cost(probe) * 1000
        report.rss_start_mb = rss_mb()
        report.expected = ledger.expected_total()
        out(
            f"[{backend}] {s.tasks} tasks, {s.days:g} days from {s.start}, "
            f"{report.expected} fires expected; idle tick {report.tick_start_ms:.2f} ms, "
            f"RSS {report.rss_start_mb:.0f} MB"
        )
        for _ in range(s.workers):
            world.spawn_worker()
        world.start_beat("beat-a")
        if s.faults:
            world.plan_faults(start, end)

        def daily(day: int) -> Callable[[], None]:
            def note() -> None:
                ledger.scan()
                rows = ledger.rows()
                report.ledger_per_day.append((day, rows))
                report.rss_per_day.append((day, rss_mb()))
                out(
                    f"[{backend}] day {day:>3}: ledger {rows:>7} rows, started "
                    f"{ledger.counts.get('started', 0):>7}, pruned {report.pruned:>7}, "
                    f"RSS {rss_mb():.0f} MB, wall {time.perf_counter() - wall:.0f}s"
                )

            return note

        for day in range(1, math.ceil(s.days) + 1):
            world.at(min(end, start + timedelta(days=day)), "day", daily(day))
        # The ledger is read hourly, before the pruner (days later) could take a row away.
        cursor = start
        while cursor < end:
            cursor = min(end, cursor + timedelta(hours=1))
            world.run(cursor)
            ledger.scan()
        # The end: every fault heals, beats claim up to the end, then nothing new is
        # claimed and in-flight fires get the drain time to end.
        world.heal()
        world.run(end)
        world.claiming = False
        world.run(end + timedelta(seconds=s.drain))
        ledger.scan()
        report.tick_end_ms = peek_cost(probe) * 1000
        report.rss_end_mb = rss_mb()
        ledger.finish(report)
        probe.close()
        for beat in world.beats.values():
            beat.claimer.close()
        report.wall_seconds = time.perf_counter() - wall
        report.judge(s)
        return report
    finally:
        store.close()


@contextmanager
def database(backend: str) -> Iterator[str]:
    if backend == "sqlite":
        # tmpfs when there is one: the soak measures the store's logic, not the disk's fsync.
        shm = Path("/dev/shm")
        where = str(shm) if shm.is_dir() else None
        with tempfile.TemporaryDirectory(prefix="cronstore-month-", dir=where) as tmp:
            yield f"sqlite:///{Path(tmp) / 'month.sqlite'}"
    else:
        with scratch_database(ADMIN_URLS[backend], prefix="cronstore_month") as scratch:
            yield scratch.url


def main(argv: list[str] | None = None) -> int:
    assert __doc__ is not None
    parser = argparse.ArgumentParser(
        prog="python -m harness.month", description=__doc__.split("\n")[0]
    )
    defaults = Settings()
    parser.add_argument(
        "--db", default="sqlite", help="sqlite, postgresql, mysql (comma-separated)"
    )
    parser.add_argument("--tasks", type=int, default=defaults.tasks)
    parser.add_argument("--days", type=float, default=defaults.days)
    parser.add_argument("--start", default=defaults.start, help="first instant (UTC, ISO 8601)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--history-days", type=float, default=defaults.history_days)
    parser.add_argument("--housekeeping", type=float, default=defaults.housekeeping)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--no-faults", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the reports as JSON here")
    args = parser.parse_args(argv)
    s = Settings(
        tasks=args.tasks,
        days=args.days,
        start=args.start,
        seed=args.seed,
        history_days=args.history_days,
        housekeeping=args.housekeeping,
        workers=args.workers,
        faults=not args.no_faults,
    )
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    reports = []
    for backend in args.db.split(","):
        with database(backend) as url:
            reports.append(simulate(s, url, backend))
        print(reports[-1].render(), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([r.as_dict() for r in reports], indent=2, default=str))
    print()
    print("settings:", json.dumps(asdict(s)))
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
