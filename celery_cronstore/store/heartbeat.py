"""Beat's heartbeat: one row per beat process in ``cronstore_beat`` (``cronstore health``)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from celery_cronstore.store.db import Database
from celery_cronstore.store.schema import beat

__all__ = ["BeatHeartbeat"]


class BeatHeartbeat:
    """Record that the beat process ``node`` ticks."""

    def __init__(self, db: Database, node: str) -> None:
        self.db = db
        self.node = node

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
