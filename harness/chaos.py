"""Faults applied from outside while a scenario runs (one thread per kind of fault)."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import sqlalchemy as sa

from harness.cluster import Cluster, Proxy

__all__ = ["ACTIONS", "Chaos"]


@dataclass
class Chaos:
    """The running faults of one scenario; ``stop()`` ends them and heals everything."""

    cluster: Cluster
    db_proxy: Proxy
    broker_proxy: Proxy
    admin: sa.Engine  # a direct, privileged connection to the scenario's database
    database: str
    lease: float
    rng: random.Random
    counts: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, names: tuple[str, ...]) -> None:
        for name in names:
            thread = threading.Thread(target=self._loop, args=(ACTIONS[name],), daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self.db_proxy.up()
        self.broker_proxy.up()
        for proc in self.cluster.beats:
            proc.resume()

    def count(self, what: str) -> None:
        with self._lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def sleep(self, low: float, high: float) -> bool:
        """Sleep a random while; return False once the scenario is over."""
        return not self._stop.wait(self.rng.uniform(low, high))

    def _loop(self, action: Callable[[Chaos], None]) -> None:
        while not self._stop.is_set():
            action(self)


def kill9(chaos: Chaos) -> None:
    """``kill -9`` a random beat replica every few seconds (the supervisor restarts it)."""
    if not chaos.sleep(1.5, 4.0):
        return
    alive = [p for p in chaos.cluster.beats if p.alive]
    if alive:
        chaos.rng.choice(alive).kill9()
        chaos.count("kill -9")


def sigstop(chaos: Chaos) -> None:
    """SIGSTOP a random replica for up to lease + 3 s, then SIGCONT it."""
    if not chaos.sleep(1.0, 3.0):
        return
    running = [p for p in chaos.cluster.beats if p.alive and not p.stopped]
    if not running:
        return
    proc = chaos.rng.choice(running)
    proc.pause()
    chaos.count("SIGSTOP")
    chaos.sleep(0.5, chaos.lease + 3.0)
    proc.resume()


def db_kill(chaos: Chaos) -> None:
    """Kill every connection to the scenario's database (``pg_terminate_backend``)."""
    if not chaos.sleep(1.0, 3.0):
        return
    with chaos.admin.connect() as conn:
        if chaos.admin.dialect.name == "postgresql":
            killed = conn.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = :db AND pid <> pg_backend_pid()"
                ),
                {"db": chaos.database},
            ).scalar_one()
        else:
            ids = conn.execute(
                sa.text(
                    "SELECT id FROM information_schema.processlist "
                    "WHERE db = :db AND id <> CONNECTION_ID()"
                ),
                {"db": chaos.database},
            ).scalars()
            killed = 0
            for pid in list(ids):
                try:
                    conn.exec_driver_sql(f"KILL CONNECTION {int(pid)}")
                    killed += 1
                except sa.exc.DBAPIError:
                    pass  # it ended on its own meanwhile
        conn.commit()
    chaos.count("connections killed")
    chaos.counts["backends terminated"] = chaos.counts.get("backends terminated", 0) + killed


def _outage(chaos: Chaos, proxy: Proxy, what: str) -> None:
    if not chaos.sleep(2.0, 5.0):
        return
    proxy.down()
    chaos.count(what)
    try:
        chaos.sleep(2.0, 6.0)
    finally:
        proxy.up()


def db_outage(chaos: Chaos) -> None:
    """Cut the beat replicas' link to the database for 2-6 s, every few seconds."""
    _outage(chaos, chaos.db_proxy, "database outage")


def broker_outage(chaos: Chaos) -> None:
    """Cut every process's link to the broker for 2-6 s, every few seconds."""
    _outage(chaos, chaos.broker_proxy, "broker outage")


ACTIONS: dict[str, Callable[[Chaos], None]] = {
    "kill9": kill9,
    "sigstop": sigstop,
    "db_kill": db_kill,
    "db_outage": db_outage,
    "broker_outage": broker_outage,
}
