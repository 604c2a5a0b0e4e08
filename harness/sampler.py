"""What a soak records over time: ledger size, beat tick time and beat memory.

Each beat replica serves its Prometheus metrics on a port of its own
(``cronstore_metrics_port``); every ``every`` seconds the sampler reads, per replica, the
tick histogram's sum and count and the process's resident memory, and counts the ledger's
rows. A replica restarted by a fault starts its counters again: a new process start time
means counting from zero (the ticks of a process killed between two looks are not seen).
"""

from __future__ import annotations

import threading
import time
import urllib.request
from dataclasses import dataclass, field

import sqlalchemy as sa

from celery_cronstore.store.schema import fire

__all__ = ["Sample", "Sampler"]


@dataclass(frozen=True)
class Sample:
    """One look: seconds since the start, ledger rows, mean tick since the last look
    (seconds, ``None`` without ticks; fault points that stall a tick count), and the
    largest beat RSS (bytes)."""

    at: float
    ledger: int
    tick: float | None
    rss: int
    #: Upper bound of the histogram bucket holding the median tick since the last look.
    tick_p50: float | None = None


def _scrape(port: int) -> dict[str, float]:
    wanted = ("cronstore_beat_tick_seconds_sum", "cronstore_beat_tick_seconds_count",
              "process_resident_memory_bytes", "process_start_time_seconds")  # fmt: skip
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
        text = reply.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in wanted or name.startswith(_BUCKET):
            out[name] = float(value)
    return out


_BUCKET = 'cronstore_beat_tick_seconds_bucket{le="'


def _median(deltas: dict[float, float]) -> float | None:
    """The upper bound of the bucket holding the median tick (cumulative bucket counts)."""
    if not deltas:
        return None
    total = max(deltas.values())
    if total <= 0:
        return None
    return next(bound for bound, n in sorted(deltas.items()) if n >= total / 2)


@dataclass
class Sampler:
    """Look every ``every`` seconds until :meth:`stop`; :attr:`samples` holds the looks."""

    engine: sa.Engine
    ports: list[int]
    every: float = 30.0
    samples: list[Sample] = field(default_factory=list)
    _last: dict[int, dict[str, float]] = field(default_factory=dict)
    _t0: float = field(default_factory=time.monotonic)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self.look()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.look()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.look()

    def look(self) -> None:
        delta: dict[str, float] = {}
        rss = 0
        for port in self.ports:
            try:
                seen = _scrape(port)
            except OSError:
                continue  # killed or stopped right now
            before = self._last.get(port, {})
            started = "process_start_time_seconds"
            if seen.get(started) != before.get(started):  # restarted since the last look
                before = {}
            for name, value in seen.items():
                if not name.startswith("process_"):
                    delta[name] = delta.get(name, 0.0) + value - before.get(name, 0.0)
            self._last[port] = seen
            rss = max(rss, int(seen.get("process_resident_memory_bytes", 0)))
        total = delta.get("cronstore_beat_tick_seconds_sum", 0.0)
        count = delta.get("cronstore_beat_tick_seconds_count", 0.0)
        buckets = {
            float(name[len(_BUCKET) : -2]): n
            for name, n in delta.items()
            if name.startswith(_BUCKET)
        }
        try:
            with self.engine.connect() as conn:
                ledger = conn.execute(sa.select(sa.func.count()).select_from(fire)).scalar_one()
        except sa.exc.DBAPIError:
            ledger = self.samples[-1].ledger if self.samples else 0
        tick = total / count if count else None
        at = time.monotonic() - self._t0
        self.samples.append(Sample(at, ledger, tick, rss, _median(buckets) if count else None))

    def summary(self) -> list[str]:
        """Notes for the report: ledger over time, tick and RSS at the start and the end."""
        if not self.samples:
            return []
        ticks = [s for s in self.samples if s.tick is not None]
        rss = [s for s in self.samples if s.rss]
        line = ", ".join(f"{s.at:.0f}s {s.ledger:,}" for s in self.samples)
        notes = [f"ledger rows over time: {line}"]
        if len(ticks) >= 2:
            first, last = ticks[0], ticks[-1]
            notes.append(
                f"beat tick, first / last sample: mean {first.tick * 1000:.2f} / "
                f"{last.tick * 1000:.2f} ms, median at or under {_ms(first.tick_p50)} / "
                f"{_ms(last.tick_p50)} (fault stalls count)"
            )
        if len(rss) >= 2:
            notes.append(
                f"beat RSS (largest replica): start {rss[0].rss / 2**20:.1f} MiB, "
                f"end {rss[-1].rss / 2**20:.1f} MiB"
            )
        return notes


def _ms(value: float | None) -> str:
    return "-" if value is None or value == float("inf") else f"{value * 1000:g} ms"
