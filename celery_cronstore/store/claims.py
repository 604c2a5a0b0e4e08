"""Beat's side of the ledger: find due rows, claim each fire once.

One tick (see ``docs/replicas.md``):

1. ``peek``: the database clock and the earliest ``next_run`` (one indexed look-up).
2. ``claim_due``: in one short transaction, lock due rows (``FOR UPDATE SKIP LOCKED``
   where the dialect has it; SQLite serializes writers with ``BEGIN IMMEDIATE``), ask
   :func:`celery_cronstore.policy.plan` what becomes of each, and write it: ledger rows
   (unique per task and fire time) and each row's new ``next_run`` (``store.batch``).
3. The scheduler publishes each claim under its deterministic task id.
4. ``mark_published``, fenced on claimer and attempt (``store.marks``); lapsed claims are
   taken over and published again, same id (``store.takeover``); fires that went quiet
   are settled (``store.inflight``).

:class:`Claimer` is the claim transaction itself, and the one object beat holds: the
rest of its ledger work is done by parts it builds over the same
:class:`~celery_cronstore.store.db.Database` (:class:`~celery_cronstore.store.look.Look`,
:class:`~celery_cronstore.store.marks.Marks`,
:class:`~celery_cronstore.store.takeover.TakeOver`,
:class:`~celery_cronstore.store.inflight.InFlight`,
:class:`~celery_cronstore.store.heartbeat.BeatHeartbeat`), each reached through a method
of the same name. What it needs to know about Celery tasks it asks one
:class:`~celery_cronstore.store.seam.TaskSeam`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from celery_cronstore import faults, policy
from celery_cronstore.errors import (
    StoreUnavailableError,
    TaskNotFoundError,
    TimerError,
    TimerSearchError,
)
from celery_cronstore.policy.exclusions import Calendar, ExclusionError
from celery_cronstore.records import EPOCH, Claim, PeriodicTask
from celery_cronstore.states import FireState
from celery_cronstore.store import audit, idle
from celery_cronstore.store.batch import Batch, Conflict, Item, as_of, write_ledger, write_rows
from celery_cronstore.store.calendars import Calendars
from celery_cronstore.store.heartbeat import BeatHeartbeat
from celery_cronstore.store.inflight import InFlight
from celery_cronstore.store.look import PEEK_REUSE, Look
from celery_cronstore.store.marks import Marks
from celery_cronstore.store.overlap import mark_replaced, release_buffered, running
from celery_cronstore.store.pause import resume_in
from celery_cronstore.store.peers import PeerGuard
from celery_cronstore.store.refusal import SendCheck, timer_or_none
from celery_cronstore.store.restore import Restored, restore
from celery_cronstore.store.rows import read_task, to_task
from celery_cronstore.store.schema import fire, periodic_task
from celery_cronstore.store.seam import NullSeam, TaskSeam
from celery_cronstore.store.store import Store
from celery_cronstore.store.takeover import TakeOver

__all__ = ["PEEK_REUSE", "Claimer", "TickResult"]

logger = logging.getLogger("celery.beat")

_PT = periodic_task.c
_F = fire.c


@dataclass(frozen=True)
class TickResult:
    """What one ``claim_due`` call did."""

    now: datetime
    claims: list[Claim]
    rows: int
    errors: list[tuple[str, str]]  # (task name, reason) of rows put in error this call
    #: Ledger entries written: (state, task name, fires each stands for), for metrics.
    recorded: list[tuple[str, str, int]] = field(default_factory=list)
    #: Whether the batch lost a race and was rolled back (it is retried at once).
    conflict: bool = False
    #: Celery task ids of fires a newer one replaced (overlap policy ``replace``): revoke.
    revoke: list[str] = field(default_factory=list)
    #: Buffered fires still waiting for the fire before them (overlap ``buffer_one``).
    buffered: int = 0


class Claimer:
    """Claims due fires for one beat process (``node``) in a :class:`Store`.

    ``seam`` answers what only the Celery app knows about a task name (registered?
    do the args fit? will the ledger see it start? may it be published twice?); without
    one (:class:`~celery_cronstore.store.seam.NullSeam`) every name may be sent, no fire
    gets a start lease, and every fire handed back may go out again.
    """

    def __init__(
        self,
        store: Store,
        node: str,
        *,
        lease: float = 30.0,
        batch_size: int = 500,
        misfire_grace: float = 30.0,
        allowlist: tuple[str, ...] = (),
        seam: TaskSeam | None = None,
        start_timeout: float | None = None,
        max_redeliveries: int = 3,
        hold: bool = False,
    ) -> None:
        self.store = store
        self.db = db = store.db
        self.node = node
        self.lease = timedelta(seconds=lease)
        self.batch_size = batch_size
        self.misfire_grace = timedelta(seconds=misfire_grace)
        self.allowlist = allowlist
        self.seam: TaskSeam = seam if seam is not None else NullSeam()
        #: Seconds a watched published fire may wait for its start before it is
        #: published again (``None``: never), and how often that may happen.
        self.start_timeout = start_timeout
        self.max_redeliveries = max_redeliveries
        self.check = SendCheck(allowlist, self.seam)
        #: Imported tasks their old scheduler still fires (same database) are refused.
        self.peers = PeerGuard()
        self.beats = BeatHeartbeat(db, node)
        self.look = Look(db, node, self.beats, hold=hold)
        self.marks = Marks(db, node, self.seam, self.look, start_timeout=start_timeout)
        self.takeover = TakeOver(
            db,
            node,
            self.check,
            lease=self.lease,
            batch_size=batch_size,
            start_timeout=start_timeout,
        )
        self.inflight = InFlight(
            db,
            self.seam,
            batch_size=batch_size,
            start_timeout=start_timeout,
            max_redeliveries=max_redeliveries,
        )
        #: The exclusion calendars of the claim transaction under way (read when needed).
        self._calendar_cache: dict[str, Calendar] | None = None

    # -- the parts' work, under the names beat and the tests call ----------------------------

    def close(self) -> None:
        """Close the held connection, if any (idempotent)."""
        self.look.close()

    def peek(self) -> tuple[datetime, datetime | None]:
        """Return (database now, earliest planned fire or ``None``): :meth:`Look.peek`."""
        return self.look.peek()

    def count_due(self, until: datetime, cap: int) -> int:
        """Return how many enabled rows fall due by ``until``: :meth:`Look.count_due`."""
        return self.look.count_due(until, cap)

    def enabled_among(self, ids: list[int]) -> set[int]:
        """Return which periodic tasks ``ids`` are enabled: :meth:`Look.enabled_among`."""
        return self.look.enabled_among(ids)

    def chores(
        self,
        started_at: datetime,
        stalled_since: datetime | None = None,
        clock_offset: float | None = None,
    ) -> idle.Chores:
        """Heartbeat and say which lost work waits: :meth:`Look.chores`."""
        return self.look.chores(started_at, stalled_since, clock_offset)

    def heartbeat(
        self,
        started_at: datetime,
        stalled_since: datetime | None = None,
        clock_offset: float | None = None,
        *,
        firing: bool = True,
    ) -> datetime:
        """Record that this beat ticked: :meth:`BeatHeartbeat.heartbeat`."""
        return self.beats.heartbeat(started_at, stalled_since, clock_offset, firing=firing)

    def mark_published(
        self,
        claims: list[Claim],
        ago: Mapping[str, float] | None = None,
    ) -> int:
        """Mark claims published, fenced on node and attempt: :meth:`Marks.mark_published`."""
        return self.marks.mark_published(claims, ago)

    def restore(self, sent: list[Claim], keep: timedelta | None = None) -> Restored:
        """After a failover: make the ledger hold the fires this beat sent lately as sent
        (:func:`~celery_cronstore.store.restore.restore`; ``keep``: the ledger's
        retention), and mark them published, with no start lease: a fire whose start
        record was lost with its claim is never sent again."""
        restored = restore(self.db, self.node, sent, keep)
        self.marks.mark_published(restored.to_mark, watch=False)
        return restored

    def mark_sending(self, claims: list[Claim], *, paused_ok: bool = False) -> list[Claim]:
        """Record claims as being sent; return those to send: :meth:`Marks.mark_sending`."""
        return self.marks.mark_sending(claims, paused_ok=paused_ok)

    def mark_maybe_sent(self, claims: list[Claim]) -> int:
        """Record fires the broker may have taken: :meth:`Marks.mark_maybe_sent`."""
        return self.marks.mark_maybe_sent(claims)

    def release(self, claims: list[Claim]) -> int:
        """Put back claims that surely did not go: :meth:`Marks.release`."""
        return self.marks.release(claims)

    def hand_back(self, claims: list[Claim]) -> int:
        """Hand unsent claims to the next beat at once: :meth:`Marks.hand_back`."""
        return self.marks.hand_back(claims)

    def drop(self, failed: list[tuple[Claim, str]]) -> int:
        """Record claims that could not be sent, and their tasks: :meth:`Marks.drop`."""
        return self.marks.drop(failed)

    def recheck(self, claims: list[Claim]) -> list[Claim]:
        """Return the claims whose task is still enabled, drop the rest: :meth:`Marks.recheck`."""
        return self.marks.recheck(claims)

    def reclaim_expired(self) -> list[Claim]:
        """Take over lapsed claims: :meth:`TakeOver.reclaim_expired`."""
        return self.takeover.reclaim_expired()

    def abandon_silent(self) -> int:
        """Settle started fires whose worker went silent: :meth:`InFlight.abandon_silent`."""
        return self.inflight.abandon_silent()

    def redeliver_unstarted(self) -> int:
        """Hand back published fires never started: :meth:`InFlight.redeliver_unstarted`."""
        return self.inflight.redeliver_unstarted()

    # -- claiming -------------------------------------------------------------------------

    def claim_due(self, ahead: timedelta = timedelta(0), *, sending: bool = False) -> TickResult:
        """Claim one batch of due fires in one transaction; return what must be published.

        ``ahead``: also claim the fires due within that much of now, each planned as of its
        own fire time (beat publishes them at that time: its claim's transaction is done
        before). The claims come in fire-time order.

        ``sending``: the caller sends the fires due now at once; those a second publish
        could run twice (not ``redeliverable``) are written ``sending`` by this claim,
        whose row locks are their re-check (``policy.plan``). Fires claimed ahead stay
        ``claimed`` until ``Marks.mark_sending`` re-checks them when they go.

        A batch that lost a race with another writer is rolled back whole and reported as
        rows seen with nothing claimed, so the caller looks again at once.
        """
        try:
            return self._claim_batch(ahead, sending)
        except Conflict as exc:
            logger.info("beat: %s; looking again", exc)
            return TickResult(self.db.now(), [], 1, [], conflict=True)

    def problem(
        self, task: PeriodicTask, row: sa.Row[Any], problems: list[str] | None = None
    ) -> str | None:
        """Return why ``task`` (read as ``row``, its JSON ``problems`` read with it if
        given) must not be planned, or ``None`` if it may.

        The refusals of a send (:class:`~celery_cronstore.store.refusal.SendCheck`) and a
        timer that does not parse; a reason names the fix.
        """
        refused = self.check.refusal(task, row, problems)
        if refused is not None:
            return refused
        try:
            policy.timer_of(task)
        except (TimerError, ValueError) as exc:
            return str(exc)
        return None

    def claim_now(self, name: str) -> Claim:
        """Claim an extra fire of task ``name`` at the database's now (``run-now``).

        The fire gets its own ledger row and task id like any other; the caller publishes
        it and calls :meth:`mark_published`. Works for disabled tasks too.
        """
        with self.db.begin() as conn:
            now = self.db.now(conn)
            row = conn.execute(sa.select(periodic_task).where(_PT.name == name)).first()
            if row is None:
                raise TaskNotFoundError(f"no periodic task named {name!r}")
            task = to_task(row)
            refused = self.check.refusal(task, row)
            if refused is not None:
                raise ValueError(f"periodic task {name!r} cannot be sent: {refused}")
            entry = policy.Entry(
                periodic_task_id=task.id,
                fire_time=now,
                task_id=policy.fire_task_id(task.id, task.name, now),
                state=FireState.CLAIMED,
                reason=policy.RUN_NOW_REASON,
                claimed_by=self.node,
                lease_until=now + self.lease,
                claimed_at=now,
            )
            conn.execute(sa.insert(fire).values(**entry.row()))
            audit.record(conn, self.store.actor, "run", name, at=now, detail=entry.task_id)
            claim = policy.make_claim(task, now, entry.task_id, entry.attempts, timer_or_none(task))
            return replace(claim, requested="run-now")

    def replan_errors(self) -> int:
        """Give every enabled task in error another look on the next tick; return how many.

        Beat calls this at start: a deploy may have fixed what put them in error (a task
        now registered or allowed). Rows still wrong go back in error, with the reason.
        """
        with self.db.begin() as conn:
            result = conn.execute(
                sa.update(periodic_task)
                .where(_PT.enabled == sa.true(), _PT.error.is_not(None), _PT.next_run.is_(None))
                .values(next_run=EPOCH, version=_PT.version + 1)
            )
            return int(result.rowcount)

    def _claim_batch(self, ahead: timedelta, sending: bool) -> TickResult:
        self._calendar_cache = None  # a calendar edited since the last batch counts now
        with self.db.begin() as conn:
            now = self.db.now(conn)
            query = (
                sa.select(periodic_task)
                .where(_PT.enabled == sa.true(), _PT.next_run <= now + ahead)
                .order_by(_PT.next_run)
                .limit(self.batch_size)
            )
            with self.db.in_index_order(conn):
                rows = conn.execute(self.db.locked(query, skip_locked=True)).all()
            batch = Batch()
            for row in rows:
                self._plan_row(conn, row, now, batch, sending)
            write_ledger(conn, batch, now, self._plan)
            write_rows(conn, batch)
            replaced = mark_replaced(conn, batch.replaced(), now)
            released, waiting = release_buffered(
                self.db, conn, now, node=self.node, lease=self.lease
            )
            faults.hit("before_claim_commit")
        claims = sorted(batch.claims() + released, key=lambda c: c.fire_time)
        recorded = batch.recorded() + [(FireState.REPLACED, name, 1) for _, name in replaced]
        revoke = [task_id for task_id, _ in replaced]
        return TickResult(
            now, claims, len(rows), batch.errors, recorded, revoke=revoke, buffered=waiting
        )

    def _plan(
        self,
        conn: sa.Connection,
        task: PeriodicTask,
        now: datetime,
        taken: frozenset[datetime] = frozenset(),
        sending: bool = False,
    ) -> policy.Plan:
        return policy.plan(
            task,
            policy.timer_of(task),
            now,
            lambda: running(conn, task.id, now, published=task.overlap_policy in _WATCHING),
            node=self.node,
            lease=self.lease,
            grace=self.misfire_grace,
            taken=taken,
            calendars=self._calendars(conn) if task.exclude else None,
            sending=sending,
        )

    def _calendars(self, conn: sa.Connection) -> dict[str, Calendar]:
        """The exclusion calendars, read once per claim transaction that needs them."""
        if self._calendar_cache is None:
            self._calendar_cache = Calendars(self.db, self.store.actor).load(conn)
        return self._calendar_cache

    def _plan_row(
        self, conn: sa.Connection, row: sa.Row[Any], now: datetime, batch: Batch, sending: bool
    ) -> None:
        """Plan one due row (``sending``: :meth:`claim_due`'s); whatever is wrong with it,
        only this row is affected."""
        try:
            task, problems = read_task(row)
            at = as_of(task, now)
            if task.paused_at is not None:  # planned for its resume: resume it, or wait
                if task.paused_until is None or task.paused_until > at:
                    batch.items.append(Item(task, policy.Plan(policy.RowUpdate(task.paused_until))))
                    return
                row = resume_in(conn, task, at)
                task, problems = read_task(row)
                logger.info("beat: periodic task %r resumed (its pause ended)", task.name)
            reason = self.problem(task, row, problems)
            if reason is None:
                now_sent = sending and at == now and not self.seam.redeliverable(task.task)
                planned = self._plan(conn, task, at, sending=now_sent)
                held = self.peers.refusal(conn, task, now)
                if held is not None:  # its old scheduler still fires it: record, send none
                    planned = policy.withheld(planned, held)
                batch.items.append(Item(task, planned))
                return
        except (SQLAlchemyError, StoreUnavailableError):  # the database's, not the row's
            raise
        except TimerSearchError as exc:  # a timer that cannot answer near this instant
            past = policy.plan_past(
                task, policy.timer_of(task), at, exc, node=self.node, lease=self.lease
            )
            if past is not None:
                logger.warning("beat: periodic task %r: %s; planned past it", task.name, exc)
                batch.items.append(Item(task, past))
                return
            reason = str(exc)
        except (TimerError, ExclusionError) as exc:
            reason = str(exc)
        except Exception as exc:  # one hostile row must never stop every other task
            logger.warning("beat: cannot plan periodic task row %r", row.id, exc_info=True)
            reason = f"cannot plan this row ({type(exc).__name__}: {exc})"
        batch.fail(row, reason, self.node)


#: The overlap policies for which a published fire waiting for its start is in flight.
_WATCHING = ("buffer_one", "replace")
