"""Messages that name the fix for a database URL or a driver that will not work.

Pure functions (no SQLAlchemy, no I/O): the store calls :func:`url_problem` before it
builds an engine and :func:`driver_hint` when building one fails to import a driver;
beat and the CLI print the result as one line. Neither message ever contains the URL's
password. :func:`network_args` is the driver options that bound every network wait.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "CONNECT_TIMEOUT",
    "EXTRA_OF_MODULE",
    "driver_hint",
    "network_args",
    "url_problem",
]

_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://")

#: Top-level module -> the celery-cronstore extra that installs it.
EXTRA_OF_MODULE = {
    "psycopg": "postgres",
    "psycopg_binary": "postgres",
    "pymysql": "mysql",
    "redis": "redis",
    # kombu 5.7's Redis transport imports packaging; kombu[redis] brings it.
    "packaging": "redis",
}

#: Drivers SQLAlchemy picks when a URL names none, and the URL to write instead.
_DEFAULT_DRIVERS = {
    "psycopg2": ("postgresql+psycopg", "postgres"),
    "MySQLdb": ("mysql+pymysql", "mysql"),
}


def url_problem(url: str) -> str | None:
    """Return what is wrong with database ``url`` and how to write it, or ``None``.

    Catches what SQLAlchemy reports obscurely: the ``postgres://`` scheme (Heroku-style,
    which SQLAlchemy refuses), a URL without a scheme, and a SQLite URL whose path was
    read as a host name.
    """
    if not isinstance(url, str) or not url.strip():
        return "the store URL is empty: set cronstore_url, e.g. sqlite:///cronstore.sqlite"
    match = _SCHEME.match(url.strip())
    if match is None:
        return (
            "the store URL has no scheme: write a SQLAlchemy URL such as "
            "postgresql+psycopg://user:password@host/dbname or sqlite:///cronstore.sqlite"
        )
    scheme = match.group("scheme").lower()
    backend = scheme.partition("+")[0]
    if backend == "postgres":
        return (
            f"{scheme}:// is not a SQLAlchemy URL scheme: write postgresql+psycopg://"
            "user:password@host/dbname (psycopg 3: pip install 'celery-cronstore[postgres]')"
        )
    if backend == "sqlite":
        rest = url.strip()[match.end() :]
        host = rest.split("/", 1)[0].split("?", 1)[0]
        if host:
            return (
                f"sqlite://{host}/... names a host, which SQLite has none of: write "
                f"sqlite:///{rest} for a path relative to the working directory or "
                "sqlite:////absolute/path.sqlite"
            )
    return None


def driver_hint(exc: ImportError, url: str) -> str:
    """Return one line saying which import failed for ``url`` and what to install.

    ``exc`` is the error raised while building the engine (or the broker transport);
    the URL is shown by scheme only, so no password can leak.
    """
    module = (exc.name or _module_in_message(str(exc)) or "").split(".")[0]
    match = _SCHEME.match(url.strip())
    shown = f"{match.group('scheme')}://" if match else "the URL"
    if module in _DEFAULT_DRIVERS:
        write, default_extra = _DEFAULT_DRIVERS[module]
        return (
            f"{shown} needs the {module} driver, which celery-cronstore does not install: "
            f"write {write}://... instead and pip install 'celery-cronstore[{default_extra}]'"
        )
    extra = EXTRA_OF_MODULE.get(module)
    if extra is not None:
        return (
            f"{shown} needs the Python module {module!r}, which is not installed: "
            f"pip install 'celery-cronstore[{extra}]'"
        )
    if module:
        return f"{shown} needs the Python module {module!r}, which is not installed: pip install it"
    return f"{shown}: a driver could not be imported ({exc}); install the driver its URL names"


def _module_in_message(message: str) -> str | None:
    found = re.search(r"No module named '([^']+)'", message)
    return found.group(1) if found else None


#: Seconds a new database connection may take to open (libpq's ``connect_timeout``,
#: PyMySQL's): a paused or black-holed link fails the attempt instead of hanging.
CONNECT_TIMEOUT = 5
#: TCP keepalive: idle seconds before the first probe, seconds between probes, probes.
KEEPALIVE = (10, 5, 3)
#: Seconds a driver may wait for a reply beyond the session's own statement limit.
READ_SLACK = 5.0


def network_args(
    backend: str, session_timeout: float | None, given: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Return the driver's ``connect_args`` that bound every wait on the network, with the
    caller's ``given`` ones on top.

    PostgreSQL (psycopg): a connect timeout, TCP keepalives, and ``tcp_user_timeout``
    (sent data unacknowledged that long closes the link: a dead server host or a
    partition ends a wait that the server's own timeouts cannot, as it never sees the
    statement). MySQL/MariaDB (PyMySQL): a connect timeout and, with a
    ``session_timeout``, read and write timeouts a little longer than it. SQLite: none.
    """
    args: dict[str, Any] = {}
    if backend == "postgresql":
        idle, interval, count = KEEPALIVE
        args = {
            "connect_timeout": CONNECT_TIMEOUT,
            "keepalives": 1,
            "keepalives_idle": idle,
            "keepalives_interval": interval,
            "keepalives_count": count,
            "tcp_user_timeout": (idle + interval * count) * 1000,
        }
    elif backend in ("mysql", "mariadb"):
        args = {"connect_timeout": CONNECT_TIMEOUT}
        if session_timeout is not None:
            wait = int(session_timeout + READ_SLACK)
            args.update(read_timeout=wait, write_timeout=wait)
    return {**args, **(given or {})}
