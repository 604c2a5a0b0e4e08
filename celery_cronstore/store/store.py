"""The store: the Python API over the periodic-task tables (the only SQL in the package)."""

from __future__ import annotations

import builtins
import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from celery_cronstore import fields, policy
from celery_cronstore.errors import (
    DuplicateTaskError,
    EditConflictError,
    StoreError,
)
from celery_cronstore.fields import ForceableError
from celery_cronstore.records import PeriodicTask
from celery_cronstore.store import audit, migrate
from celery_cronstore.store.calendars import Calendars
from celery_cronstore.store.db import Database
from celery_cronstore.store.engine import Clock, Dialect, create_store_engine, redact
from celery_cronstore.store.pause import StorePause
from celery_cronstore.store.retire import StoreRetire
from celery_cronstore.store.rows import (
    check_bounds,
    check_values,
    insert_entry,
    owner_values,
    refuse_past,
    timer_key,
    timer_values,
    to_task,
)
from celery_cronstore.store.schema import VERSION_TABLE, periodic_task
from celery_cronstore.store.seam import CallSeam, NullSeam, TaskSeam
from celery_cronstore.store.state import StoreReads
from celery_cronstore.timers import Timer, edit_kind, parse_timer

if TYPE_CHECKING:
    from celery_cronstore.adopt.plan import Plan
    from celery_cronstore.store.adopt import Adopted

__all__ = ["DEFAULT_URL", "CallCheck", "Store"]

#: ``(task name, args, kwargs) -> why they do not fit, or None``.
CallCheck = Callable[[str, list[Any], dict[str, Any]], "str | None"]

#: Where the store lives when nothing is configured: a SQLite file in the working directory.
DEFAULT_URL = "sqlite:///celerybeat-cronstore.sqlite"

_PT = periodic_task.c


class Store(StoreRetire, StoreReads, StorePause):
    """Periodic tasks and their fire ledger in one SQL database.

    Every method opens and closes its own short transaction and returns immutable
    records. ``clock`` replaces the database clock (tests only; see ``testing``). Every
    write records who made it in the audit trail, in its own transaction
    (:mod:`~celery_cronstore.store.audit`): as ``actor`` (default: ``api``, window
    ``api``), or as :meth:`acting` says.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        engine: sa.Engine | None = None,
        clock: Clock | None = None,
        call_check: CallCheck | None = None,
        seam: TaskSeam | None = None,
        default_tz: str = "UTC",
        app_name: str | None = None,
        actor: str = "api",
        **engine_options: Any,
    ) -> None:
        self.db = Database(
            engine if engine is not None else create_store_engine(url, **engine_options), clock
        )
        #: What the Celery app knows about task names (``from_app``: a
        #: :class:`~celery_cronstore.catalog.TaskCatalog`): :meth:`add` and :meth:`update`
        #: refuse a task beat would not send and args that do not fit it. ``call_check``
        #: (the older way) checks only the args.
        self.seam: TaskSeam = (
            seam if seam is not None else CallSeam(call_check) if call_check else NullSeam()
        )
        self.call_check = call_check
        #: Zone of tasks added without one (``from_app``: the app's, see ``Config.zone``).
        self.default_tz = default_tz
        #: What ``-A`` was given, for commands in messages (``celery -A <it> ...``).
        self.app_name = app_name
        #: Who the audit trail says made this store's writes (see :meth:`acting`).
        self.actor = audit.Actor(actor, "api")

    @classmethod
    def from_app(cls, app: Any, **kwargs: Any) -> Store:
        """Build the store configured on a Celery app (``cronstore_url`` and friends)."""
        from celery_cronstore.catalog import TaskCatalog
        from celery_cronstore.config import Config

        config = Config.from_app(app)
        kwargs.setdefault("seam", TaskCatalog(app, config=config))
        kwargs.setdefault("default_tz", config.zone(app))
        # The app's own name is often not importable: name what -A was given, if known.
        kwargs.setdefault("app_name", migrate.app_argument())
        return cls(config.url, **config.engine_options, **kwargs)

    @property
    def calendars(self) -> Calendars:
        """The exclusion calendars (:class:`~celery_cronstore.store.calendars.Calendars`)."""
        return Calendars(self.db, self.actor)

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

    def checked_by(self, seam: TaskSeam) -> Store:
        """Return this store (same engine and clock) checking task names with ``seam``.

        For a window that knows the Celery app when the store was built without it.
        """
        other = copy.copy(self)
        other.seam = seam
        return other

    def acting(self, actor: str, window: str = "api") -> Store:
        """Return this store (same engine, clock and checks) recording its writes in the
        audit trail as ``actor`` writing from ``window`` (one of
        :data:`~celery_cronstore.store.audit.WINDOWS`; ``ValueError`` otherwise)."""
        other = copy.copy(self)
        other.actor = audit.Actor(actor, window)
        return other

    def close(self) -> None:
        """Release every pooled connection (safe to call more than once)."""
        self.engine.dispose()

    # -- schema ---------------------------------------------------------------------------

    def upgrade(self) -> None:
        """Create or upgrade the tables to this release's schema (Alembic, own version table).

        Raise :class:`StoreUnavailableError` if the database is away, :class:`StoreError`
        if it refuses a migration (a user without the right to create tables).
        """
        try:
            migrate.upgrade(self.engine)
        except SQLAlchemyError as exc:
            detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
            raise StoreError(
                f"cannot create or upgrade the cronstore tables in {self.url}: "
                f"{detail[0] if detail else type(exc).__name__}"
            ) from exc

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
        alert_after: str | None = None,
        max_runs: int | None = None,
        jitter: float | None = None,
        start_at: datetime | None = None,
        end_at: datetime | None = None,
        exclude: str | None = None,
        force: bool = True,
        **more: Any,
    ) -> PeriodicTask:
        """Add a periodic task; validate everything (timer first) before writing anything.

        The keywords are the fields of :mod:`celery_cronstore.fields` (``more``: any
        field of that table this signature does not name). Raise
        :class:`TimerSyntaxError` for a bad timer, ``ValueError`` for other bad values
        (:class:`~celery_cronstore.fields.FieldValueError` names the field) and
        :class:`DuplicateTaskError` when the name is taken. With ``force=False`` (what
        the CLI without ``--force``, the dashboard and the Django admin pass), also
        refuse (:class:`~celery_cronstore.fields.ForceableError`) what beat would not run
        as one expects: a task :attr:`seam` refuses (not registered), a one-off instant
        already past. The API's default stores them, as it always has: beat then puts
        the row in error, or applies the misfire policy to the instant.
        """
        parsed = parse_timer(timer, kind=kind, tz=tz or self.default_tz)
        unknown = sorted(set(more) - set(fields.by_name()))
        if unknown:
            raise TypeError(f"Store.add() got unexpected keyword argument(s) {', '.join(unknown)}")
        values = check_values(
            {
                **more,
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
                "alert_after": alert_after,
                "max_runs": max_runs,
                "jitter": jitter,
                "start_at": start_at,
                "end_at": end_at,
                "exclude": exclude,
                "tolerance": tolerance,
                "max_retries": max_retries,
                "source": source,
                "enabled": bool(enabled),
            }
        )
        values.update(owner_values(owner))
        values.update(timer_values(parsed))
        check_bounds(values["start_at"], values["end_at"])
        self._check_task(task, list(args), kwargs or {}, registered=not force)
        with self.begin() as conn:
            self.calendars.check_names(conn, values["exclude"])
            now = self.now(conn)
            if not force:
                refuse_past(parsed, now, values["end_at"])
            values.update(created_at=now, updated_at=now)
            values["next_run"] = policy.first_plan(
                parsed,
                now,
                None,
                enabled,
                name=name,
                jitter=values["jitter"],
                start_at=values["start_at"],
                end_at=values["end_at"],
            )
            try:
                conn.execute(sa.insert(periodic_task).values(**values))
            except IntegrityError:
                raise DuplicateTaskError(f"a periodic task named {name!r} already exists") from None
            added = f"task {task}, timer {parsed}" + ("" if enabled else ", disabled")
            audit.record(conn, self.actor, "add", name, at=now, detail=added)
            return to_task(self._row(conn, name))

    def update(
        self, name: str, /, *, expected_version: int | None = None, **changes: Any
    ) -> PeriodicTask:
        """Change fields of a periodic task; a new timer, zone or enabled flag re-plans it.

        Accepts the keyword arguments of :meth:`add` (``timer``/``kind``/``tz`` are
        validated together before anything is written); what the edit does to planned
        fires is :func:`celery_cronstore.policy.edit_plan`'s decision. With
        ``expected_version`` (the ``version`` the editor loaded) the write happens only if
        the row is still at that version, checked by the ``UPDATE`` itself: otherwise
        :class:`EditConflictError` and nothing is written.
        """
        with self.begin() as conn:
            return self.update_in(conn, name, expected_version=expected_version, **changes)

    def update_in(
        self,
        conn: sa.Connection,
        name: str,
        /,
        *,
        expected_version: int | None = None,
        **changes: Any,
    ) -> PeriodicTask:
        """:meth:`update` inside the caller's transaction ``conn`` (recorded there too)."""
        asked = dict(changes)
        owner = changes.pop("owner", ...)
        kind = changes.pop("kind", None)
        force = bool(changes.pop("force", True))
        timer_changes = {k: changes.pop(k) for k in ("timer", "tz") if k in changes}
        unknown = sorted(set(changes) - _updatable())
        if unknown:
            raise ValueError(f"cannot update unknown field(s): {', '.join(unknown)}")
        values = check_values(changes)
        if owner is not ...:
            values.update(owner_values(owner))
        current = to_task(self._row(conn, name, lock=True))
        if values.get("exclude"):
            self.calendars.check_names(conn, values["exclude"])
        check_bounds(values.get("start_at", current.start_at), values.get("end_at", current.end_at))
        if {"task", "args", "kwargs"} & set(changes):
            self._check_task(
                changes.get("task", current.task),
                list(changes.get("args", current.args)),
                dict(changes.get("kwargs", current.kwargs)),
                registered=not force and changes.get("task", current.task) != current.task,
            )
        now = self.now(conn)
        parsed: Timer | None
        if not (timer_changes or kind is not None):
            # A stored timer may be bad (raw SQL): the row can still be disabled,
            # edited or enabled; beat then puts it in error with the reason.
            parsed = policy.readable_timer(current)
        else:  # the stored timer may be the bad one being fixed: do not parse it
            parsed = parse_timer(
                timer_changes.get("timer", current.timer),
                kind=edit_kind(
                    kind, stored=current.timer_kind, timer_changed="timer" in timer_changes
                ),
                tz=timer_changes.get("tz", current.tz),
            )
            values.update(timer_values(parsed))
            if not force and timer_key(parsed) != timer_key(current):
                refuse_past(parsed, now)
        decided = policy.edit_plan(current, values, now, timer=parsed)
        if decided.missed is not None:
            insert_entry(conn, decided.missed)
        values.update(decided.values(), updated_at=now, version=_PT.version + 1)
        where = [_PT.id == current.id]
        if expected_version is not None:
            where.append(_PT.version == expected_version)
        try:
            written = conn.execute(sa.update(periodic_task).where(*where).values(**values))
        except IntegrityError:  # renamed to a name that is taken
            taken = f"a periodic task named {values.get('name', name)!r} already exists"
            raise DuplicateTaskError(taken) from None
        if expected_version is not None and written.rowcount == 0:
            # The row is locked since it was read: the version it holds is current's.
            raise EditConflictError(current.name, expected_version, current.version)
        after = to_task(self._row(conn, values.get("name", name)))
        action, detail = audit.update_entry(current, after, asked)
        audit.record(conn, self.actor, action, after.name, at=now, detail=detail)
        return after

    def adopt(self, plan: Plan, *, source: str, window: str = "import") -> Adopted:
        """Carry out an import or apply plan in one transaction (:mod:`.adopt`), recorded
        as :attr:`actor`'s from ``window`` (``import`` or ``apply``)."""
        from celery_cronstore.store import adopt

        by = self.acting(self.actor.name, window)
        return adopt.carry_out(self.db, by.update_in, plan, source=source, actor=by.actor)

    def _check_task(
        self, task: str, args: builtins.list[Any], kwargs: dict[str, Any], *, registered: bool
    ) -> None:
        """Refuse a task beat would not send (if ``registered``) or args that do not fit."""
        refused = self.seam.registered(task) if registered else None
        if refused is not None:
            raise ForceableError("task", refused)
        problem = self.seam.call_problem(task, args, kwargs)
        if problem is not None:
            raise fields.FieldValueError("args", problem)

    def enable(self, name: str) -> PeriodicTask:
        """Enable a periodic task; it fires from its next grid point after now."""
        return self.update(name, enabled=True)

    def disable(self, name: str) -> PeriodicTask:
        """Disable a periodic task; no fire is claimed for it after this commits."""
        return self.update(name, enabled=False)


def _updatable() -> frozenset[str]:
    """Return what :meth:`Store.update` may change besides the timer and the owner (the
    fields of :mod:`celery_cronstore.fields`, read now) and ``source``."""
    timer = {"timer", "kind", "tz", "owner"}
    return frozenset({f.name for f in fields.table()} - timer | {"source"})
