"""Read django-celery-beat's periodic tasks (2.x, checked with 2.9).

Where from
----------
``read(url, context)`` reads five tables and nothing else, with SQLAlchemy Core (the
tables reflected, one outer-joined ``SELECT``, no write; the engine is disposed):
``django_celery_beat_periodictask`` and the schedules it points at,
``..._crontabschedule``, ``..._intervalschedule``, ``..._clockedschedule`` and
``..._solarschedule``. Values are taken as the driver returns them (no SQLAlchemy type
processing), so one malformed cell refuses its row instead of failing the query.
``read(None, context)`` reads the same rows through django-celery-beat's own models when
Django is configured (``DJANGO_SETTINGS_MODULE``); Django is imported only then, and is
never a dependency of this package.

Crontabs are read in their own ``timezone`` column, as django-celery-beat does by
default; a project with ``DJANGO_CELERY_BEAT_TZ_AWARE = False`` evaluates them in the
app's zone instead, which only the ORM path sees (it then uses the context's zone).

Times: Django with ``USE_TZ = True`` (the default since Django 5.0) stores UTC, as
``timestamptz`` on PostgreSQL and as naive UTC text on SQLite and MySQL, so a naive
value read from a URL is taken as UTC. A project with ``USE_TZ = False`` stores naive
wall time in its ``TIME_ZONE``: read it through the ORM (no URL), which converts with
the project's own settings. Every instant handed on is aware UTC.

What maps to what
-----------------
==========================================  ==============================================
django-celery-beat                          cronstore
==========================================  ==============================================
``name``, ``task``, ``enabled``,            the same fields
``description``
crontab (5 fields, ``timezone``)            ``cron`` timer in that zone; a ``calendar``
                                            timer when day of month *and* day of week are
                                            both restricted (Celery fires on days matching
                                            both; cron on days matching either)
interval (``every`` ``period``)             ``every Ns from <origin>``: the origin is
                                            ``last_run_at`` (Celery fires one period after
                                            the last run), else ``start_time``, else none
clocked (``clocked_time``)                  ``once`` timer at that instant
one-off crontab/interval                    ``once`` timer at the schedule's first fire
                                            after ``last_run_at``/``start_time``/
                                            ``date_changed``, with a note; one that ran
                                            already: at that run (nothing fires again)
``args``/``kwargs`` (JSON text)             ``args`` (array) / ``kwargs`` (object)
``queue``, ``exchange``, ``routing_key``,   ``options`` (only the keys that are set)
``priority``, ``headers`` (JSON object)
``expires`` (an instant)                    ``options["expires"]`` as ISO-8601, with a note
``expire_seconds``                          ``start_deadline``
``start_time``                              ``Incoming.start_at``
``last_run_at``, ``total_run_count``        ``Incoming.last_run_at``/``total_run_count``
==========================================  ==============================================

Solar rows become solar timers. Refused rows (each names the problem and the fix; the
other rows still come over): a solar schedule within half a degree of a pole, no
schedule or more than one, a schedule row that is missing, a crontab Celery cannot parse
(``*/0``) or in a zone the tz database lacks, an interval that is not a whole number of
seconds or longer than 366 days, args/kwargs/headers that are not JSON of the right
shape, and a one-off that has no fire left.

Two of django-celery-beat's quirks are not copied: a row with a ``start_time`` and no
last run fires at ``start_time`` itself there, whatever its crontab says (its scheduler
pretends the last run was 30 years ago); here it fires at the first crontab match from
``start_time`` on. And ``expires`` also switches the task off there once it passes; here
it only expires the messages (the note says so).

The schedules become timers through :mod:`celery_cronstore.adopt.convert` (Celery's own
crontab parser, the AND rule, whole-second intervals); an interval with no origin fires
on the epoch grid, with a note. The mapping itself (:class:`PeerRow`, :func:`map_row`)
is in :mod:`~celery_cronstore.adopt.sources.peer_rows`, shared with
:mod:`~celery_cronstore.adopt.sources.sqlalchemy_celery_beat`, whose rows have the same
columns.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from celery_cronstore.adopt.records import Read, ReadContext
from celery_cronstore.adopt.sources.peer_rows import TASK_COLUMNS as _TASK_COLUMNS
from celery_cronstore.adopt.sources.peer_rows import PeerRow, instant, map_row

__all__ = [
    "KINDS",
    "TASK_TABLE",
    "PeerRow",
    "instant",
    "map_row",
    "open_engine",
    "read",
    "read_only",
]

_PEER = "django-celery-beat"
TASK_TABLE = "django_celery_beat_periodictask"
#: Schedule kind -> (its table, the task's foreign key column).
KINDS: dict[str, tuple[str, str]] = {
    "crontab": ("django_celery_beat_crontabschedule", "crontab_id"),
    "interval": ("django_celery_beat_intervalschedule", "interval_id"),
    "clocked": ("django_celery_beat_clockedschedule", "clocked_id"),
    "solar": ("django_celery_beat_solarschedule", "solar_id"),
}


# -- reading -----------------------------------------------------------------------------


def read(location: str | None, context: ReadContext) -> list[Read]:
    """Return every periodic task of django-celery-beat, mapped (see the module doc).

    ``location`` is a SQLAlchemy database URL; ``None`` reads through the Django ORM.
    Raise ``LookupError`` (no such tables, Django not configured) or ``OSError`` (the
    database cannot be reached) when nothing can be read at all.
    """
    if location is None:
        rows, zone = _orm_rows()
        return [map_row(row, context, peer=_PEER, crontab_zone=zone) for row in rows]
    engine = open_engine(location)
    try:
        rows = _sql_rows(engine)
    except sa.exc.DBAPIError as exc:
        raise OSError(f"cannot read {_shown(location)}: {exc.orig or exc}") from None
    finally:
        engine.dispose()
    return [map_row(row, context, peer=_PEER) for row in rows]


def open_engine(location: str) -> sa.Engine:
    """Return an engine on the database URL ``location``; never create a database.

    ``LookupError`` for a URL SQLAlchemy cannot use, ``OSError`` for a SQLite file that
    does not exist (connecting would create an empty one).
    """
    try:
        url = sa.make_url(location)
        if url.get_backend_name() == "sqlite":
            path = url.database or ""
            local = path and path != ":memory:" and not path.startswith("file:")
            if local and not Path(path).is_file():
                raise OSError(f"no SQLite database at {path}")
        return sa.create_engine(url)
    except sa.exc.ArgumentError as exc:
        raise LookupError(f"not a database URL ({exc})") from None
    except sa.exc.NoSuchModuleError as exc:
        raise LookupError(f"no SQLAlchemy dialect for {_shown(location)} ({exc})") from None


def _shown(location: str) -> str:
    try:
        return sa.make_url(location).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "the given URL"


def _raw(column: sa.ColumnElement[Any], label: str) -> sa.Label[Any]:
    # NullType: the driver's value as it is (SQLite's datetime text is parsed by
    # ``instant``, so one malformed cell refuses one row instead of the whole query).
    return sa.type_coerce(column, sa.types.NullType()).label(label)


def read_only(conn: sa.Connection) -> sa.Connection:
    """Make ``conn``'s transactions read-only where the database can enforce it."""
    if conn.dialect.name == "postgresql":
        conn.execution_options(postgresql_readonly=True)
    return conn


def _sql_rows(engine: sa.Engine) -> list[PeerRow]:
    with engine.connect() as conn:
        read_only(conn)
        present = set(sa.inspect(conn).get_table_names())
        if TASK_TABLE not in present:
            raise LookupError(
                f"no {TASK_TABLE} table in {_shown(str(engine.url))}: give the database "
                "django-celery-beat uses (its migrations create the table)"
            )
        meta = sa.MetaData()
        task = sa.Table(TASK_TABLE, meta, autoload_with=conn)
        columns = [_raw(task.c[name], name) for name in _TASK_COLUMNS if name in task.c]
        joined: sa.FromClause = task
        linked: dict[str, list[str]] = {}
        for kind, (table_name, key) in KINDS.items():
            if key not in task.c:
                continue  # an old version without this kind
            columns.append(_raw(task.c[key], key))
            if table_name not in present:
                linked[kind] = []
                continue
            table = sa.Table(table_name, meta, autoload_with=conn)
            joined = joined.outerjoin(table, task.c[key] == table.c.id)
            linked[kind] = [c.name for c in table.c]
            columns.extend(_raw(c, f"{kind}__{c.name}") for c in table.c)
        result = conn.execute(sa.select(*columns).select_from(joined).order_by(task.c.id))
        rows = [dict(row._mapping) for row in result]
    return [_peer_row(row, linked) for row in rows]


def _peer_row(row: Mapping[str, Any], linked: Mapping[str, list[str]]) -> PeerRow:
    task = {name: row[name] for name in _TASK_COLUMNS if name in row}
    schedules: dict[str, Mapping[str, Any] | None] = {}
    for kind, names in linked.items():
        if row[KINDS[kind][1]] is None:
            continue
        found = row.get(f"{kind}__id") if names else None
        schedules[kind] = {n: row[f"{kind}__{n}"] for n in names} if found is not None else None
    return PeerRow(f"{TASK_TABLE} id={task['id']}", task, schedules)


def _orm_rows() -> tuple[list[PeerRow], str | None]:
    """Read through django-celery-beat's models; return the rows and the crontab zone
    rule for :func:`map_row`: ``None`` (each crontab's own ``timezone``), or ``""`` when
    ``DJANGO_CELERY_BEAT_TZ_AWARE = False`` makes it evaluate crontabs in the app's zone
    (the context's). Naive datetimes (``USE_TZ = False``) are read in ``TIME_ZONE``."""
    conf = importlib.import_module("django.conf")
    if not os.environ.get("DJANGO_SETTINGS_MODULE") and not conf.settings.configured:
        raise LookupError(
            "Django is not configured (DJANGO_SETTINGS_MODULE is unset): give the "
            "database URL with --url, or run inside the Django project"
        )
    apps = importlib.import_module("django.apps").apps
    if not apps.ready:
        importlib.import_module("django").setup()
    models = importlib.import_module("django.db.models")
    cast = importlib.import_module("django.db.models.functions").Cast
    dj_timezone = importlib.import_module("django.utils.timezone")
    dcb = importlib.import_module("django_celery_beat.models")
    fields = {
        "crontab": ("id", "minute", "hour", "day_of_month", "month_of_year", "day_of_week"),
        "interval": ("id", "every", "period"),
        "clocked": ("id", "clocked_time"),
        "solar": ("id", "event", "latitude", "longitude"),
    }
    names = [f"{kind}__{n}" for kind, kind_fields in fields.items() for n in kind_fields]
    keys = [key for _, key in KINDS.values()]
    # The zone as text: TimeZoneField would raise on a zone the tz database lacks, and
    # that must refuse one row, not stop the read.
    zone = cast("crontab__timezone", models.CharField())
    query = dcb.PeriodicTask.objects.order_by("id").values(
        *_TASK_COLUMNS, *keys, *names, crontab_zone=zone
    )
    linked = {kind: list(kind_fields) for kind, kind_fields in fields.items()}
    linked["crontab"].append("timezone")
    local = dj_timezone.get_default_timezone()
    rows = []
    for raw in query.iterator():
        row = {
            k: (
                dj_timezone.make_aware(v, local)
                if isinstance(v, datetime) and v.tzinfo is None
                else v
            )
            for k, v in raw.items()
        }
        row["crontab__timezone"] = row.pop("crontab_zone")
        rows.append(_peer_row(row, linked))
    tz_aware = getattr(conf.settings, "DJANGO_CELERY_BEAT_TZ_AWARE", True)
    return rows, (None if tz_aware else "")
