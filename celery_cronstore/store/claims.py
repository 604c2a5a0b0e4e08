"""Beat's side of the ledger: find due rows, claim each fire once, mark it published.

One tick (see ``docs/replicas.md``):

1. ``peek``: the database clock and the earliest ``next_run`` (one indexed look-up).
2. ``claim_due``: in one short transaction, lock due rows (``FOR UPDATE SKIP LOCKED``
   where the dialect has it; SQLite serializes writers with ``BEGIN IMMEDIATE``), apply
   the misfire and overlap policies, insert ledger rows (unique per task and fire time)
   and advance ``next_run`` to the first grid point after the database's now.
3. The scheduler publishes each claim under its deterministic task id.
4. ``mark_published``, fenced on claimer and attempt. Claims whose lease ran out without
   being marked are re-claimed by ``reclaim_expired`` and published again, same id.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from celery_cronstore import faults
from celery_cronstore.errors import TaskNotFoundError, TimerError
from celery_cronstore.store.engine import as_utc, now_expression
from celery_cronstore.store.records import Claim, PeriodicTask
from celery_cronstore.store.rows import first_fire, json_problems, to_task
from celery_cronstore.store.schema import beat, fire, periodic_task
from celery_cronstore.store.store import Store
from celery_cronstore.store.types import EPOCH
from celery_cronstore.timers import Timer, parse_timer

__all__ = ["Claimer", "TickResult", "fire_task_id"]

logger = logging.getLogger("celery.beat")

_PT = periodic_task.c
_F = fire.c
#: Namespace of the deterministic Celery task ids (uuid5 of task identity + fire time).
_NAMESPACE = uuid.UUID("6f6b3d1e-4a43-4c8e-9d53-2f7d8a1c0b5e")
#: Most grid points walked to count a backlog of missed fires.
_BACKLOG_CAP = 100_000
#: In-flight ledger states that make the overlap policy ``skip`` hold back a fire.
_RUNNING = ("claimed", "started", "retrying")
#: A run that started this long ago without finishing no longer blocks (worker died).
_STALE_RUNNING = timedelta(hours=6)


def fire_task_id(periodic_task_id: int, name: str, fire_time: datetime) -> str:
    """Return the Celery task id of one fire: the same for every publish of it."""
    return str(uuid.uuid5(_NAMESPACE, f"{periodic_task_id}/{name}/{fire_time.isoformat()}"))


@functools.lru_cache(maxsize=4096)
def _timer(kind: str, expression: str, tz: str) -> Timer:
    return _Memo(parse_timer(expression, kind=kind, tz=tz))


class _Memo(Timer):
    """A timer whose ``next_after`` answers are memoized (timers are pure).

    Many rows share a timer and fall due at the same instant (every ``*/5`` task at :05),
    and one claim asks the same question up to three times: answer it once.
    """

    def __init__(self, timer: Timer) -> None:
        self.inner = timer
        self.kind = timer.kind
        self.tz_name = timer.tz_name
        self._next = functools.lru_cache(maxsize=256)(timer.next_after)

    def next_after(self, after: datetime) -> datetime | None:
        return self._next(after)

    def __str__(self) -> str:
        return str(self.inner)

    def describe(self) -> str:
        return self.inner.describe()


@dataclass(frozen=True)
class TickResult:
    """What one ``claim_due`` call did."""

    now: datetime
    claims: list[Claim]
    rows: int
    recorded: int  # ledger rows written that will not be published (missed/expired/skipped)
    errors: list[tuple[str, str]]  # (task name, reason) of rows put in error this call


class Claimer:
    """Claims due fires for one beat process (``node``) in a :class:`Store`."""

    def __init__(
        self,
        store: Store,
        node: str,
        *,
        lease: float = 30.0,
        batch_size: int = 500,
        misfire_grace: float = 30.0,
        allowlist: tuple[str, ...] = (),
        task_check: Callable[[str], str | None] | None = None,
        start_timeout: float | None = None,
        max_redeliveries: int = 3,
    ) -> None:
        self.store = store
        self.node = node
        self.lease = timedelta(seconds=lease)
        self.batch_size = batch_size
        self.misfire_grace = timedelta(seconds=misfire_grace)
        self.allowlist = allowlist
        #: Seconds a watched published fire may wait for its start before it is
        #: published again (``None``: never), and how often that may happen.
        self.start_timeout = start_timeout
        self.max_redeliveries = max_redeliveries
        #: Extra rule on task names (beat: "is it registered?"); returns a refusal reason.
        self.task_check = task_check

    # -- the idle path --------------------------------------------------------------------

    def peek(self) -> tuple[datetime, datetime | None]:
        """Return (database now, earliest planned fire of any enabled task or ``None``)."""
        earliest = (
            sa.select(sa.func.min(_PT.next_run)).where(_PT.enabled == sa.true()).scalar_subquery()
        )
        clock = now_expression(self.store.engine.dialect.name, self.store.clock)
        with self.store.engine.connect() as conn:
            if clock is None:  # SQLite or an injected clock: the host's notion of now
                return self.store.now(conn), conn.execute(sa.select(earliest)).scalar_one()
            # One round trip for both: the idle tick is this statement and nothing else.
            row = conn.execute(sa.select(clock, earliest)).one()
        return as_utc(row[0]), row[1]

    # -- claiming -------------------------------------------------------------------------

    def claim_due(self) -> TickResult:
        """Claim one batch of due fires in one transaction; return what must be published.

        A batch that lost a race with another writer is rolled back whole and reported as
        rows seen with nothing claimed, so the caller looks again at once.
        """
        try:
            return self._claim_batch()
        except _Conflict as exc:
            logger.info("beat: %s; looking again", exc)
            return TickResult(self.store.now(), [], 1, 0, [])

    def _claim_batch(self) -> TickResult:
        with self.store.begin() as conn:
            now = self.store.now(conn)
            query = (
                sa.select(periodic_task)
                .where(_PT.enabled == sa.true(), _PT.next_run <= now)
                .order_by(_PT.next_run)
                .limit(self.batch_size)
            )
            if self.store.dialect.skip_locked:
                query = query.with_for_update(skip_locked=True)
            elif self.store.dialect.name != "sqlite":
                query = query.with_for_update()
            rows = conn.execute(query).all()
            plan = _Plan(now)
            for row in rows:
                self._plan_row(conn, row, plan)
            self._write(conn, plan)
            faults.hit("before_claim_commit")
        return TickResult(
            now, plan.claims, len(rows), len(plan.ledger) - len(plan.claims), plan.errors
        )

    def _plan_row(self, conn: sa.Connection, row: sa.Row[Any], plan: _Plan) -> None:
        mark = plan.mark()
        try:
            self._plan_checked(conn, row, plan)
        except (SQLAlchemyError, _Conflict):
            raise
        except TimerError as exc:  # e.g. a calendar search that gives up where systemd does
            plan.rollback(mark)
            plan.fail(row, str(exc))
        except Exception as exc:  # one hostile row must never stop every other task
            plan.rollback(mark)
            logger.warning("beat: cannot plan periodic task row %r", row.id, exc_info=True)
            plan.fail(row, f"cannot plan this row ({type(exc).__name__}: {exc})")

    def problem(self, task: PeriodicTask, row: sa.Row[Any] | None = None) -> str | None:
        """Return why ``task`` (from ``row``) must not be sent, or ``None`` if it may.

        Checks the row's JSON columns and Celery options, the timer, the allowlist and
        ``task_check``; a reason names the fix.
        """
        problems = json_problems(row) if row is not None else []
        if problems:
            return "; ".join(problems)
        try:
            _timer(task.timer_kind, task.timer, task.tz)
        except (TimerError, ValueError) as exc:
            return str(exc)
        if not self._allowed(task.task):
            return f"task {task.task!r} is not in cronstore_task_allowlist"
        if self.task_check is not None:
            return self.task_check(task.task)
        return None

    def _plan_checked(self, conn: sa.Connection, row: sa.Row[Any], plan: _Plan) -> None:
        task = to_task(row)
        reason = self.problem(task, row)
        if reason is not None:
            plan.fail(row, reason)
            return
        timer = _timer(task.timer_kind, task.timer, task.tz)
        now = plan.now
        if task.next_run is None or task.next_run == EPOCH:
            # Added or re-timed by raw SQL: plan only, nothing was due yet.
            plan.update(task, next_run=first_fire(timer, now, task.last_fire), error=None)
            return
        limit = max(task.misfire_limit, 1)
        first, times, count = _backlog(timer, task.next_run, now, keep=limit + 1)
        publish = _choose(task, times, now, self.misfire_grace, limit)
        missed = count - len(publish)
        if missed > 0:
            last_missed = times[-len(publish) - 1]
            plan.ledger.append(self._missed(task, first, last_missed, missed, count))
        running = self._running(conn, task.id, now) if task.overlap_policy == "skip" else None
        published = 0
        for when in publish:
            entry = self._entry(task, when, now)
            if task.start_deadline is not None and now > when + timedelta(
                seconds=task.start_deadline
            ):
                entry.update(
                    state="expired",
                    reason=(
                        f"not published: {(now - when).total_seconds():.1f}s late, past the "
                        f"starting deadline of {task.start_deadline:g}s"
                    ),
                )
            elif running is not None:
                entry.update(
                    state="skipped",
                    reason=(
                        f"not published: fire {running[0].isoformat()} is still {running[1]} "
                        "(overlap policy skip)"
                    ),
                )
            else:
                plan.claims.append(self._claim(task, when, entry, timer))
                published += 1
            plan.ledger.append(entry)
        plan.update(
            task,
            next_run=timer.next_after(now),
            error=None,
            last_fire=times[-1],
            runs=published,
        )

    def _allowed(self, name: str) -> bool:
        if not self.allowlist:
            return True
        for allowed in self.allowlist:
            prefix = allowed.rstrip("*")
            if name == allowed or (
                (allowed != prefix or allowed.endswith(".")) and (name.startswith(prefix))
            ):
                return True
        return False

    def _running(
        self, conn: sa.Connection, task_id: int, now: datetime
    ) -> tuple[datetime, str] | None:
        since = now - _STALE_RUNNING
        query = (
            sa.select(_F.fire_time, _F.state)
            .where(
                _F.periodic_task_id == task_id,
                _F.state.in_(_RUNNING),
                sa.func.coalesce(_F.started_at, _F.claimed_at) > since,
            )
            .order_by(_F.fire_time.desc())
            .limit(1)
        )
        row = conn.execute(query).first()
        return None if row is None else (row.fire_time, row.state)

    def _entry(self, task: PeriodicTask, when: datetime, now: datetime) -> dict[str, Any]:
        return {
            "periodic_task_id": task.id,
            "fire_time": when,
            "fire_until": None,
            "fire_count": 1,
            "task_id": fire_task_id(task.id, task.name, when),
            "state": "claimed",
            "claimed_by": self.node,
            "lease_until": now + self.lease,
            "attempts": 1,
            "claimed_at": now,
            "reason": None,
        }

    def _missed(
        self, task: PeriodicTask, first: datetime, last: datetime, missed: int, count: int
    ) -> dict[str, Any]:
        capped = " at least" if count >= _BACKLOG_CAP else ""
        return {
            "periodic_task_id": task.id,
            "fire_time": first,
            "fire_until": last if last != first else None,
            "fire_count": missed,
            "task_id": fire_task_id(task.id, task.name, first),
            "state": "missed",
            "claimed_by": self.node,
            "lease_until": None,
            "attempts": 0,
            "claimed_at": None,
            "reason": (
                f"{capped}{missed} fire(s) from {first.isoformat()} to {last.isoformat()} not "
                f"published: beat was not running or fell behind (misfire policy "
                f"{task.misfire_policy})"
            ).strip(),
        }

    @staticmethod
    def _claim(
        task: PeriodicTask, when: datetime, entry: dict[str, Any], timer: Timer | None
    ) -> Claim:
        expires = None
        if task.start_deadline is not None:
            expires = when + timedelta(seconds=task.start_deadline)
        interval = None
        if timer is not None:
            following = timer.next_after(when)
            interval = None if following is None else (following - when).total_seconds()
        return Claim(
            fire_id=0,
            periodic_task_id=task.id,
            name=task.name,
            task=task.task,
            args=task.args,
            kwargs=task.kwargs,
            options=task.options,
            fire_time=when,
            task_id=entry["task_id"],
            attempt=entry["attempts"],
            expires=expires,
            interval=interval,
        )

    def _write(self, conn: sa.Connection, plan: _Plan) -> None:
        if plan.updates:
            stmt = (
                sa.update(periodic_task)
                .where(_PT.id == sa.bindparam("b_id"), _PT.version == sa.bindparam("b_version"))
                .values(
                    next_run=sa.bindparam("b_next"),
                    error=sa.bindparam("b_error"),
                    last_fire=sa.func.coalesce(
                        sa.bindparam("b_last", type_=_PT.last_fire.type), _PT.last_fire
                    ),
                    total_run_count=_PT.total_run_count + sa.bindparam("b_runs"),
                    version=_PT.version + 1,
                )
            )
            result = conn.execute(stmt, plan.updates)
            if result.rowcount not in (-1, len(plan.updates)):
                # Another writer changed a row we hold: give the whole batch back.
                raise _Conflict("a due row changed while it was being claimed")
        if plan.ledger:
            conn.execute(sa.insert(fire), plan.ledger)

    # -- after publishing -----------------------------------------------------------------

    def mark_published(
        self, claims: list[Claim], watched: Callable[[Claim], bool] | None = None
    ) -> int:
        """Mark claims as published, fenced on this node and each claim's attempt.

        A claim ``watched`` says yes to (beat: a CronTask, whose start the ledger records)
        gets a *start lease*: if it has not started ``start_timeout`` seconds from now,
        :meth:`redeliver_unstarted` hands it back for another publish (at most
        ``max_redeliveries`` times).
        """
        if not claims:
            return 0
        groups: dict[tuple[int, bool], list[str]] = {}
        for claim in claims:
            watch = (
                watched is not None
                and self.start_timeout is not None
                and claim.attempt <= self.max_redeliveries
                and watched(claim)
            )
            groups.setdefault((claim.attempt, watch), []).append(claim.task_id)
        marked = 0
        with self.store.begin() as conn:
            now = self.store.now(conn)
            for (attempt, watch), ids in groups.items():
                lease = now + timedelta(seconds=self.start_timeout or 0) if watch else None
                for start in range(0, len(ids), 1000):
                    result = conn.execute(
                        sa.update(fire)
                        .where(
                            _F.task_id.in_(ids[start : start + 1000]),
                            _F.state == "claimed",
                            _F.claimed_by == self.node,
                            _F.attempts == attempt,
                        )
                        .values(state="published", published_at=now, lease_until=lease)
                    )
                    marked += result.rowcount
        return marked

    def redeliver_unstarted(self) -> int:
        """Hand back published fires whose start lease ran out without a start.

        A message can be lost after the broker took it (Redis: popped by a worker whose
        connection dropped before the message arrived). Such a fire is put back in state
        ``claimed`` with an expired lease, so :meth:`reclaim_expired` publishes it again
        under the same task id; if the first message does turn up, the CronTask guard
        starts only one of them. Return how many fires were handed back.
        """
        with self.store.begin() as conn:
            now = self.store.now(conn)
            result = conn.execute(
                sa.update(fire)
                .where(_F.state == "published", _F.lease_until < now)
                .values(state="claimed", lease_until=now - timedelta(microseconds=1))
            )
            return max(result.rowcount, 0)

    def reclaim_expired(self) -> list[Claim]:
        """Take over claims whose lease ran out unpublished; return them to publish again."""
        with self.store.begin() as conn:
            now = self.store.now(conn)
            query = (
                sa.select(fire, periodic_task)
                .join_from(fire, periodic_task, _F.periodic_task_id == _PT.id)
                .where(_F.state == "claimed", _F.lease_until < now)
                .order_by(_F.lease_until)
                .limit(self.batch_size)
            )
            if self.store.dialect.skip_locked:
                query = query.with_for_update(skip_locked=True, of=fire)
            claims: list[Claim] = []
            for row in conn.execute(query).all():
                m = row._mapping
                task = to_task(row)
                entry = {"task_id": m[_F.task_id], "attempts": m[_F.attempts] + 1}
                try:
                    timer: Timer | None = _timer(task.timer_kind, task.timer, task.tz)
                except (TimerError, ValueError):
                    timer = None
                claim = self._claim(task, m[_F.fire_time], entry, timer)
                values: dict[str, Any] = {
                    "attempts": claim.attempt,
                    "claimed_by": self.node,
                    "lease_until": now + self.lease,
                }
                # The row may have been edited since the claim: never re-publish what beat
                # would now refuse (another task name, unsafe options).
                refused = self._reclaim_problem(task, row)
                if refused is not None:
                    values.update(
                        state="dropped", lease_until=None, reason=f"not re-published: {refused}"
                    )
                elif claim.expires is not None and now > claim.expires:
                    values.update(
                        state="expired",
                        lease_until=None,
                        reason="publish never completed before the starting deadline",
                    )
                result = conn.execute(
                    sa.update(fire)
                    .where(_F.id == m[_F.id], _F.attempts == m[_F.attempts], _F.state == "claimed")
                    .values(**values)
                )
                if result.rowcount == 1 and "state" not in values:
                    claims.append(claim)
        return claims

    def claim_now(self, name: str) -> Claim:
        """Claim an extra fire of task ``name`` at the database's now (``run-now``).

        The fire gets its own ledger row and task id like any other; the caller publishes
        it and calls :meth:`mark_published`. Works for disabled tasks too.
        """
        with self.store.begin() as conn:
            now = self.store.now(conn)
            row = conn.execute(sa.select(periodic_task).where(_PT.name == name)).first()
            if row is None:
                raise TaskNotFoundError(f"no periodic task named {name!r}")
            task = to_task(row)
            refused = self._reclaim_problem(task, row)
            if refused is not None:
                raise ValueError(f"periodic task {name!r} cannot be sent: {refused}")
            try:
                timer: Timer | None = _timer(task.timer_kind, task.timer, task.tz)
            except (TimerError, ValueError):
                timer = None
            entry = self._entry(task, now, now)
            entry["reason"] = "run-now requested"
            conn.execute(sa.insert(fire).values(**entry))
            return self._claim(task, now, entry, timer)

    def _reclaim_problem(self, task: PeriodicTask, row: sa.Row[Any]) -> str | None:
        """Return why a fire of ``task`` must not be sent (a bad timer does not matter)."""
        problems = json_problems(row)
        if problems:
            return "; ".join(problems)
        if not self._allowed(task.task):
            return f"task {task.task!r} is not in cronstore_task_allowlist"
        return None if self.task_check is None else self.task_check(task.task)

    def replan_errors(self) -> int:
        """Give every enabled task in error another look on the next tick; return how many.

        Beat calls this at start: a deploy may have fixed what put them in error (a task
        now registered or allowed). Rows still wrong go back in error, with the reason.
        """
        with self.store.begin() as conn:
            result = conn.execute(
                sa.update(periodic_task)
                .where(_PT.enabled == sa.true(), _PT.error.is_not(None), _PT.next_run.is_(None))
                .values(next_run=EPOCH, version=_PT.version + 1)
            )
            return int(result.rowcount)

    def heartbeat(self, started_at: datetime) -> datetime:
        """Record that this beat ticked (for ``cronstore health``); return the db time."""
        with self.store.begin() as conn:
            now = self.store.now(conn)
            result = conn.execute(
                sa.update(beat).where(beat.c.node == self.node).values(last_tick=now)
            )
            if result.rowcount == 0:
                conn.execute(
                    sa.insert(beat).values(node=self.node, started_at=started_at, last_tick=now)
                )
        return now


class _Conflict(Exception):
    """A claim transaction lost a race; it was rolled back and will be retried."""


@dataclass
class _Plan:
    now: datetime

    def __post_init__(self) -> None:
        self.claims: list[Claim] = []
        self.ledger: list[dict[str, Any]] = []
        self.updates: list[dict[str, Any]] = []
        self.errors: list[tuple[str, str]] = []

    def mark(self) -> tuple[int, int, int, int]:
        return (len(self.claims), len(self.ledger), len(self.updates), len(self.errors))

    def rollback(self, mark: tuple[int, int, int, int]) -> None:
        """Forget what one row added after ``mark`` (its planning failed half-way)."""
        del self.claims[mark[0] :], self.ledger[mark[1] :]
        del self.updates[mark[2] :], self.errors[mark[3] :]

    def fail(self, row: sa.Row[Any], reason: str) -> None:
        """Put the row in error (no next run) with ``reason``; beat logs it once."""
        m = row._mapping
        self.updates.append(
            {
                "b_id": m["id"],
                "b_version": m["version"],
                "b_next": None,
                "b_error": reason,
                "b_last": None,
                "b_runs": 0,
            }
        )
        self.errors.append((str(m["name"]), reason))

    def update(
        self,
        task: PeriodicTask,
        *,
        next_run: datetime | None,
        error: str | None,
        last_fire: datetime | None = None,
        runs: int = 0,
    ) -> None:
        self.updates.append(
            {
                "b_id": task.id,
                "b_version": task.version,
                "b_next": next_run,
                "b_error": error,
                "b_last": last_fire,
                "b_runs": runs,
            }
        )


def _backlog(
    timer: Timer, first: datetime, now: datetime, *, keep: int
) -> tuple[datetime, list[datetime], int]:
    """Walk the grid from ``first`` to ``now``: (first, the last ``keep`` points, count)."""
    tail: deque[datetime] = deque([first], maxlen=keep)
    count, cursor = 1, first
    while count < _BACKLOG_CAP:
        nxt = timer.next_after(cursor)
        if nxt is None or nxt > now:
            break
        tail.append(nxt)
        count += 1
        cursor = nxt
    return first, list(tail), count


def _choose(
    task: PeriodicTask, times: list[datetime], now: datetime, grace: timedelta, limit: int
) -> list[datetime]:
    """Return the fire times to publish under the task's misfire policy."""
    if task.misfire_policy == "run_all":
        return times[-limit:]
    latest = times[-1]
    if task.misfire_policy == "skip" and now - latest > grace:
        return []
    return [latest]
