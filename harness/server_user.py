"""Server programs the tests start (PostgreSQL's, PgBouncer) refuse to run as root: under
root they run as the ``postgres`` user, through ``runuser``, in directories it owns."""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

__all__ = ["SERVER_USER", "as_server_user", "give_to_server_user", "why_not_as_root"]

#: The user a root process runs the servers as.
SERVER_USER = "postgres"


def why_not_as_root(what: str) -> str | None:
    """Return why ``what`` cannot run as the server user here (we are root and it or
    ``runuser`` is missing), or ``None``."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        return f"running as root and there is no {SERVER_USER!r} user to run {what} as"
    if shutil.which("runuser") is None:
        return "running as root and runuser is not installed"
    return None


def as_server_user(command: list[str]) -> list[str]:
    """Return ``command``, run as the server user when we are root."""
    return ["runuser", "-u", SERVER_USER, "--", *command] if os.geteuid() == 0 else command


def give_to_server_user(*paths: Path) -> None:
    """Make ``paths`` the server user's (when we are root)."""
    if os.geteuid() == 0:
        user = pwd.getpwnam(SERVER_USER)
        for path in paths:
            os.chown(path, user.pw_uid, user.pw_gid)
