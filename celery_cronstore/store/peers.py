"""Switching over safely: a task another scheduler still fires is not fired here too.

When a task was imported from django-celery-beat or sqlalchemy-celery-beat and the peer's
tables live in the store's own database, beat can read whether the peer still has the
task enabled. While it does, both would fire it: beat plans the task as usual but sends
none of its fires, recording each ``dropped`` with the reason
(:func:`celery_cronstore.policy.withheld`). The moment the old scheduler lets go of it
(disabled there, or removed), the next fire here is sent: a task moves over by being
disabled in the old scheduler, with no edit here. The peer's enabled names are read once
per claim batch that plans such a task (one indexed read of a small table), so the hand
over follows the old scheduler's own table with no delay of ours.

When the peer's tables are elsewhere (another database, a Redis for RedBeat, a
``beat_schedule`` file), beat cannot tell: ``cronstore import`` says so
(:func:`peer_warnings`), and the switch is the operator's (docs/migrating.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from celery_cronstore.records import PeriodicTask
from celery_cronstore.store.db import Database

__all__ = ["PEERS", "PeerGuard", "peer_warnings"]

logger = logging.getLogger("celery.beat")

#: Source tag -> (the peer's name, its periodic-task table, the schemas it may be in:
#: sqlalchemy-celery-beat uses ``celery_schema`` where the database has schemas).
PEERS: dict[str, tuple[str, str, tuple[str | None, ...]]] = {
    "dcb": ("django-celery-beat", "django_celery_beat_periodictask", (None,)),
    "scb": ("sqlalchemy-celery-beat", "celery_periodictask", ("celery_schema", None)),
}


class PeerGuard:
    """Say whether a peer scheduler in the same database still has a task enabled."""

    def __init__(self) -> None:
        #: Source tag -> whether its table is here (looked up once).
        self._present: dict[str, sa.TableClause | None] = {}
        self._names: dict[str, frozenset[str]] = {}
        self._read_at: dict[str, datetime] = {}

    def refusal(self, conn: sa.Connection, task: PeriodicTask, now: datetime) -> str | None:
        """Return why ``task`` must not fire (its peer still has it enabled), or ``None``."""
        peer = PEERS.get(task.source)
        if peer is None:
            return None
        if task.name not in self._enabled(conn, task.source, now):
            return None
        label, table, _ = peer
        return (
            f"{label} still has this task enabled (table {table} in this database): both "
            f"would fire it. Disable it in {label} and the next fire is sent from here"
        )

    def _enabled(self, conn: sa.Connection, source: str, now: datetime) -> frozenset[str]:
        read_at = self._read_at.get(source)
        if read_at is not None and now == read_at:  # the same claim batch
            return self._names[source]
        _, table, _ = PEERS[source]
        names: frozenset[str] = frozenset()
        try:
            if source not in self._present:
                self._present[source] = _located(conn, source)
            located = self._present[source]
            if located is not None:
                names = _enabled_names(conn, located)
        except SQLAlchemyError as exc:  # no right to read it: say so once, do not stop
            if self._read_at.get(source) is None:
                logger.warning("beat: cannot read %s to check imported tasks: %s", table, exc)
        self._names[source] = names
        self._read_at[source] = now
        return names


def peer_warnings(db: Database, source: str, names: Sequence[str]) -> list[str]:
    """Return what ``cronstore import`` must say about the switch for ``source``'s tasks.

    Names the imported tasks the peer still has enabled (beat refuses them until the peer
    disables them), or says why beat cannot tell.
    """
    with db.begin() as conn:
        return _warnings(conn, source, names)


def _warnings(conn: sa.Connection, source: str, names: Sequence[str]) -> list[str]:
    tag = {"django-celery-beat": "dcb", "sqlalchemy-celery-beat": "scb"}.get(source)
    if tag is None:
        return [
            f"beat cannot see whether {source} still fires these tasks: stop or disable "
            "them there before the first fire here (docs/migrating.md)"
        ]
    label, _, _ = PEERS[tag]
    if not names:
        return []
    located = _located(conn, tag)
    if located is None:
        return [
            f"{label}'s tables are not in the store's database: beat cannot tell whether it "
            f"still fires these tasks; disable them in {label} before the first fire here"
        ]
    wanted = set(names)
    live = sorted(name for name in _enabled_names(conn, located) if name in wanted)
    if not live:
        return []
    shown = ", ".join(live[:10]) + (f" and {len(live) - 10} more" if len(live) > 10 else "")
    return [
        f"{len(live)} task(s) are still enabled in {label} ({shown}): beat records their "
        f"fires dropped (with the reason) until you disable them there; then it sends them"
    ]


def _located(conn: sa.Connection, tag: str) -> sa.TableClause | None:
    """Return the peer's periodic-task table in this database, or ``None`` if absent."""
    _, table, schemas = PEERS[tag]
    inspector = sa.inspect(conn)
    for schema in schemas:
        if inspector.has_table(table, schema):
            return sa.table(table, sa.column("name"), sa.column("enabled"), schema=schema)
    return None


def _enabled_names(conn: sa.Connection, peer: sa.TableClause) -> frozenset[str]:
    """Return the names the peer has enabled (a savepoint: a refusal leaves the caller's
    transaction usable)."""
    with conn.begin_nested():
        rows = conn.execute(sa.select(peer.c.name).where(peer.c.enabled == sa.true()))
        return frozenset(str(r[0]) for r in rows)
