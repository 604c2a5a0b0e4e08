"""The store: the Python API over the periodic-task tables (the only SQL in the package)."""

from __future__ import annotations

import builtins
import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from celery_cronstore.errors import DuplicateTaskError, TimerError, TimerSearchError
from celery_cronstore.policy import backlog, missed_entry, timer_of
from celery_cronstore.records import EPOCH, PeriodicTask
from celery_cronstore.store import migrate
from celery_cronstore.store.db import Database
from celery_cronstore.store.engine import Clock, Dialect, create_store_engine, redact
from celery_cronstore.store.retention import PRUNE_BATCH, REMOVE_BATCH, Pruner, delete_history
from celery_cronstore.store.rows import (
    check_text,
    check_values,
    owner_values,
    to_task,
)
from celery_cronstore.store.schema import VERSION_TABLE, fire, periodic_task
from celery_cronstore.store.state import StoreReads
from celery_cronstore.timers import Timer, parse_timer

__all__ = ["DEFAULT_URL", "CallCheck", "Store"]

#: ``(task name, args, kwargs) -> why they do not fit, or None``.
CallCheck = Callable[[str, list[Any], dict[str, Any]], "str | None"]

#: Where the store lives when nothing is configured: a SQLite file in the working directory.
DEFAULT_URL = "sqlite:///celerybeat-cronstore.sqlite"

_PT = periodic_task.c
_TIMER_FIELDS = ("timer", "timer_kind", "tz")


class Store(StoreReads):
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
        call_check: CallCheck | None = None,
        default_tz: str = "UTC",
        app_name: str | None = None,
        **engine_options: Any,
    ) -> None:
        self.db = Database(
            engine if engine is not None else create_store_engine(url, **engine_options), clock
        )
        #: Whether a task's args/kwargs fit it (``from_app``: the app's task signatures);
        #: returns the reason they do not. Checked by :meth:`add` and :meth:`update`.
        self.call_check = call_check
        #: Zone of tasks added without one (``from_app``: the app's, see ``Config.zone``).
        self.default_tz = default_tz
        #: The Celery app's name, for commands in messages (``celery -A <name> ...``).
        self.app_name = app_name

    @classmethod
    def from_app(cls, app: Any, **kwargs: Any) -> Store:
        """Build the store configured on a Celery app (``cronstore_url`` and friends)."""
        from celery_cronstore.calls import call_problem
        from celery_cronstore.config import Config

        config = Config.from_app(app)
        kwargs.setdefault("call_check", functools.partial(call_problem, app))
        kwargs.setdefault("default_tz", config.zone(app))
        kwargs.setdefault("app_name", app.main)
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
        migrate.check_schema(self.engine, self.app_name)

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
        abandon_policy: str = "leave",
    ) -> PeriodicTask:
        """Add a periodic task; validate everything (timer first) before writing anything.

        Raise :class:`TimerSyntaxError` for a bad timer, ``ValueError`` for other bad
        values and :class:`DuplicateTaskError` when the name is taken.
        """
        parsed = parse_timer(timer, kind=kind, tz=tz or self.default_tz)
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
                "abandon_policy": abandon_policy,
                "tolerance": tolerance,
                "max_retries": max_retries,
                "source": source,
            }
        )
        values.update(owner_values(owner))
        values.update(_timer_values(parsed), enabled=bool(enabled))
        self._check_call(task, list(args), kwargs or {})
        with self.begin() as conn:
            now = self.now(conn)
            values.update(created_at=now, updated_at=now)
            values["next_run"] = _first_plan(parsed, now, None, enabled)
            try:
                conn.execute(sa.insert(periodic_task).values(**values))
            except IntegrityError:
                raise DuplicateTaskError(f"a periodic task named {name!r} already exists") from None
            return to_task(self._row(conn, name))

    def update(self, name: str, /, **changes: Any) -> PeriodicTask:
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
            if {"task", "args", "kwargs"} & set(changes):
                self._check_call(
                    changes.get("task", current.task),
                    list(changes.get("args", current.args)),
                    dict(changes.get("kwargs", current.kwargs)),
                )
            now = self.now(conn)
            parsed: Timer | None
            if not (timer_changes or kind is not None):
                # A stored timer may be bad (raw SQL): the row can still be disabled,
                # edited or enabled; beat then puts it in error with the reason.
                parsed = _timer_or_none(current)
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
                why = "re-planned" if enabled else "disabled"
                last = self._record_unclaimed(conn, current, now, why)
                if last is not None:
                    values["last_fire"] = last
                values["next_run"] = _first_plan(parsed, now, last or current.last_fire, enabled)
            values.update(updated_at=now, version=_PT.version + 1)
            conn.execute(sa.update(periodic_task).where(_PT.id == current.id).values(**values))
            return to_task(self._row(conn, values.get("name", name)))

    def _check_call(self, task: str, args: builtins.list[Any], kwargs: dict[str, Any]) -> None:
        problem = None if self.call_check is None else self.call_check(task, args, kwargs)
        if problem is not None:
            raise ValueError(problem)

    @staticmethod
    def _record_unclaimed(
        conn: sa.Connection, task: PeriodicTask, now: datetime, why: str
    ) -> datetime | None:
        """Record the due fires no beat has claimed yet as missed (an edit skips past them).

        Without this, disabling or re-timing a task while beat is down or behind (a
        database outage) would lose those fires without a trace. Return the newest fire
        time recorded (``None``: nothing was due). Points already in the ledger are
        passed over, so this never fails on a row in any state.
        """
        first = task.next_run
        if not task.enabled or task.error is not None or first is None or first == EPOCH:
            return None
        timer = _timer_or_none(task)
        if first > now or timer is None:
            return None
        if task.last_fire is not None and first <= task.last_fire:
            first = timer.next_after(task.last_fire)
            if first is None or first > now:
                return None
        walk = backlog(timer, first, now, keep=1)
        if walk.first is None:
            return None
        why = f"the task was {why} before beat claimed them"
        entry = missed_entry(task, walk.first, walk.tail[-1], walk.count, why, exact=walk.exact)
        with contextlib.suppress(IntegrityError), conn.begin_nested():
            conn.execute(sa.insert(fire).values(**entry.row()))
        return walk.tail[-1]

    def enable(self, name: str) -> PeriodicTask:
        """Enable a periodic task; it fires from its next grid point after now."""
        return self.update(name, enabled=True)

    def disable(self, name: str) -> PeriodicTask:
        """Disable a periodic task; no fire is claimed for it after this commits."""
        return self.update(name, enabled=False)

    def remove(self, name: str, *, batch: int = REMOVE_BATCH) -> None:
        """Remove a periodic task and its ledger (:class:`TaskNotFoundError` if none).

        The task is disabled first (one short transaction: no fire is claimed for it
        after that commits), then its ledger is deleted oldest first, ``batch`` rows per
        transaction, and the row itself goes last. A delivery of one of its fires finds
        no ledger row and the guard does not run it. Interrupted, it leaves the task
        disabled with part of its history: removing it again finishes the job.
        """
        with self.begin() as conn:
            task_id = self._row(conn, name).id
            self._stop(conn, [task_id])
        delete_history(self.db, task_id, batch=batch)
        with self.begin() as conn:
            conn.execute(sa.delete(fire).where(fire.c.periodic_task_id == task_id))
            conn.execute(sa.delete(periodic_task).where(_PT.id == task_id))

    def remove_owned_by(self, owner_type: str, owner_id: Any, *, batch: int = REMOVE_BATCH) -> int:
        """Remove every periodic task of an owner; return how many were removed.

        As :meth:`remove`: the tasks are disabled in one transaction, their ledgers
        deleted ``batch`` rows per transaction, and the rows go last.
        """
        cols = owner_values((owner_type, owner_id))
        where = (_PT.owner_type == cols["owner_type"], _PT.owner_id == cols["owner_id"])
        with self.begin() as conn:
            ids = builtins.list(conn.execute(sa.select(_PT.id).where(*where)).scalars())
            self._stop(conn, ids)
        for task_id in ids:
            delete_history(self.db, task_id, batch=batch)
        with self.begin() as conn:
            owned = sa.select(_PT.id).where(*where).scalar_subquery()
            conn.execute(sa.delete(fire).where(fire.c.periodic_task_id.in_(owned)))
            return conn.execute(sa.delete(periodic_task).where(*where)).rowcount

    def _stop(self, conn: sa.Connection, ids: builtins.list[int]) -> None:
        """Disable rows about to be removed, so no beat claims them meanwhile."""
        now = self.now(conn)
        for start in range(0, len(ids), 1000):
            conn.execute(
                sa.update(periodic_task)
                .where(_PT.id.in_(ids[start : start + 1000]))
                .values(enabled=False, next_run=None, updated_at=now, version=_PT.version + 1)
            )

    def prune(
        self, older_than: timedelta | None, *, dry_run: bool = False, batch: int = PRUNE_BATCH
    ) -> dict[str, int]:
        """Delete ledger rows whose fire is older than ``older_than``; return counts per state.

        Never deleted: fires in flight, each task's newest fire and what the guard still
        reads (:mod:`celery_cronstore.policy.retention`). One pass over the old rows,
        ``batch`` rows per transaction. ``dry_run`` deletes nothing and returns what
        would go; ``None`` keeps everything.
        """
        return Pruner(self.db, batch=batch).run(older_than, dry_run=dry_run)

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
        "abandon_policy",
        "tolerance",
        "max_retries",
        "source",
    }
)


def _timer_or_none(task: PeriodicTask) -> Timer | None:
    try:
        return timer_of(task)
    except (TimerError, ValueError):
        return None


def _first_plan(
    timer: Timer | None, now: datetime, last_fire: datetime | None, enabled: bool
) -> datetime | None:
    """Return ``next_run`` for a task just edited: ``EPOCH`` ("beat, check it") if its
    stored timer is bad, so beat puts it in error with the reason."""
    if not enabled:
        return None
    if timer is None:
        return EPOCH
    try:
        return timer.first_fire(now, last_fire)
    except TimerSearchError:  # beat plans past the instant the timer cannot answer at
        return EPOCH


def _timer_values(timer: Timer) -> dict[str, str]:
    return {
        "timer_kind": timer.kind,
        "timer": check_text("timer", str(timer), max_chars=500),
        "tz": check_text("tz", timer.tz_name, max_chars=64),
    }
