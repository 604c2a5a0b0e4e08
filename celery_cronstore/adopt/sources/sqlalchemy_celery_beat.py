"""Read sqlalchemy-celery-beat's periodic tasks (0.8+, checked with 0.9.1).

sqlalchemy-celery-beat is django-celery-beat's design on SQLAlchemy: the same columns,
the same four schedule kinds, so every row maps exactly as the django-celery-beat reader
documents (:mod:`celery_cronstore.adopt.sources.django_celery_beat`, whose
:func:`~celery_cronstore.adopt.sources.django_celery_beat.map_row` this reader uses).
What differs is where the rows are:

* tables ``celery_periodictask``, ``celery_crontabschedule``,
  ``celery_intervalschedule``, ``celery_clockedschedule`` and ``celery_solarschedule``
  (its ``celery_periodictaskchanged`` is not read);
* in the schema its ``beat_schema`` setting names: the context app's
  ``beat_schema`` when there is an app, else the database's default schema, else the one
  schema that has ``celery_periodictask`` (its models declare ``celery_schema``, which its
  session maps to ``beat_schema``: none by default);
* a task links its schedule by ``discriminator`` (``crontabschedule``, ...) and
  ``schedule_id``, not by one foreign key per kind, so there is no database constraint:
  a missing schedule row is refused as a dangling reference.

Times: its columns are ``DateTime(timezone=True)``; SQLite keeps them as naive text
(SQLAlchemy drops the offset), which its scheduler reads back as UTC and writes in UTC
(``last_run_at``, ``date_changed``), so a naive value is taken as UTC here too. Read
with SQLAlchemy Core, raw driver values, one ``SELECT``, nothing written; the engine is
disposed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from celery_cronstore.adopt.records import Read, ReadContext
from celery_cronstore.adopt.sources.django_celery_beat import open_engine, read_only
from celery_cronstore.adopt.sources.peer_rows import TASK_COLUMNS, PeerRow, map_row

__all__ = ["DISCRIMINATORS", "TASK_TABLE", "read"]

_PEER = "sqlalchemy-celery-beat"
TASK_TABLE = "celery_periodictask"
#: ``discriminator`` -> (schedule kind, its table).
DISCRIMINATORS: dict[str, tuple[str, str]] = {
    "crontabschedule": ("crontab", "celery_crontabschedule"),
    "intervalschedule": ("interval", "celery_intervalschedule"),
    "clockedschedule": ("clocked", "celery_clockedschedule"),
    "solarschedule": ("solar", "celery_solarschedule"),
}
_TASK_COLUMNS = (
    *TASK_COLUMNS,
    "discriminator",
    "schedule_id",
)


def read(location: str | None, context: ReadContext) -> list[Read]:
    """Return every periodic task of sqlalchemy-celery-beat, mapped.

    ``location`` is its database URL (its ``beat_dburi``); without one the context app's
    ``beat_dburi`` is used. Raise ``LookupError`` (no URL, no such tables) or ``OSError``
    (the database cannot be reached) when nothing can be read at all.
    """
    app_conf = getattr(context.app, "conf", None)
    url = location or (app_conf.get("beat_dburi") if app_conf is not None else None)
    if not url:
        raise LookupError(
            "no database URL: give sqlalchemy-celery-beat's (its beat_dburi) with --url"
        )
    schema = app_conf.get("beat_schema") if app_conf is not None else None
    engine = open_engine(url)
    try:
        rows = _rows(engine, schema or None)
    except sa.exc.DBAPIError as exc:
        raise OSError(f"cannot read {engine.url!r}: {exc.orig or exc}") from None
    finally:
        engine.dispose()
    return [map_row(row, context, peer=_PEER) for row in rows]


def _find_schema(conn: sa.Connection, schema: str | None) -> str | None:
    inspector = sa.inspect(conn)
    if schema is not None or inspector.has_table(TASK_TABLE):
        if inspector.has_table(TASK_TABLE, schema=schema):
            return schema
        raise LookupError(
            f"no {TASK_TABLE} table in schema {schema!r} of {conn.engine.url!r}: give the "
            "database (and beat_schema) sqlalchemy-celery-beat uses"
        )
    try:
        found = [s for s in inspector.get_schema_names() if inspector.has_table(TASK_TABLE, s)]
    except NotImplementedError:
        found = []
    if len(found) == 1:
        return found[0]
    where = f"schemas {', '.join(found)}" if found else "no schema"
    raise LookupError(
        f"{TASK_TABLE} is in {where} of {conn.engine.url!r}: set the app's beat_schema to "
        "the one sqlalchemy-celery-beat uses"
    )


def _rows(engine: sa.Engine, schema: str | None) -> list[PeerRow]:
    with engine.connect() as conn:
        read_only(conn)
        schema = _find_schema(conn, schema)
        inspector = sa.inspect(conn)
        meta = sa.MetaData(schema=schema)
        task = sa.Table(TASK_TABLE, meta, autoload_with=conn)
        raw = sa.types.NullType()
        columns = [sa.type_coerce(task.c[n], raw).label(n) for n in _TASK_COLUMNS if n in task.c]
        joined: sa.FromClause = task
        linked: dict[str, list[str]] = {}
        for discriminator, (kind, table_name) in DISCRIMINATORS.items():
            if not inspector.has_table(table_name, schema=schema):
                continue
            table = sa.Table(table_name, meta, autoload_with=conn)
            joined = joined.outerjoin(
                table,
                sa.and_(task.c.discriminator == discriminator, task.c.schedule_id == table.c.id),
            )
            linked[kind] = [c.name for c in table.c]
            columns.extend(sa.type_coerce(c, raw).label(f"{kind}__{c.name}") for c in table.c)
        result = conn.execute(sa.select(*columns).select_from(joined).order_by(task.c.id))
        rows = [dict(row._mapping) for row in result]
    origin = f"{schema}.{TASK_TABLE}" if schema else TASK_TABLE
    return [_peer_row(row, linked, origin) for row in rows]


def _peer_row(row: Mapping[str, Any], linked: Mapping[str, list[str]], origin: str) -> PeerRow:
    task = {name: row[name] for name in _TASK_COLUMNS if name in row}
    discriminator = task.pop("discriminator", None)
    task.pop("schedule_id", None)
    schedules: dict[str, Mapping[str, Any] | None] = {}
    if discriminator:
        kind = DISCRIMINATORS.get(str(discriminator), (str(discriminator), ""))[0]
        if kind not in linked:
            schedules[kind] = {} if kind == str(discriminator) else None
        elif row.get(f"{kind}__id") is None:
            schedules[kind] = None
        else:
            schedules[kind] = {n: row[f"{kind}__{n}"] for n in linked[kind]}
    return PeerRow(f"{origin} id={task['id']}", task, schedules)
