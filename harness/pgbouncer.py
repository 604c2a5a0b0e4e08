"""A PgBouncer of our own in front of the shared PostgreSQL server, in ``transaction`` or
``session`` pooling mode, to run the store through a real connection pooler.

It runs from a temporary directory on a free loopback port and passes every database
through to the server (``* = host=... port=...``), so a scratch database made on the
server is reachable through it under the same name. Trust authentication (the users
``postgres`` and ``root`` in its ``auth_file``; any other role a test creates is looked
up on the server as ``auth_user = postgres``), ``max_client_conn`` 400 and a
``default_pool_size`` of 20 server connections per database and user: many clients
really share few server sessions, as in production.

PgBouncer refuses to run as root: under root it runs as the ``postgres`` user
(``runuser``), which owns the directory. :func:`why_not` says why it cannot run here.
:meth:`PgBouncer.restart` stops it at once (clients see their connections cut) and starts
it again on the same port.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from harness.ports import free_port
from harness.server_user import as_server_user, give_to_server_user, why_not_as_root

__all__ = ["MODES", "PROGRAM", "PgBouncer", "why_not"]

#: The pooling modes the harness runs (``statement`` pooling cannot run transactions).
MODES = ("transaction", "session")
#: The PgBouncer program (Debian's package; ``CRONSTORE_PGBOUNCER`` overrides).
PROGRAM = Path(os.environ.get("CRONSTORE_PGBOUNCER", "/usr/sbin/pgbouncer"))
#: The users clients may connect as (trust: no passwords).
USERS = ("postgres", "root")

_CONFIG = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
pool_mode = {mode}
auth_type = trust
auth_file = {base}/users.txt
auth_user = postgres
max_client_conn = 400
default_pool_size = 20
min_pool_size = 0
reserve_pool_size = 0
server_lifetime = 3600
server_idle_timeout = 60
ignore_startup_parameters = extra_float_digits,options,application_name
pidfile = {base}/pgbouncer.pid
logfile = {base}/pgbouncer.log
log_connections = 0
log_disconnections = 0
"""


def why_not() -> str | None:
    """Return why a PgBouncer cannot run on this machine, or ``None`` when it can."""
    if not PROGRAM.exists():
        return f"{PROGRAM} not found (apt-get install pgbouncer, or set CRONSTORE_PGBOUNCER)"
    return why_not_as_root("pgbouncer")


class PgBouncer:
    """One PgBouncer process in ``mode`` in front of ``server`` (host, port); use it as a
    context manager, which stops it and removes its directory."""

    def __init__(
        self, mode: str, server: tuple[str, int] = ("127.0.0.1", 5432), base: Path | None = None
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"pool mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        self.server = server
        self.base = Path(base or tempfile.mkdtemp(prefix=f"cronstore-pgbouncer-{mode}-"))
        self.port = free_port()
        self.log = self.base / "pgbouncer.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of database ``test`` as ``postgres`` through this PgBouncer."""
        return self.database_url("test")

    def database_url(self, database: str, user: str = "postgres") -> str:
        """Return the SQLAlchemy URL of ``database`` as ``user`` through this PgBouncer."""
        return f"postgresql+psycopg://{user}@127.0.0.1:{self.port}/{database}"

    def through(self, url: str) -> str:
        """Return ``url`` (a database on :attr:`server`) with its host and port made
        this PgBouncer's: the same database and user, through the pooler."""
        import sqlalchemy as sa

        parsed = sa.make_url(url).set(host="127.0.0.1", port=self.port)
        return parsed.render_as_string(hide_password=False)

    def start(self) -> PgBouncer:
        """Write the configuration and start PgBouncer; return once it accepts clients."""
        self.base.mkdir(parents=True, exist_ok=True)
        (self.base / "users.txt").write_text(
            "".join(f'"{user}" ""\n' for user in USERS), encoding="utf-8"
        )
        host, port = self.server
        config = self.base / "pgbouncer.ini"
        config.write_text(
            _CONFIG.format(host=host, port=port, listen=self.port, mode=self.mode, base=self.base),
            encoding="utf-8",
        )
        self._own()
        command = as_server_user([str(PROGRAM), str(config)])
        (self.base / "pgbouncer.pid").unlink(missing_ok=True)
        self._process = subprocess.Popen(
            command,
            cwd=self.base,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._wait_until_listening()
        return self

    def stop(self) -> None:
        """Stop PgBouncer at once (``SIGTERM``: every client connection is cut)."""
        process, self._process = self._process, None
        if process is None:
            return
        pid = self._pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        deadline = time.monotonic() + 10
        while self._listening() and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self, down: float = 0.0) -> None:
        """Stop PgBouncer, wait ``down`` seconds, start it again on the same port."""
        self.stop()
        time.sleep(down)
        self.start()

    def close(self) -> None:
        """Stop PgBouncer and remove its directory (idempotent)."""
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    @property
    def running(self) -> bool:
        """Whether the PgBouncer process is alive."""
        return self._process is not None and self._process.poll() is None

    def _own(self) -> None:
        give_to_server_user(self.base, *self.base.iterdir())
        self.base.chmod(0o700)

    def _pid(self) -> int | None:
        """Return PgBouncer's own process id (``runuser`` is its parent), from its pid file."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.base / "pgbouncer.pid").read_text().split()[0])
        return None

    def _listening(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 1):
            return True
        return False

    def _wait_until_listening(self) -> None:
        deadline = time.monotonic() + 20
        while not (self._listening() and self._pid() is not None):
            process = self._process
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {process.returncode}: {self._tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pgbouncer did not listen on {self.port}: {self._tail()}")
            time.sleep(0.05)

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            return " | ".join(self.log.read_text(errors="replace").splitlines()[-5:])
        return "(no log)"

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
