"""Beat's ledger work after the claim: mark published, take over lapsed leases, run-now.

:class:`LeaseKeeper` is the half of :class:`~celery_cronstore.store.Claimer` that works
on fires already in the ledger; the claim itself is in ``claims``. Decisions come from
:mod:`celery_cronstore.policy`; this module reads and writes rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from celery_cronstore import policy
from celery_cronstore.errors import TaskNotFoundError, TimerError
from celery_cronstore.records import EPOCH, Claim, PeriodicTask
from celery_cronstore.store.db import Database
from celery_cronstore.store.rows import json_problems, to_task
from celery_cronstore.store.schema import beat, fire, periodic_task
from celery_cronstore.timers import Timer

__all__ = ["LeaseKeeper"]

_PT = periodic_task.c
_F = fire.c
#: Most task ids in one ``IN (...)`` list.
_IN_CHUNK = 1000
#: A started fire without a liveness lease (a worker of an older release) is abandoned
#: only after this long.
_NO_HEARTBEATS = timedelta(hours=6)


#: Seconds: a claim marked published after the fact has its ``published_at`` to this step.
MARK_STEP = 0.01


class LeaseKeeper:
    """Mark, redeliver and take over the fires one beat process (``node``) handles."""

    db: Database
    node: str
    lease: timedelta
    batch_size: int
    allowlist: tuple[str, ...]
    task_check: Callable[[str], str | None] | None
    call_check: Callable[[str, list[Any], dict[str, Any]], str | None] | None
    start_timeout: float | None
    max_redeliveries: int

    def refusal(self, task: PeriodicTask, row: sa.Row[Any]) -> str | None:
        """Return why a fire of ``task`` (read as ``row``) must not be sent, or ``None``."""
        refused = policy.send_refusal(
            task.task, json_problems(row), self.allowlist, self.task_check
        )
        if refused is None and self.call_check is not None:
            refused = self.call_check(task.task, task.args, task.kwargs)
        return refused

    def mark_published(
        self,
        claims: list[Claim],
        watched: Callable[[Claim], bool] | None = None,
        ago: Mapping[str, float] | None = None,
    ) -> int:
        """Mark claims as published, fenced on this node and each claim's attempt.

        A claim ``watched`` says yes to (beat: a fire whose start the ledger will record)
        gets a *start lease*: if it has not started ``start_timeout`` seconds after it was
        published, :meth:`redeliver_unstarted` hands it back for another publish (at most
        ``max_redeliveries`` times) or records it ``lost``. ``ago``: seconds since each
        claim (by task id) was published, when it is marked later (``published_at`` is
        then the store's now less that, to :data:`MARK_STEP`); else it is now.
        """
        if not claims:
            return 0
        groups: dict[tuple[int, bool, int], list[str]] = {}
        for claim in claims:
            watch = watched is not None and self.start_timeout is not None and watched(claim)
            steps = round(ago.get(claim.task_id, 0.0) / MARK_STEP) if ago else 0
            groups.setdefault((claim.attempt, watch, steps), []).append(claim.task_id)
        marked = 0
        with self.db.begin() as conn:
            now = self.db.now(conn)
            for (attempt, watch, steps), ids in groups.items():
                published = now - timedelta(seconds=steps * MARK_STEP)
                lease = published + timedelta(seconds=self.start_timeout or 0) if watch else None
                for start in range(0, len(ids), _IN_CHUNK):
                    result = conn.execute(
                        sa.update(fire)
                        .where(
                            _F.task_id.in_(ids[start : start + _IN_CHUNK]),
                            _F.state == "claimed",
                            _F.claimed_by == self.node,
                            _F.attempts == attempt,
                        )
                        .values(state="published", published_at=published, lease_until=lease)
                    )
                    marked += result.rowcount
        return marked

    def drop(self, failed: list[tuple[Claim, str]]) -> int:
        """Record claims that could not be sent (not for a broker outage) and their tasks.

        Each fire becomes ``dropped`` with the reason, and its task goes in error with
        the same reason (no next run until an edit fixes it): one bad row never holds
        back the fires of the others. Return how many fires were recorded.
        """
        dropped = 0
        with self.db.begin() as conn:
            now = self.db.now(conn)
            for claim, reason in failed:
                result = conn.execute(
                    sa.update(fire)
                    .where(
                        _F.task_id == claim.task_id,
                        _F.state == "claimed",
                        _F.claimed_by == self.node,
                    )
                    .values(
                        state="dropped",
                        reason=f"not published: {reason}",
                        lease_until=None,
                        finished_at=now,
                    )
                )
                dropped += result.rowcount
                conn.execute(
                    sa.update(periodic_task)
                    .where(_PT.id == claim.periodic_task_id)
                    .values(error=reason, next_run=None, version=_PT.version + 1)
                )
        return dropped

    def recheck(self, claims: list[Claim]) -> list[Claim]:
        """Return the claims whose task still exists and is enabled; drop the others.

        Beat calls this before publishing claims that waited (a broker outage): a task
        disabled or removed in the meantime must not run. Each dropped fire is recorded
        with the reason.
        """
        if not claims:
            return []
        enabled = self.enabled_among(sorted({c.periodic_task_id for c in claims}))
        stale = [c.task_id for c in claims if c.periodic_task_id not in enabled]
        if not stale:
            return list(claims)
        with self.db.begin() as conn:
            now = self.db.now(conn)
            for start in range(0, len(stale), _IN_CHUNK):
                conn.execute(
                    sa.update(fire)
                    .where(_F.task_id.in_(stale[start : start + _IN_CHUNK]), _F.state == "claimed")
                    .values(
                        state="dropped",
                        reason="not published: the task was disabled while the fire waited",
                        lease_until=None,
                        finished_at=now,
                    )
                )
        return [c for c in claims if c.periodic_task_id in enabled]

    def enabled_among(self, ids: list[int]) -> set[int]:
        """Return which of the periodic tasks ``ids`` exist and are enabled."""
        enabled: set[int] = set()
        with self.db.engine.connect() as conn:
            for start in range(0, len(ids), _IN_CHUNK):
                query = sa.select(_PT.id).where(
                    _PT.id.in_(ids[start : start + _IN_CHUNK]), _PT.enabled == sa.true()
                )
                enabled.update(conn.execute(query).scalars())
        return enabled

    def abandon_silent(self, redeliverable: Callable[[str], bool] | None = None) -> int:
        """Settle started fires whose worker stopped heartbeating; return how many.

        A worker renews the liveness lease of each fire it runs; one killed (kill -9, an
        OOM kill, a lost host) or cut off from the database stops. Such a fire no longer
        blocks its task (overlap policy ``skip``). What becomes of it is the task's
        ``abandon_policy`` (the rule: :func:`celery_cronstore.policy.decide_abandoned`),
        written in this one transaction: recorded ``abandoned`` with the reason, or, for
        a fire the rule re-runs, handed back (state ``claimed``, lease run out,
        ``reruns`` + 1) so :meth:`reclaim_expired` publishes it again under the same task
        id, as :meth:`redeliver_unstarted` does. ``redeliverable`` says whether a second
        publish of a task starts at most once (beat: a CronTask, or a task that
        acknowledges late; ``None``: every task).
        """
        settled = 0
        with self.db.begin() as conn:
            now = self.db.now(conn)
            # The rule's first line in SQL: every silent fire of a task whose policy is
            # "leave" (the default) is recorded in one statement, however many there are.
            rerun_tasks = sa.select(_PT.id).where(_PT.abandon_policy == "rerun")
            result = conn.execute(
                sa.update(fire)
                .where(silent(now), _F.periodic_task_id.not_in(rerun_tasks))
                .values(
                    state="abandoned",
                    finished_at=now,
                    lease_until=None,
                    reason=sa.literal("its worker ")
                    + sa.func.coalesce(_F.node, "?")
                    + sa.literal(policy.ABANDONED),
                )
            )
            settled += max(result.rowcount, 0)
            query = (
                sa.select(
                    _F.id,
                    _F.periodic_task_id,
                    _F.fire_time,
                    _F.node,
                    _F.reruns,
                    _PT.task,
                    _PT.enabled,
                    _PT.start_deadline,
                    _PT.abandon_policy,
                )
                .join_from(fire, periodic_task, _F.periodic_task_id == _PT.id)
                .where(silent(now), _PT.abandon_policy == "rerun")
                .limit(self.batch_size)
            )
            for row in conn.execute(query).all():
                decision = policy.decide_abandoned(
                    policy.AbandonSnapshot(
                        now=now,
                        fire_time=row.fire_time,
                        node=row.node,
                        policy=row.abandon_policy,
                        reruns=row.reruns,
                        enabled=bool(row.enabled),
                        start_deadline=row.start_deadline,
                        later=_later_fire(conn, row.periodic_task_id, row.fire_time),
                        redeliverable=redeliverable is None or redeliverable(row.task),
                    )
                )
                values: dict[str, Any] = {"reason": decision.reason}
                if decision.rerun:
                    values.update(
                        state="claimed",
                        lease_until=now - timedelta(microseconds=1),
                        reruns=row.reruns + 1,
                    )
                else:
                    values.update(state="abandoned", finished_at=now, lease_until=None)
                # Fenced: a heartbeat that came in meanwhile, or another beat that settled
                # the fire first, leaves it alone.
                result = conn.execute(
                    sa.update(fire)
                    .where(_F.id == row.id, _F.reruns == row.reruns, silent(now))
                    .values(**values)
                )
                settled += max(result.rowcount, 0)
        return settled

    def redeliver_unstarted(self, redeliverable: Callable[[str], bool] | None = None) -> int:
        """Hand back published fires whose start lease ran out without a start.

        A message can be lost after the broker took it (Redis: popped by a worker whose
        connection dropped before the message arrived; a broker restart). A fire whose task
        ``redeliverable`` says yes to (beat: a CronTask, whose guard starts one copy at
        most, or a task that acknowledges late) is put back in state ``claimed`` with an
        expired lease, so :meth:`reclaim_expired` publishes it again under the same task
        id, up to ``max_redeliveries`` times. Any other is recorded ``lost`` with the
        reason: sending it again could run it twice. Return how many were handed back.
        """
        with self.db.begin() as conn:
            now = self.db.now(conn)
            query = (
                sa.select(_F.id, _F.attempts, _PT.task)
                .join_from(fire, periodic_task, _F.periodic_task_id == _PT.id)
                .where(unstarted(now))
                .limit(self.batch_size)
            )
            again: list[int] = []
            lost: dict[int, list[int]] = {}
            for row in conn.execute(query):
                if row.attempts <= self.max_redeliveries and (
                    redeliverable is None or redeliverable(row.task)
                ):
                    again.append(row.id)
                else:
                    lost.setdefault(row.attempts, []).append(row.id)
            for start in range(0, len(again), _IN_CHUNK):
                conn.execute(
                    sa.update(fire)
                    .where(_F.id.in_(again[start : start + _IN_CHUNK]), unstarted(now))
                    .values(state="claimed", lease_until=now - timedelta(microseconds=1))
                )
            for attempts, ids in lost.items():
                conn.execute(
                    sa.update(fire)
                    .where(_F.id.in_(ids), unstarted(now))
                    .values(
                        state="lost",
                        lease_until=None,
                        finished_at=now,
                        reason=policy.lost_reason(attempts, self.start_timeout or 0),
                    )
                )
            return len(again)

    def reclaim_expired(self) -> list[Claim]:
        """Take over claims whose lease ran out unpublished; return them to publish again."""
        with self.db.begin() as conn:
            now = self.db.now(conn)
            query = (
                sa.select(fire, periodic_task)
                .join_from(fire, periodic_task, _F.periodic_task_id == _PT.id)
                .where(expired(now))
                .order_by(_F.lease_until)
                .limit(self.batch_size)
            )
            claims: list[Claim] = []
            for row in conn.execute(self.db.locked(query, skip_locked=True, of=fire)).all():
                claim = self._take_over(conn, row, now)
                if claim is not None:
                    claims.append(claim)
        return claims

    def _take_over(self, conn: sa.Connection, row: sa.Row[Any], now: datetime) -> Claim | None:
        m = row._mapping
        task = to_task(row)
        claim = policy.make_claim(
            task, m[_F.fire_time], m[_F.task_id], m[_F.attempts] + 1, _timer_or_none(task)
        )
        values: dict[str, Any] = {
            "attempts": claim.attempt,
            "claimed_by": self.node,
            "lease_until": now + self.lease,
        }
        # The row may have been edited since the claim: never re-publish what beat would
        # now refuse (another task name, unsafe options), nor a fire of a disabled task.
        refused = self.refusal(task, row)
        if refused is None and not task.enabled:
            refused = "the task was disabled before its fire went out"
        if refused is not None:
            values.update(state="dropped", lease_until=None, reason=f"not re-published: {refused}")
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
        return claim if result.rowcount == 1 and "state" not in values else None

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
            refused = self.refusal(task, row)
            if refused is not None:
                raise ValueError(f"periodic task {name!r} cannot be sent: {refused}")
            entry = policy.Entry(
                periodic_task_id=task.id,
                fire_time=now,
                task_id=policy.fire_task_id(task.id, task.name, now),
                state="claimed",
                reason="run-now requested",
                claimed_by=self.node,
                lease_until=now + self.lease,
                claimed_at=now,
            )
            conn.execute(sa.insert(fire).values(**entry.row()))
            return policy.make_claim(task, now, entry.task_id, entry.attempts, _timer_or_none(task))

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

    def heartbeat(
        self,
        started_at: datetime,
        stalled_since: datetime | None = None,
        clock_offset: float | None = None,
    ) -> datetime:
        """Record that this beat ticked (for ``cronstore health``); return the db time.

        ``stalled_since``: since when it has had due fires it could neither claim nor
        publish (``None``: it keeps up); ``clock_offset``: its host's clock minus the
        database's, in seconds.
        """
        with self.db.begin() as conn:
            now = self.db.now(conn)
            values = {
                "last_tick": now,
                "stalled_since": stalled_since,
                "clock_offset": clock_offset,
            }
            result = conn.execute(sa.update(beat).where(beat.c.node == self.node).values(values))
            if result.rowcount == 0:
                conn.execute(
                    sa.insert(beat).values(node=self.node, started_at=started_at, **values)
                )
        return now


def silent(now: Any) -> sa.ColumnElement[bool]:
    """Started fires whose worker stopped heartbeating by ``now`` (a value or SQL)."""
    return sa.and_(
        _F.state.in_(policy.WORKER_RUNNING),
        sa.or_(
            _F.lease_until < now,
            # Started by a release without heartbeats: give it the old bound.
            sa.and_(_F.lease_until.is_(None), _F.started_at < now - _NO_HEARTBEATS),
        ),
    )


def _later_fire(conn: sa.Connection, task_id: int, fire_time: datetime) -> datetime | None:
    """Fire time of a later fire of task ``task_id`` that started or will (claimed or
    published), if any: what supersedes an abandoned fire."""
    return conn.execute(
        sa.select(_F.fire_time)
        .where(
            _F.periodic_task_id == task_id,
            _F.fire_time > fire_time,
            sa.or_(_F.started_at.is_not(None), _F.state.in_(policy.STARTABLE)),
        )
        .limit(1)
    ).scalar_one_or_none()


def unstarted(now: Any) -> sa.ColumnElement[bool]:
    """Published fires whose start lease ran out by ``now`` without a start."""
    return sa.and_(_F.state == "published", _F.lease_until < now)


def expired(now: Any) -> sa.ColumnElement[bool]:
    """Claims whose lease ran out by ``now`` before they were published."""
    return sa.and_(_F.state == "claimed", _F.lease_until < now)


def _timer_or_none(task: PeriodicTask) -> Timer | None:
    """The task's timer, or ``None`` when it is bad (a fire already claimed still goes)."""
    try:
        return policy.timer_of(task)
    except (TimerError, ValueError):
        return None
