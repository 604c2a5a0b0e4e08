"""The store: the Python API over the periodic-task tables (the only SQL in the package)."""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from celery_cronstore.errors import DuplicateTaskError, TaskNotFoundError, TimerError
from celery_cronstore.policy import BACKLOG_CAP, missed_entry, timer_of
from celery_cronstore.records import EPOCH, Fire, PeriodicTask, Status
from celery_cronstore.store import migrate
from celery_cronstore.store.db import Database
from celery_cronstore.store.engine import Clock, Dialect, create_store_engine, redact
from celery_cronstore.store.rows import (
    FIRE_COLUMNS,
    check_text,
    check_values,
    owner_values,
    to_fire,
    to_task,
)
from celery_cronstore.store.schema import VERSION_TABLE, beat, fire, periodic_task
from celery_cronstore.timers import Timer, fires, parse_timer

__all__ = ["DEFAULT_URL", "Store"]

#: Where the store lives when nothing is configured: a SQLite file in the working directory.
DEFAULT_URL = "sqlite:///celerybeat-cronstore.sqlite"

_PT = periodic_task.c
_TIMER_FIELDS = ("timer", "timer_kind", "tz")


class Store:
    """Periodic tasks and their fire ledger in one SQL database.

    Every method opens and closes its own short transaction and returns immutable
    records. ``clock`` replaces the database clock (tests only; see ``testing``).
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        engine: sa.Engine | None = None,
        clock: Clock | None = None,
        **engine_options: Any,
    ) -> None:
        self.db = Database(
            engine if engine is not None else create_store_engine(url, **engine_options), clock
        )

    @classmethod
    def from_app(cls, app: Any, **kwargs: Any) -> Store:
        """Build the store configured on a Celery app (``cronstore_url`` and friends)."""
        from celery_cronstore.config import Config

        config = Config.from_app(app)
        return cls(config.url, **config.engine_options, **kwargs)

    @property
    def engine(self) -> sa.Engine:
        """The SQLAlchemy engine of the store."""
        return self.db.engine

    @property
    def clock(self) -> Clock | None:
        """The injected clock (tests), or ``None``: the database's clock."""
        return self.db.clock

    @property
    def dialect(self) -> Dialect:
        """What the database can do (probed once)."""
        return self.db.dialect

    @property
    def url(self) -> str:
        """The database URL with its password removed (safe to show)."""
        return redact(self.engine.url)

    def __repr__(self) -> str:
        return f"<Store {self.url}>"

    def close(self) -> None:
        """Release every pooled connection (safe to call more than once)."""
        self.engine.dispose()

    # -- schema ---------------------------------------------------------------------------

    def upgrade(self) -> None:
        """Create or upgrade the tables to this release's schema (Alembic, own version table)."""
        migrate.upgrade(self.engine)

    def check_schema(self) -> None:
        """Raise :class:`SchemaVersionError` (with the fixing command) unless up to date."""
        migrate.check_schema(self.engine)

    def drop_all(self) -> None:
        """Drop every cronstore table, trigger and the version table (tests, uninstall)."""
        migrate.upgrade(self.engine, "base", downgrade=True)
        with self.engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {VERSION_TABLE}"))

    # -- helpers --------------------------------------------------------------------------

    @contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        """Yield a connection inside a write transaction (commit on success)."""
        with self.db.begin() as conn:
            yield conn

    def now(self, conn: sa.Connection | None = None) -> datetime:
        """Return the store's notion of now: the database clock (or the injected one)."""
        return self.db.now(conn)

    def _row(self, conn: sa.Connection, name: str, *, lock: bool = False) -> sa.Row[Any]:
        query = sa.select(periodic_task).where(_PT.name == name)
        if lock:
            query = self.db.locked(query)
        row = conn.execute(query).first()
        if row is None:
            raise TaskNotFoundError(f"no periodic task named {name!r}")
        return row

    # -- definitions ----------------------------------------------------------------------

    def add(
        self,
        name: str,
        *,
        task: str,
        timer: str,
        kind: str | None = None,
        tz: str | None = None,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        options: dict[str, Any] | None = None,
        owner: tuple[str, Any] | None = None,
        enabled: bool = True,
        description: str = "",
        misfire_policy: str = "run_once",
        misfire_limit: int = 100,
        start_deadline: float | None = None,
        overlap_policy: str = "allow",
        tolerance: float | None = None,
        max_retries: int = 0,
        source: str = "api",
    ) -> PeriodicTask:
        """Add a periodic task; validate everything (timer first) before writing anything.

        Raise :class:`TimerSyntaxError` for a bad timer, ``ValueError`` for other bad
        values and :class:`DuplicateTaskError` when the name is taken.
        """
        parsed = parse_timer(timer, kind=kind, tz=tz)
        values = check_values(
            {
                "name": name,
                "task": task,
                "args": args,
                "kwargs": kwargs or {},
                "options": options or {},
                "description": description,
                "misfire_policy": misfire_policy,
                "misfire_limit": misfire_limit,
                "start_deadline": start_deadline,
                "overlap_policy": overlap_policy,
                "tolerance": tolerance,
                "max_retries": max_retries,
                "source": source,
            }
        )
        values.update(owner_values(owner))
        values.update(_timer_values(parsed), enabled=bool(enabled))
        with self.begin() as conn:
            now = self.now(conn)
            values.update(created_at=now, updated_at=now)
            values["next_run"] = parsed.first_fire(now) if enabled else None
            try:
                conn.execute(sa.insert(periodic_task).values(**values))
            except IntegrityError:
                raise DuplicateTaskError(f"a periodic task named {name!r} already exists") from None
            return to_task(self._row(conn, name))

    def get(self, name: str) -> PeriodicTask:
        """Return the periodic task called ``name`` (:class:`TaskNotFoundError` if none)."""
        with self.engine.connect() as conn:
            return to_task(self._row(conn, name))

    def list(
        self,
        *,
        owner: tuple[str, Any] | None = None,
        owner_type: str | None = None,
        enabled: bool | None = None,
        task: str | None = None,
        source: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[PeriodicTask]:
        """Return periodic tasks ordered by name, filtered by owner, enabled, task, source."""
        query = sa.select(periodic_task).order_by(_PT.name).offset(offset)
        if owner is not None:
            cols = owner_values(owner)
            query = query.where(
                _PT.owner_type == cols["owner_type"], _PT.owner_id == cols["owner_id"]
            )
        if owner_type is not None:
            query = query.where(_PT.owner_type == owner_type)
        if enabled is not None:
            query = query.where(_PT.enabled == enabled)
        if task is not None:
            query = query.where(_PT.task == task)
        if source is not None:
            query = query.where(_PT.source == source)
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as conn:
            return [to_task(row) for row in conn.execute(query)]

    def update(self, name: str, **changes: Any) -> PeriodicTask:
        """Change fields of a periodic task; a new timer, zone or enabled flag re-plans it.

        Accepts the keyword arguments of :meth:`add` (``timer``/``kind``/``tz`` are
        validated together before anything is written).
        """
        owner = changes.pop("owner", ...)
        kind = changes.pop("kind", None)
        timer_changes = {k: changes.pop(k) for k in ("timer", "tz") if k in changes}
        unknown = sorted(set(changes) - _UPDATABLE)
        if unknown:
            raise ValueError(f"cannot update unknown field(s): {', '.join(unknown)}")
        values = check_values(changes)
        if owner is not ...:
            values.update(owner_values(owner))
        with self.begin() as conn:
            current = to_task(self._row(conn, name, lock=True))
            now = self.now(conn)
            if not (timer_changes or kind is not None):
                parsed = timer_of(current)
            else:  # the stored timer may be the bad one being fixed: do not parse it
                parsed = parse_timer(
                    timer_changes.get("timer", current.timer),
                    kind=kind or (None if "timer" in timer_changes else current.timer_kind),
                    tz=timer_changes.get("tz", current.tz),
                )
                values.update(_timer_values(parsed))
            enabled = values.get("enabled", current.enabled)
            replan = any(
                values.get(k, getattr(current, k)) != getattr(current, k)
                for k in (*_TIMER_FIELDS, "enabled")
            )
            if current.error is not None:
                # An edit is the fix for a task in error: clear it and plan again; beat
                # puts it back in error (with the reason) if it is still wrong.
                values["error"] = None
                replan = True
            if replan:
                self._record_unclaimed(conn, current, now, "re-planned" if enabled else "disabled")
                values["next_run"] = parsed.first_fire(now, current.last_fire) if enabled else None
            values.update(updated_at=now, version=_PT.version + 1)
            conn.execute(sa.update(periodic_task).where(_PT.id == current.id).values(**values))
            return to_task(self._row(conn, values.get("name", name)))

    @staticmethod
    def _record_unclaimed(conn: sa.Connection, task: PeriodicTask, now: datetime, why: str) -> None:
        """Record the due fires no beat has claimed yet as missed (an edit skips past them).

        Without this, disabling or re-timing a task while beat is down or behind (a
        database outage) would lose those fires without a trace.
        """
        first = task.next_run
        if not task.enabled or task.error is not None or first is None or first == EPOCH:
            return
        if first > now:
            return
        try:
            timer = timer_of(task)
        except (TimerError, ValueError):
            return
        last, count = first, 1
        for point in fires(timer, first, until=now, limit=BACKLOG_CAP - 1):
            last, count = point, count + 1
        why = f"the task was {why} before beat claimed them"
        entry = missed_entry(task, first, last, count, why, capped=count >= BACKLOG_CAP)
        conn.execute(sa.insert(fire).values(**entry.row()))

    def enable(self, name: str) -> PeriodicTask:
        """Enable a periodic task; it fires from its next grid point after now."""
        return self.update(name, enabled=True)

    def disable(self, name: str) -> PeriodicTask:
        """Disable a periodic task; no fire is claimed for it after this commits."""
        return self.update(name, enabled=False)

    def remove(self, name: str) -> None:
        """Remove a periodic task and its ledger (:class:`TaskNotFoundError` if none)."""
        with self.begin() as conn:
            row = self._row(conn, name)
            conn.execute(sa.delete(fire).where(fire.c.periodic_task_id == row.id))
            conn.execute(sa.delete(periodic_task).where(_PT.id == row.id))

    def remove_owned_by(self, owner_type: str, owner_id: Any) -> int:
        """Remove every periodic task of an owner; return how many were removed."""
        cols = owner_values((owner_type, owner_id))
        where = (_PT.owner_type == cols["owner_type"], _PT.owner_id == cols["owner_id"])
        with self.begin() as conn:
            ids = sa.select(_PT.id).where(*where).scalar_subquery()
            conn.execute(sa.delete(fire).where(fire.c.periodic_task_id.in_(ids)))
            return conn.execute(sa.delete(periodic_task).where(*where)).rowcount

    def disable_owned_by(self, owner_type: str, owner_id: Any) -> int:
        """Disable every periodic task of an owner; return how many were enabled before."""
        cols = owner_values((owner_type, owner_id))
        with self.begin() as conn:
            now = self.now(conn)
            result = conn.execute(
                sa.update(periodic_task)
                .where(
                    _PT.owner_type == cols["owner_type"],
                    _PT.owner_id == cols["owner_id"],
                    _PT.enabled == sa.true(),
                )
                .values(enabled=False, next_run=None, updated_at=now, version=_PT.version + 1)
            )
            return result.rowcount

    # -- reading state --------------------------------------------------------------------

    def next_runs(
        self, name: str, n: int = 5, *, after: datetime | None = None
    ) -> builtins.list[datetime]:
        """Return the next ``n`` fire times of a task (from its planned next run or ``after``)."""
        record = self.get(name)
        if not record.enabled:
            return []
        start = after if after is not None else self.now()
        return builtins.list(fires(timer_of(record), start, limit=n))

    def history(self, name: str, limit: int = 50) -> builtins.list[Fire]:
        """Return the task's ledger rows, newest fire first."""
        with self.engine.connect() as conn:
            row = self._row(conn, name)
            query = (
                sa.select(*FIRE_COLUMNS)
                .join_from(fire, periodic_task, fire.c.periodic_task_id == _PT.id)
                .where(fire.c.periodic_task_id == row.id)
                .order_by(fire.c.fire_time.desc())
                .limit(limit)
            )
            return [to_fire(r) for r in conn.execute(query)]

    def fire_by_task_id(self, task_id: str) -> Fire | None:
        """Return the ledger row published under Celery task id ``task_id``, if any."""
        query = (
            sa.select(*FIRE_COLUMNS)
            .join_from(fire, periodic_task, fire.c.periodic_task_id == _PT.id)
            .where(fire.c.task_id == task_id)
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else to_fire(row)

    def status(self, name: str) -> Status:
        """Return the last known outcome of a task: state, time, node, error, result."""
        record = self.get(name)
        last = self.history(name, limit=1)
        newest = last[0] if last else None
        at = None
        if newest is not None:
            at = newest.finished_at or newest.started_at or newest.published_at or newest.claimed_at
        return Status(
            name=name,
            state=newest.state if newest else None,
            fire_time=newest.fire_time if newest else None,
            at=at,
            node=newest.node or newest.claimed_by if newest else None,
            reason=newest.reason if newest else None,
            result=newest.result if newest else None,
            next_run=record.next_run,
            last_run=record.last_run,
            error=record.error,
        )

    def beats(self) -> builtins.list[tuple[str, datetime, datetime]]:
        """Return every beat that ever ticked: (node, started at, last tick), newest first."""
        query = sa.select(beat.c.node, beat.c.started_at, beat.c.last_tick).order_by(
            beat.c.last_tick.desc()
        )
        with self.engine.connect() as conn:
            return [(r.node, r.started_at, r.last_tick) for r in conn.execute(query)]


_UPDATABLE = frozenset(
    {
        "name",
        "task",
        "args",
        "kwargs",
        "options",
        "enabled",
        "description",
        "misfire_policy",
        "misfire_limit",
        "start_deadline",
        "overlap_policy",
        "tolerance",
        "max_retries",
        "source",
    }
)


def _timer_values(timer: Timer) -> dict[str, str]:
    return {
        "timer_kind": timer.kind,
        "timer": check_text("timer", str(timer), max_chars=500),
        "tz": check_text("tz", timer.tz_name, max_chars=64),
    }
