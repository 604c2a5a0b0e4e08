"""A PostgreSQL primary and its streaming standby of our own, to fail over for real.

Both servers run from a temporary directory on free ports (never the shared server on
5432): ``initdb`` makes the primary, ``pg_basebackup -R`` the standby, and replication is
synchronous (``synchronous_standby_names = '*'``, ``remote_apply``), so a commit the
primary acknowledged is applied on the standby too (a read there sees it) and a failover
loses nothing; or, with ``synchronous=False``, asynchronous: the standby streams through a
TCP proxy the test owns (:meth:`PgPair.cut_replication`), so the test can make the
primary commit what the standby never receives, as a lagging standby would.
:meth:`PgPair.kill_primary` sends ``SIGKILL`` to the primary's postmaster
(its backends see it die and hang up on their clients), :meth:`PgPair.promote` makes the
standby the primary.

``initdb`` refuses to run as root: under root the servers run as the ``postgres`` user
(``runuser``), which owns the directory. :func:`why_not` says why a pair cannot run here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from harness.server_user import as_server_user, give_to_server_user, why_not_as_root
from harness.tcp_proxy import Proxy

__all__ = ["BIN", "PgPair", "why_not"]


from harness.ports import free_port


def _server_bin() -> Path:
    """Return the newest of Debian's PostgreSQL server directories (``CRONSTORE_PG_BIN``
    overrides)."""
    if os.environ.get("CRONSTORE_PG_BIN"):
        return Path(os.environ["CRONSTORE_PG_BIN"])
    versions = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.parent.name.isdigit()),
        key=lambda p: int(p.parent.name),
    )
    return versions[-1] if versions else Path("/usr/lib/postgresql/15/bin")


#: Where PostgreSQL's server programs are (``initdb``, ``pg_ctl``, ``pg_basebackup``).
BIN = _server_bin()
#: Settings of both servers: small, fast to start, replication on.
_SETTINGS = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{sockets}'
max_connections = 40
shared_buffers = 16MB
fsync = off
full_page_writes = off
wal_level = replica
max_wal_senders = 4
wal_keep_size = 64MB
hot_standby = on
synchronous_standby_names = '*'
synchronous_commit = remote_apply
logging_collector = off
"""
#: The primary of an asynchronous pair: a commit waits for no standby.
_ASYNCHRONOUS = """
synchronous_standby_names = ''
synchronous_commit = on
"""


def why_not() -> str | None:
    """Return why a pair cannot run on this machine, or ``None`` when it can."""
    for program in ("initdb", "pg_ctl", "pg_basebackup", "postgres"):
        if not (BIN / program).exists():
            return f"{BIN / program} not found (set CRONSTORE_PG_BIN)"
    return why_not_as_root("initdb")


class PgPair:
    """A primary on :attr:`ports` [0] and a synchronous standby on [1] (see the module
    docstring); use it as a context manager, which stops both and removes the directory."""

    def __init__(self, base: Path | None = None, *, synchronous: bool = True) -> None:
        self.synchronous = synchronous
        #: The standby's link to the primary (asynchronous pairs only).
        self.link: Proxy | None = None
        self.base = Path(base or tempfile.mkdtemp(prefix="cronstore-pgpair-"))
        self.ports = (free_port(), free_port())
        self.dirs = (self.base / "primary", self.base / "standby")
        self.logs = (self.base / "primary.log", self.base / "standby.log")
        #: The servers killed (their pid file stays behind; the pid may be reused).
        self.killed: set[int] = set()

    # -- running the server programs --------------------------------------------------

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = as_server_user([str(BIN / args[0]), *args[1:]])
        return subprocess.run(
            command, check=check, capture_output=True, text=True, timeout=120, cwd=self.base
        )

    def _own(self) -> None:
        give_to_server_user(self.base)
        self.base.chmod(0o700)

    def _configure(self, index: int, extra: str = "") -> None:
        settings = _SETTINGS.format(port=self.ports[index], sockets=self.base)
        with open(self.dirs[index] / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write(settings + extra)

    def _start(self, index: int) -> None:
        self._run("pg_ctl", "-D", str(self.dirs[index]), "-l", str(self.logs[index]), "-w",
                  "-t", "60", "start")  # fmt: skip

    # -- the pair ---------------------------------------------------------------------

    def start(self) -> PgPair:
        """Make and start both servers; return once the standby streams synchronously."""
        self._own()
        self._run("initdb", "-D", str(self.dirs[0]), "-U", "postgres", "--auth=trust", "-N",
                  "-E", "UTF8", "--locale=C")  # fmt: skip
        self._configure(0, "" if self.synchronous else _ASYNCHRONOUS)
        self._start(0)
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.ports[0]), "-U",
                  "postgres", "-D", str(self.dirs[1]), "-R", "-X", "stream")  # fmt: skip
        if not self.synchronous:
            self.link = Proxy(("127.0.0.1", self.ports[0]))
            self._stream_through(self.link.port)
        # Once promoted the standby has no standby of its own: waiting for one would
        # block every commit.
        self._configure(1, "synchronous_standby_names = ''\n")
        self._start(1)
        deadline = time.monotonic() + 60
        admin = sa.create_engine(self.url(0, "postgres"), poolclass=sa.pool.NullPool)
        try:
            while True:
                with admin.connect() as conn:
                    state = conn.exec_driver_sql(
                        "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'"
                    ).scalar()
                if state == ("sync" if self.synchronous else "async"):
                    return self
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the standby did not stream (state {state!r})")
                time.sleep(0.1)
        finally:
            admin.dispose()

    def url(self, index: int, database: str = "postgres") -> str:
        """Return a URL of one server alone (0: the first primary, 1: the standby)."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.ports[index]}/{database}"

    def failover_url(self, database: str) -> str:
        """Return the multi-host URL over both servers that connects to whichever one
        accepts writes (libpq's ``target_session_attrs=read-write``)."""
        hosts = "&".join(f"host=127.0.0.1:{port}" for port in self.ports)
        return f"postgresql+psycopg://postgres@/{database}?{hosts}&target_session_attrs=read-write"

    def create_database(self, name: str) -> None:
        """Create database ``name`` on the primary (it replicates to the standby)."""
        admin = sa.create_engine(self.url(0), isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        finally:
            admin.dispose()

    def postmaster_pid(self, index: int) -> int:
        """Return the process id of server ``index``'s postmaster."""
        return int((self.dirs[index] / "postmaster.pid").read_text().splitlines()[0])

    def _stream_through(self, port: int) -> None:
        """Point the standby's ``primary_conninfo`` (``pg_basebackup -R``) at ``port``."""
        auto = self.dirs[1] / "postgresql.auto.conf"
        text = auto.read_text()
        auto.write_text(text.replace(f"port={self.ports[0]}", f"port={port}"))

    def cut_replication(self) -> None:
        """Cut the standby's link to the primary (asynchronous pairs): what the primary
        commits from now on never reaches the standby."""
        if self.link is None:
            raise RuntimeError("only an asynchronous pair streams through a link of its own")
        self.link.down()

    def caught_up(self) -> bool:
        """Return whether the standby has replayed everything the primary wrote."""
        with contextlib.ExitStack() as stack:
            engines = [sa.create_engine(self.url(i), poolclass=sa.pool.NullPool) for i in (0, 1)]
            for engine in engines:
                stack.callback(engine.dispose)
            with engines[0].connect() as conn:
                written = conn.exec_driver_sql("SELECT pg_current_wal_lsn()").scalar_one()
            with engines[1].connect() as conn:
                return bool(
                    conn.exec_driver_sql(
                        "SELECT pg_last_wal_replay_lsn() >= %(lsn)s::pg_lsn", {"lsn": written}
                    ).scalar_one()
                )

    def stop_primary(self) -> None:
        """Stop the primary cleanly (a planned switchover): a fast shutdown sends every
        WAL record to the standby before the server exits."""
        self._run("pg_ctl", "-D", str(self.dirs[0]), "-m", "fast", "-w", "-t", "60", "stop")
        self.killed.add(0)

    def kill_primary(self) -> None:
        """Kill the primary's postmaster with ``SIGKILL`` (a crash, not a shutdown)."""
        os.kill(self.postmaster_pid(0), signal.SIGKILL)
        self.killed.add(0)

    def promote(self) -> None:
        """Promote the standby; return once it has left recovery."""
        self._run("pg_ctl", "-D", str(self.dirs[1]), "-w", "-t", "60", "promote")

    def accepts_writes(self, index: int) -> bool:
        """Return whether server ``index`` accepts a read-write session right now."""
        engine = sa.create_engine(
            self.url(index) + "?target_session_attrs=read-write&connect_timeout=2",
            poolclass=sa.pool.NullPool,
        )
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
            return True
        except sa.exc.OperationalError:
            return False
        finally:
            engine.dispose()

    def stop(self) -> None:
        """Stop both servers (whatever state they are in) and remove the directory."""
        for index, data in enumerate(self.dirs):
            if index not in self.killed and (data / "postmaster.pid").exists():
                with contextlib.suppress(Exception):
                    self._run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop",
                              check=False)  # fmt: skip
        if self.link is not None:
            self.link.close()
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> PgPair:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
