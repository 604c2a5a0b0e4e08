"""Beat's upkeep that runs on a thread and a connection of its own: the rest of a prune
pass beat had no time for (:class:`Finisher`), and its own vacuum (:class:`Vacuumer`).

Beat prunes between ticks within a budget that ends before the next fire's claim. A beat
firing hundreds of times a second never has that room: the next fire is always close, so
it would prune one batch per housekeeping and the ledger would grow without a bound. When
a pass is left unfinished, :class:`Finisher` goes on with it off the beat thread, one
short transaction per batch, resting after each as long as the batch took (it holds
SQLite's write lock, or a PostgreSQL connection, at most half the time); the pruner keeps
where the pass stands and when the next one starts. Beat starts no other pass while it
runs; a failure is logged and the next pass waits ``PRUNE_PAUSE``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from celery_cronstore.policy.vacuum import (
    LOOK_EVERY,
    WARN_EVERY,
    TableStats,
    out_of_reach,
    to_vacuum,
)
from celery_cronstore.store.db import Database
from celery_cronstore.store.engine import DATABASE_ERRORS
from celery_cronstore.store.retention import Pruner
from celery_cronstore.store.vacuum import table_stats, vacuum

__all__ = ["REST", "Finisher", "Vacuumer"]

logger = logging.getLogger("celery.beat")

#: Seconds the thread rests after a batch, per second the batch took.
REST = 1.0


class _Background:
    """One daemon thread of beat's upkeep, started once."""

    _thread: threading.Thread | None = None

    def _start(self, target: Callable[[], None], name: str) -> None:
        self._thread = threading.Thread(target=target, name=name, daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """Whether the thread is still going."""
        return self._thread is not None and self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; return whether it did."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running


class Finisher(_Background):
    """One background run of the rest of a prune pass (see the module docstring)."""

    def __init__(
        self, pruner: Pruner, keep: timedelta, scrub: Callable[[BaseException], str]
    ) -> None:
        self.pruner = pruner
        self.keep = keep
        self._scrub = scrub
        #: Rows deleted so far by this run.
        self.deleted = 0
        self._stop = threading.Event()

    def start(self) -> None:
        """Start the thread (once; beat must not touch the pruner while it runs)."""
        self._start(self._run, "cronstore-prune")

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to end after its current batch, and wait for it."""
        self._stop.set()
        self.wait(timeout)

    def _run(self) -> None:
        # One batch a call (no budget); the pruner keeps the pass and its pause.
        try:
            while not self._stop.is_set():
                began = time.monotonic()
                step = self.pruner.pace(self.keep, began)
                if step is None:
                    break
                self.deleted += step.deleted
                if step.done:
                    break
                self._stop.wait(REST * (time.monotonic() - began))
        except DATABASE_ERRORS as exc:
            logger.warning("beat: pruning the fire ledger failed (%s)", self._scrub(exc))
        logger.debug("beat: the prune thread deleted %d old ledger row(s)", self.deleted)


class Vacuumer(_Background):
    """Beat's own ``VACUUM`` of its hot tables on PostgreSQL, on a thread of its own, when
    autovacuum is off or behind (:mod:`celery_cronstore.policy.vacuum` says when)."""

    def __init__(self, db: Database, scrub: Callable[[BaseException], str]) -> None:
        self.db = db
        self._scrub = scrub
        self._next_look = 0.0
        #: Tables vacuumed so far (for logs and tests).
        self.vacuumed: list[str] = []
        #: When (monotonic) each table beat cannot vacuum may be warned about again.
        self._next_warning: dict[str, float] = {}

    def look(self, moment: float) -> bool:
        """At most every ``LOOK_EVERY`` seconds (``moment``: monotonic), start a thread
        that reads the tables' statistics and vacuums those that need it; return whether
        one was started."""
        if moment < self._next_look or self.running:
            return False
        self._next_look = moment + LOOK_EVERY
        self._start(lambda: self._run(moment), "cronstore-vacuum")
        return True

    def _run(self, moment: float) -> None:
        try:
            tables = table_stats(self.db)
            self._warn(out_of_reach(tables), moment)
            dead = {t.name: t.dead for t in tables}
            for table in to_vacuum(tables):
                began = time.monotonic()
                vacuum(self.db, table)
                self.vacuumed.append(table)
                logger.info(
                    "beat: vacuumed %s (%d dead rows; autovacuum is off or behind) in %.1fs",
                    table,
                    dead[table],
                    time.monotonic() - began,
                )
        except DATABASE_ERRORS as exc:
            logger.warning("beat: vacuuming the store's tables failed (%s)", self._scrub(exc))

    def _warn(self, tables: list[TableStats], moment: float) -> None:
        """Name each table beat cannot vacuum, at most every ``WARN_EVERY`` seconds of
        ``moment`` (the monotonic time of the look)."""
        for table in tables:
            if moment < self._next_warning.get(table.name, 0.0):
                continue
            self._next_warning[table.name] = moment + WARN_EVERY
            logger.warning(
                "beat: table %s has %d dead rows and no vacuum for %s, and beat's database "
                "role does not own it, so beat cannot vacuum it: turn autovacuum on, or "
                "have the table's owner run VACUUM %s (the due index grows and every idle "
                "tick slows down until then)",
                table.name,
                table.dead,
                "ever" if table.since_vacuum is None else f"{table.since_vacuum:.0f}s",
                table.name,
            )
