"""The worker's per-process state: one store per app, run liveness, the node name.

* :func:`store_for` gives each app one store per process (a forked child opens its own).
* :class:`Liveness` keeps the fires a process runs alive in the ledger (one statement per
  process every quarter of ``cronstore_abandon_after``; beat records a fire whose worker
  went silent ``abandoned``), retries end-of-run records the database refused (a bounded
  outbox: a database restart never leaves a finished run ``started``), and logs how far
  the worker's clock is from the database's.

The signal handlers that use them live in :mod:`celery_cronstore.worker.signals`.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import deque
from datetime import datetime, timezone
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from celery_cronstore.config import Config
from celery_cronstore.policy import CLOCK_WARN, CLOCK_WARN_EVERY
from celery_cronstore.store import Store, runs

__all__ = [
    "Liveness",
    "clock_offset",
    "liveness_for",
    "node_of",
    "remember_node",
    "start_quiet_thread",
    "store_for",
    "use_store",
]

logger = logging.getLogger("celery_cronstore.worker")

#: End-of-run records kept for a retry while the database is away (oldest dropped first).
OUTBOX_MAX = 10_000

#: Signals that fall on a thread because of what *it* did (a fault, its own write to a
#: closed pipe): never blocked. Every other signal comes from outside the process.
_SYNCHRONOUS = {"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGTRAP", "SIGSYS", "SIGPIPE"}


def _outside_signals() -> set[signal.Signals]:
    if not hasattr(signal, "pthread_sigmask"):  # Windows
        return set()
    keep = {getattr(signal, name) for name in _SYNCHRONOUS if hasattr(signal, name)}
    return {sig for sig in signal.valid_signals() if isinstance(sig, signal.Signals)} - keep


#: What the liveness thread blocks (see :func:`start_quiet_thread`).
OUTSIDE_SIGNALS = _outside_signals()


def start_quiet_thread(thread: threading.Thread) -> None:
    """Start ``thread`` with every signal from outside blocked in it, for its whole life.

    A signal sent to a process goes to any one of its threads that does not block it. A
    helper thread must never be that thread:

    * A prefork child that billiard terminates (the hard time limit: SIGTERM, 0.1 s later
      SIGKILL) blocks SIGTERM in its main thread while it writes its last message to the
      pool's result queue under the queue's multiprocessing lock. Its SIGTERM handler has
      already reset SIGTERM to the default action, so a second SIGTERM (billiard sends two
      on an event-loop-less transport) delivered to a helper thread ended the process
      there, lock held: the child forked in its place waited for ever on that lock
      (issue 27).
    * A signal a helper thread takes does not interrupt the main thread's blocking call
      (Linux gives a process's signal to its main thread first, but only while that
      thread does not block it; other systems pick any thread): the soft time limit
      would reach the task only once that call returns.

    The new thread inherits the mask of the thread that starts it: blocking in the caller
    around ``start()`` leaves no window in which the new thread could take a signal. A
    green thread (gevent, eventlet) inherits nothing; the caller's mask is restored at once
    (a signal that arrived meanwhile is delivered then).
    """
    if not OUTSIDE_SIGNALS:
        thread.start()
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, OUTSIDE_SIGNALS)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


_lock = threading.Lock()
#: id(app) -> (app, pid, store): one store per app and process (a fork gets its own).
_stores: dict[int, tuple[Any, int, Store]] = {}
#: id(app) -> (app, pid, liveness).
_liveness: dict[int, tuple[Any, int, Liveness]] = {}
#: id(app) -> the node name of the worker started for it in this process (and its forks).
_nodes: dict[int, str] = {}


def _after_fork_in_child() -> None:
    # A thread of the parent (billiard's timeout handler records a hard time limit kill
    # while its supervisor thread forks a replacement child) may hold the lock at fork
    # time: the child's copy would stay locked for ever.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def store_for(app: Any) -> Store:
    """Return the store of ``app`` for this process (built on first use, not at import)."""
    key = id(app)
    entry = _stores.get(key)
    pid = os.getpid()
    if entry is not None and entry[1] == pid:
        return entry[2]
    with _lock:
        entry = _stores.get(key)
        if entry is not None and entry[1] == pid:
            return entry[2]
        if entry is not None:
            # Inherited across fork: never use the parent's connections.
            entry[2].engine.dispose(close=False)
        store = Store.from_app(app)
        _stores[key] = (app, pid, store)
        return store


def use_store(app: Any, store: Store | None) -> None:
    """Make the fires of ``app`` use ``store`` in this process (tests); ``None`` resets."""
    with _lock:
        if store is None:
            _stores.pop(id(app), None)
        else:
            _stores[id(app)] = (app, os.getpid(), store)
        _liveness.pop(id(app), None)


class Liveness:
    """The fires one process runs: kept alive in the ledger, their end records delivered."""

    def __init__(self, store: Store, abandon_after: float) -> None:
        self.store = store
        self.abandon_after = abandon_after
        self.running: set[str] = set()
        #: Which run of its fire each running fire is (``RunStart.rerun``, or what
        #: ``runs.record_start`` returned): its heartbeats and end are fenced on it.
        self.runs: dict[str, int] = {}
        self.outbox: deque[tuple[str, str, dict[str, Any]]] = deque(maxlen=OUTBOX_MAX)
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None
        self._next_clock_check = 0.0

    def started(self, task_id: str, run: int | None = None) -> None:
        """Note that fire ``task_id`` runs here (its lease is renewed until it ends).

        ``run``: which run of the fire it is (0, or 1 for a re-run after its worker went
        silent); the renewals then touch that run only.
        """
        with self._guard:
            self.running.add(task_id)
            if run is not None:
                self.runs[task_id] = run
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="cronstore-liveness", daemon=True
                )
                start_quiet_thread(self._thread)

    def finish(self, task_id: str, state: str, **details: Any) -> bool | None:
        """Record how fire ``task_id`` ended; if the database refuses, keep it to retry.

        The record is fenced on the run of the fire :meth:`started` noted here (unless
        ``run`` is given): a late end of a run re-run elsewhere records nothing.
        Return whether the fire was still in flight (``None``: queued for a retry).
        """
        with self._guard:
            self.running.discard(task_id)
            details.setdefault("run", self.runs.pop(task_id, None))
        try:
            return runs.finish_fire(self.store.db, task_id, state, **details)
        except SoftTimeLimitExceeded:  # the caller records the run as timed out instead
            raise
        except Exception as exc:
            logger.warning(
                "fire %s: could not record %s (%s); retrying in the background",
                task_id,
                state,
                type(exc).__name__,
            )
            with self._guard:
                self.outbox.append((task_id, state, details))
            return None

    def beat(self) -> None:
        """Renew the leases of the running fires, deliver queued records, check the clock."""
        groups: dict[int | None, list[str]] = {}
        with self._guard:
            for task_id in sorted(self.running):
                groups.setdefault(self.runs.get(task_id), []).append(task_id)
            queued = list(self.outbox)
        for run, task_ids in groups.items():
            runs.keep_alive(self.store.db, task_ids, self.abandon_after, run=run)
        for item in queued:
            task_id, state, details = item
            runs.finish_fire(self.store.db, task_id, state, **details)
            with self._guard:
                if item in self.outbox:
                    self.outbox.remove(item)
        # An injected clock (tests, the soak) is no host clock to compare.
        if self.store.clock is None and time.monotonic() >= self._next_clock_check:
            self._next_clock_check = time.monotonic() + CLOCK_WARN_EVERY
            offset = clock_offset(self.store)
            if abs(offset) > CLOCK_WARN:
                logger.warning(
                    "this worker's clock is %+.1fs off the database's; deadlines and the "
                    "early-drop rule use the database's (fix NTP on this host)",
                    offset,
                )

    def _loop(self) -> None:
        while True:
            time.sleep(max(1.0, self.abandon_after / 4))
            try:
                self.beat()
            except Exception as exc:  # the database may be away: try again next round
                logger.warning("cronstore liveness: %s: %s", type(exc).__name__, exc)


def clock_offset(store: Store) -> float:
    """Return this host's clock minus the store's (seconds; SQLite: the host's, so ~0)."""
    return (datetime.now(timezone.utc) - store.now()).total_seconds()


def node_of(app: Any) -> str | None:
    """Return the node name of the worker running ``app`` here (``None``: no worker).

    What the ledger's ``node`` holds for a run on it (its tasks' ``request.hostname``),
    known to the worker's main process too, which records hard time limit kills.
    """
    return _nodes.get(id(app))


def liveness_for(app: Any) -> Liveness:
    """Return the :class:`Liveness` of ``app`` in this process."""
    key = id(app)
    pid = os.getpid()
    entry = _liveness.get(key)
    if entry is not None and entry[1] == pid:
        return entry[2]
    store = store_for(app)  # takes the lock itself: not while we hold it
    with _lock:
        entry = _liveness.get(key)
        if entry is None or entry[1] != pid:
            entry = (app, pid, Liveness(store, Config.from_app(app).abandon_after))
            _liveness[key] = entry
        return entry[2]


def remember_node(app: Any, hostname: str) -> None:
    """Record the node name of the worker started for ``app`` in this process."""
    _nodes[id(app)] = hostname
