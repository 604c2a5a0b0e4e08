"""When beat vacuums its own hot tables on PostgreSQL: the rule, without SQL or a clock.

Every fire moves a periodic task's ``next_run`` (indexed, so never a HOT update) and
writes ledger rows that change state and are pruned: dead index entries pile up at the
left edge of the due index, where beat's idle query looks. Autovacuum normally removes
them (migration 0005 tunes it for these tables), but a server may run with it off or
behind: measured here (``benchmarks/churn.py``) with autovacuum off, the idle tick went
from 0.13 ms to 8.5 ms after 2,000,000 fires. Beat then vacuums the table itself.

A table is vacuumed by beat when its dead rows reach :data:`DEAD_MIN` and
:data:`DEAD_SHARE` of its live rows (well above autovacuum's tuned trigger, so a healthy
autovacuum always goes first), and no vacuum of it (beat's or autovacuum's) ended within
:data:`QUIET` seconds. A table in that state that beat's role may not vacuum (it does not
own it) is named in a warning, at most every :data:`WARN_EVERY` seconds: nothing removes
its dead rows, and the operator has to (autovacuum on, or the owner's ``VACUUM``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEAD_MIN",
    "DEAD_SHARE",
    "LOOK_EVERY",
    "QUIET",
    "WARN_EVERY",
    "TableStats",
    "out_of_reach",
    "to_vacuum",
]

#: Fewest dead rows worth a vacuum of beat's own.
DEAD_MIN = 10_000
#: Share of the live rows the dead ones must reach as well.
DEAD_SHARE = 0.05
#: Seconds since the table's last vacuum (anyone's) before beat runs one.
QUIET = 30.0
#: Seconds between two looks at the tables' statistics (a read of two rows of
#: ``pg_stat_user_tables``, on beat's upkeep thread).
LOOK_EVERY = 15.0
#: Seconds between two warnings about one table beat cannot vacuum itself.
WARN_EVERY = 3600.0


@dataclass(frozen=True)
class TableStats:
    """What the server's statistics say of one table."""

    name: str
    live: int
    dead: int
    #: Seconds since its last vacuum ended (manual or auto); ``None``: never.
    since_vacuum: float | None
    #: Whether beat's role may vacuum it (owns it, or is a superuser).
    allowed: bool


def to_vacuum(tables: list[TableStats]) -> list[str]:
    """Return the names of the tables beat should vacuum now, in the given order."""
    return [t.name for t in tables if t.allowed and _due(t)]


def out_of_reach(tables: list[TableStats]) -> list[TableStats]:
    """Return the tables that need the vacuum beat would run, but that beat's role may
    not vacuum (it does not own them): nobody vacuums them, and beat says so."""
    return [t for t in tables if not t.allowed and _due(t)]


def _due(table: TableStats) -> bool:
    return table.dead >= max(DEAD_MIN, DEAD_SHARE * table.live) and (
        table.since_vacuum is None or table.since_vacuum >= QUIET
    )
