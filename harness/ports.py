"""A free loopback port for a server a test starts, outside the kernel's ephemeral range.

``bind(("127.0.0.1", 0))`` hands out a port from the ephemeral range, which every
outgoing connection draws from too: between the moment a test learns the port and the
moment its server binds it, a database or broker connection of another test can take it
("Address already in use", seen in CI with two xdist workers). Ports below the range
are only ever taken by a listening server, so one that binds now stays free until the
server binds it, unless another test picks the very same one (one in 12,000).
"""

from __future__ import annotations

import random
import socket

__all__ = ["free_port"]

#: Where the ports come from: below Linux's default ephemeral range (32768-60999).
LOW, HIGH = 20000, 32000


def free_port() -> int:
    """Return a loopback port nothing listens on, below the ephemeral range."""
    for _ in range(200):
        port = random.randrange(LOW, HIGH)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {LOW} and {HIGH}")
