"""Issue 30, part 2: a stall that is not another beat's lock is visible.

A real ``celery beat`` with a 1-second timer and its Prometheus port, and real faults:
its database link cut or paused through a proxy the test owns, the task table locked by
another session (``LOCK TABLE ... IN ACCESS EXCLUSIVE MODE`` on PostgreSQL, ``LOCK TABLES
... WRITE`` on MariaDB), and a broker that refuses messages (a private Redis with 2 MB of
``maxmemory``, ``noeviction``, filled). For each: the gauge ``cronstore_beat_stalled_seconds``
is above 0 on a scrape within a few seconds of the fault (also while beat's loop is
blocked), ``cronstore health`` exits 1 within a bound tied to the lease, beat says in its
log what it waits for, and both recover once the fault heals.

Before the change (docs/reliability.md, "A stall is visible"): the gauge read 0 and health
exited 0 through every one of these faults.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from processes import beat, celery_env, running, wait_for

from celery_cronstore.store import Store
from harness.ports import free_port
from harness.tcp_proxy import Proxy

pytestmark = [pytest.mark.slow]
prometheus = pytest.importorskip("prometheus_client.parser")


#: The beats' lease (seconds): health's bound for due work is this long.
LEASE = 4.0
#: How long each fault lasts (seconds).
WINDOW = float(os.environ.get("CRONSTORE_STALL_WINDOW", "12"))
#: The gauge must read above 0 this soon after the fault (seconds).
GAUGE_WITHIN = 5.0
#: Health must exit 1 this soon after the fault: the lease, health's own look (3 s at
#: most) and the start of a ``celery`` process on a busy machine.
HEALTH_WITHIN = LEASE + 8.0
GAUGE = "cronstore_beat_stalled_seconds"


class LinkProxy(Proxy):
    """The harness proxy, plus a pause: bytes stop flowing both ways, sockets stay open
    (a link that answers nothing, as a frozen router or a partition does)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._flowing = threading.Event()
        self._flowing.set()
        super().__init__(target)

    def pause(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:  # type: ignore[override]
        try:
            while data := src.recv(65536):
                self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def _through(url: str, proxy: Proxy) -> str:
    parts = urlsplit(url)
    user = parts.netloc.rsplit("@", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}@127.0.0.1:{proxy.port}"))


def _target(url: str, port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or port


def _fresh(url: str) -> Store:
    store = Store(url)
    store.upgrade()
    with store.begin() as conn:
        for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    return store


def scrape(port: int) -> float | None:
    """Return the stall gauge of the beat serving metrics on ``port`` (None: no answer)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
    except OSError:
        return None
    for family in prometheus.text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.name == GAUGE:
                return float(sample.value)
    return None


def health(env: dict[str, str], cwd: Path, *extra: str) -> tuple[int, str, float]:
    """Run ``cronstore health``; return its exit status, its output and its duration."""
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "e2e_app", "cronstore", "health", *extra],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, (done.stdout + done.stderr).strip(), time.monotonic() - began


@dataclass
class Watch:
    """Gauge scrapes (main thread) and health probes (a thread), timed from the fault."""

    port: int
    env: dict[str, str]
    cwd: Path
    gauge: list[tuple[float, float | None]] = field(default_factory=list)
    probes: list[tuple[float, int, str]] = field(default_factory=list)
    fault_at: float = 0.0

    def first(self, seen: list[tuple[float, bool]]) -> float | None:
        return next((t for t, hit in seen if hit), None)

    @property
    def gauge_up(self) -> float | None:
        return self.first([(t, v is not None and v > 0) for t, v in self.gauge])

    @property
    def unhealthy(self) -> float | None:
        return self.first([(t, code == 1) for t, code, _ in self.probes])


@contextlib.contextmanager
def probing(watch: Watch) -> Iterator[None]:
    """Run health probes in a thread while the body runs."""
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            code, text, _ = health(watch.env, watch.cwd, "--max-age", "30")
            watch.probes.append((time.monotonic() - watch.fault_at, code, text))

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(60)


def run_fault(
    watch: Watch, logs: Path, fault: Callable[[], None], heal: Callable[[], None]
) -> tuple[float, float, str]:
    """Inject ``fault`` for :data:`WINDOW` s while scraping and probing, heal it, and wait
    until both recover; return (seconds to gauge > 0, seconds to health 1, its line)."""
    wait_for(lambda: health(watch.env, watch.cwd, "--max-age", "30")[0] == 0, 40,
             "a healthy beat before the fault", logs)  # fmt: skip
    wait_for(lambda: scrape(watch.port) == 0, 20, "the gauge at 0 before the fault", logs)
    watch.fault_at = time.monotonic()
    fault()
    try:
        with probing(watch):
            while time.monotonic() - watch.fault_at < WINDOW:
                watch.gauge.append((time.monotonic() - watch.fault_at, scrape(watch.port)))
                time.sleep(0.5)
    finally:
        heal()
    gauge_up, unhealthy = watch.gauge_up, watch.unhealthy
    values = [v for _, v in watch.gauge]
    assert gauge_up is not None, f"the gauge stayed 0 through the fault: {watch.gauge}"
    assert gauge_up <= GAUGE_WITHIN, f"the gauge stayed 0 for {gauge_up:.1f}s: {watch.gauge}"
    late = [v for t, v in watch.gauge if t > gauge_up + 2 and v is not None]
    assert late, f"no scrape answered after the gauge rose: {values}"
    assert max(late) > 2, f"the gauge did not grow through the fault: {values}"
    assert unhealthy is not None, f"health never exited 1 in the fault: {watch.probes}"
    assert unhealthy <= HEALTH_WITHIN, f"health exited 1 only after {unhealthy:.1f}s"
    line = next(text for t, code, text in watch.probes if code == 1)
    assert len(line.splitlines()) == 1, line
    wait_for(lambda: scrape(watch.port) == 0, 20, "the gauge back at 0 after the fault", logs)
    wait_for(lambda: health(watch.env, watch.cwd, "--max-age", "30")[0] == 0, 40,
             "health back to 0 after the fault", logs)  # fmt: skip
    return gauge_up, unhealthy, line


@contextlib.contextmanager
def a_beat(
    tmp_path: Path, store_url: str, broker: str, beat_url: str | None = None
) -> Iterator[Watch]:
    """A beat on ``beat_url`` (default ``store_url``) and ``broker``, with a 1-second
    timer due; yields a :class:`Watch` whose health probes use ``store_url``."""
    store = _fresh(store_url)
    store.add("every-second", task="e2e.record", timer="every 1s", args=["s"])
    store.close()
    port = free_port()
    common = {"E2E_LEASE": str(LEASE), "E2E_POLL": "0.5", "E2E_QUEUE": f"stall-{port}"}
    record = tmp_path / "record.jsonl"
    env = celery_env(broker, beat_url or store_url, record, E2E_METRICS_PORT=str(port), **common)
    probe_env = celery_env(broker, store_url, record, **common)
    with running([beat()], env, tmp_path):
        yield Watch(port, probe_env, tmp_path)


def beat_log(logs: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(logs.glob("proc*-beat.log")))


def report(name: str, figures: tuple[float, float, str]) -> None:
    gauge_up, unhealthy, line = figures
    print(f"{name}: gauge > 0 after {gauge_up:.1f}s, health 1 after {unhealthy:.1f}s: {line}")


# -- the database link ----------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize("how", ["cut", "pause"])
def test_a_beat_cut_off_from_its_database_is_stalled_and_unhealthy(
    tmp_path: Path, postgres_url: str, how: str
) -> None:
    proxy = LinkProxy(_target(postgres_url, 5432))
    try:
        with a_beat(tmp_path, postgres_url, "memory://", _through(postgres_url, proxy)) as watch:
            fault, heal = (proxy.down, proxy.up) if how == "cut" else (proxy.pause, proxy.resume)
            figures = run_fault(watch, tmp_path, fault, heal)
            if how == "pause":  # health through the paused link: one line, bounded
                proxy.pause()
                try:
                    paused_env = {**watch.env, "E2E_STORE": _through(postgres_url, proxy)}
                    code, text, took = health(paused_env, tmp_path)
                finally:
                    proxy.resume()
                assert code == 1, text
                assert len(text.splitlines()) == 1, text
                assert "unreachable" in text, text
                assert took < 20, f"health through a paused link took {took:.1f}s"
                print(f"health through the paused link: {took:.1f}s: {text}")
            log = beat_log(tmp_path)
    finally:
        proxy.close()
    said = "has not answered since" if how == "cut" else "a tick has waited"
    lines = [line for line in log.splitlines() if said in line]
    assert lines, f"beat did not say what it waits for ({said!r}):\n{log[-3000:]}"
    assert " due " in lines[0], lines[0]
    if how == "cut":
        assert len(lines) == 1, f"one line per outage, not {len(lines)}"
    else:  # the wait is bounded: the link is cut once it outlasts the server's limits
        cut = [line for line in log.splitlines() if "the link carries nothing" in line]
        assert cut, f"beat waited on the paused link for the whole pause:\n{log[-3000:]}"
    report(f"database link {how}", figures)


# -- a locked table -------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_task_table_locked_by_a_migration_is_stalled_and_unhealthy_postgres(
    tmp_path: Path, postgres_url: str
) -> None:
    locker = Store(postgres_url)
    conn = locker.engine.connect()
    try:
        with a_beat(tmp_path, postgres_url, "memory://") as watch:

            def lock() -> None:
                conn.begin()
                conn.exec_driver_sql("LOCK TABLE cronstore_periodic_task IN ACCESS EXCLUSIVE MODE")

            figures = run_fault(watch, tmp_path, lock, conn.rollback)
    finally:
        conn.close()
        locker.close()
    assert "locked" in figures[2], figures[2]
    report("LOCK TABLE ... ACCESS EXCLUSIVE (PostgreSQL)", figures)


@pytest.mark.mysql
def test_a_task_table_locked_by_a_migration_is_stalled_and_unhealthy_mariadb(
    tmp_path: Path, mysql_url: str
) -> None:
    locker = Store(mysql_url)
    conn = locker.engine.connect()
    try:
        with a_beat(tmp_path, mysql_url, "memory://") as watch:

            def lock() -> None:
                conn.exec_driver_sql("LOCK TABLES cronstore_periodic_task WRITE")

            def unlock() -> None:
                conn.exec_driver_sql("UNLOCK TABLES")

            figures = run_fault(watch, tmp_path, lock, unlock)
    finally:
        conn.close()
        locker.close()
    assert "locked" in figures[2], figures[2]
    report("LOCK TABLES ... WRITE (MariaDB)", figures)


# -- a broker that refuses ------------------------------------------------------------------


@contextlib.contextmanager
def private_redis(tmp_path: Path) -> Iterator[int]:
    """A redis-server of this test's own, 2 MB of memory and no eviction (never the shared
    one: filling it refuses every other client)."""
    server = "/usr/bin/redis-server"
    if not os.path.exists(server):
        pytest.skip("redis-server is not installed")
    port = free_port()
    args = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--appendonly", "no", "--maxmemory", "2mb", "--maxmemory-policy", "noeviction"]
    with open(tmp_path / "redis.log", "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        wait_for(lambda: _redis(port, "PING") == "+PONG", 10, "the private redis", tmp_path)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def _redis(port: int, *command: str) -> str:
    """Send one command (inline protocol); return the first line of the reply."""
    try:
        with socket.create_connection(("127.0.0.1", port), 2) as sock:
            sock.sendall((" ".join(command) + "\r\n").encode())
            return sock.recv(4096).decode(errors="replace").split("\r\n")[0]
    except OSError:
        return ""


def fill(port: int) -> None:
    """Fill the private Redis until it refuses writes (OOM); ``DEL filler`` heals it."""
    for _ in range(1000):  # inline commands stay under Redis's 64 KB limit for them
        reply = _redis(port, "APPEND", "filler", "x" * 50_000)
        if reply.startswith("-OOM"):
            return
    raise AssertionError("the private redis never refused a write")


@pytest.mark.redis
def test_a_broker_that_refuses_messages_is_a_stall_and_unhealthy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    with private_redis(tmp_path) as port:
        broker = f"redis://127.0.0.1:{port}/0"
        with a_beat(tmp_path, url, broker) as watch:
            figures = run_fault(
                watch, tmp_path, lambda: fill(port), lambda: _redis(port, "DEL", "filler") and None
            )
            log = beat_log(tmp_path)
    assert "maxmemory" in log, f"beat did not say why the broker refused:\n{log[-3000:]}"
    report("Redis refusing (maxmemory, noeviction)", figures)
