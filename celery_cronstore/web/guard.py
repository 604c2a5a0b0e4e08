"""What the dashboard checks before any page runs: the ``Host`` header, login attempts and
redirect targets.

* :class:`HostCheck`: a page is served only to a ``Host`` the dashboard was told about
  (localhost names, the address it is bound to, ``cronstore_web_allowed_hosts``). A web
  page the operator visits cannot point its own name at 127.0.0.1 (DNS rebinding) and
  read the dashboard: its requests carry its own name as ``Host``.
* :class:`LoginLimiter`: a token bucket per client address for every attempt to prove
  who one is (``POST /login``, an ``Authorization`` header); a success gives its token
  back. Memory is bounded: at most ``max_clients`` buckets, the least recently used
  dropped first.
* :func:`safe_next`: where a login may send the browser afterwards (a path on this site).
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from werkzeug.sansio.utils import host_is_trusted

__all__ = [
    "ALWAYS_ALLOWED",
    "HostCheck",
    "LoginLimiter",
    "parse_hosts",
    "safe_next",
    "unsafe_next",
]

#: Names that always reach this machine only (RFC 6761 reserves ``localhost``).
ALWAYS_ALLOWED = ("localhost", "127.0.0.1", "::1")
_WILDCARD_BINDS = ("", "0.0.0.0", "::")


def parse_hosts(value: str | Iterable[str] | None) -> list[str]:
    """Return host names from a setting: a list, or ``a.example,.b.example`` text."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    hosts = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(
                f"cronstore_web_allowed_hosts must hold host names, got {type(item).__name__}"
            )
        host = item.strip().lower()
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if host:
            hosts.append(host)
    return hosts


def _split(header: str) -> str | None:
    """Return the host name of a ``Host`` header (no port, no IPv6 brackets), or ``None``
    if it is malformed."""
    header = header.strip().lower()
    if not host_is_trusted(header, None):  # Werkzeug's syntax check: name or [v6], port
        return None
    if header.startswith("["):
        return header[1 : header.index("]")]
    return header.partition(":")[0].rstrip(".")


@dataclass(frozen=True)
class HostCheck:
    """The ``Host`` names the dashboard answers; ``*`` in ``allowed`` turns the check off."""

    allowed: tuple[str, ...] = ()
    bound: str | None = None

    @classmethod
    def build(cls, allowed: Iterable[str] = (), bound: str | None = None) -> HostCheck:
        names = [*ALWAYS_ALLOWED, *parse_hosts(allowed)]
        if bound is not None:
            bound_name = parse_hosts([bound])
            if bound_name and bound_name[0] not in _WILDCARD_BINDS:
                names.append(bound_name[0])
        return cls(tuple(dict.fromkeys(names)), bound)

    def refusal(self, header: str | None) -> str | None:
        """Return why a request with ``Host: header`` is refused, or ``None``."""
        # No Host at all (HTTP/1.0, some probes): not a browser, so not DNS rebinding.
        if "*" in self.allowed or header is None:
            return None
        name = _split(header)
        if name is not None:
            if name in self.allowed:
                return None
            for entry in self.allowed:
                if entry.startswith(".") and (name.endswith(entry) or name == entry[1:]):
                    return None
            if _is_loopback(name):
                return None
        shown = header[:100].encode("ascii", "backslashreplace").decode("ascii")
        return (
            f"unknown Host {shown!r}: this dashboard answers only to "
            f"{', '.join(self.allowed)}. To reach it by another name, add the name to "
            "cronstore_web_allowed_hosts (or `cronstore web --allowed-hosts NAME`)"
        )


def _is_loopback(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class LoginLimiter:
    """A token bucket per client: ``capacity`` attempts at once, then one every
    ``refill_seconds``. Thread-safe; at most ``max_clients`` buckets are kept."""

    def __init__(
        self,
        capacity: int = 10,
        refill_seconds: float = 6.0,
        *,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity < 1 or refill_seconds <= 0 or max_clients < 1:
            raise ValueError("capacity, refill_seconds and max_clients must be positive")
        self.capacity = capacity
        self.refill_seconds = refill_seconds
        self.max_clients = max_clients
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(address: str | None) -> str:
        """Return the bucket of a client address: IPv6 clients by their /64 (one host
        usually holds a whole /64, so single addresses would be free to rotate)."""
        try:
            ip = ipaddress.ip_address(address or "")
        except ValueError:
            return address or "unknown"
        if ip.version == 6:
            return str(ipaddress.ip_network(f"{ip}/64", strict=False))
        return str(ip)

    def take(self, address: str | None) -> float:
        """Take one attempt for ``address``: return 0 if it may go ahead, else the seconds
        until it may try again."""
        key = self.key(address)
        now = self.clock()
        with self._lock:
            tokens, since = self._buckets.pop(key, (float(self.capacity), now))
            tokens = min(self.capacity, tokens + (now - since) / self.refill_seconds)
            if tokens >= 1:
                self._store(key, tokens - 1, now)
                return 0.0
            self._store(key, tokens, now)
            return (1 - tokens) * self.refill_seconds

    def give_back(self, address: str | None) -> None:
        """Return the attempt a successful login took (successes are not limited)."""
        key = self.key(address)
        with self._lock:
            if key in self._buckets:
                tokens, since = self._buckets[key]
                self._buckets[key] = (min(self.capacity, tokens + 1), since)

    def _store(self, key: str, tokens: float, now: float) -> None:
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)  # the least recently used

    def __len__(self) -> int:
        return len(self._buckets)


def retry_after(seconds: float) -> str:
    """Return a ``Retry-After`` value (whole seconds, at least 1)."""
    return str(max(1, math.ceil(seconds)))


def unsafe_next(target: str) -> str | None:
    """Return why ``target`` may not be a redirect target, or ``None`` if it is a path on
    this site.

    Browsers drop tabs and newlines inside URLs and read ``\\`` as ``/``, so ``/\\t/evil``
    and ``/\\evil`` both mean ``//evil``: another origin. Only a path that starts with one
    ``/`` and holds no backslash, control character or scheme is accepted.
    """
    if not target.startswith("/"):
        return "it must be a path on this site, starting with /"
    if target.startswith("//"):
        return "it must not start with // (that names another site)"
    if "\\" in target:
        return "it must not contain a backslash"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in target):
        return "it must not contain control characters (tabs, newlines, ...)"
    if any(c.isspace() for c in target[:2]):
        return "it must not start with whitespace"
    return None


def safe_next(target: str, default: str) -> str:
    """Return ``target`` if it is a path on this site (no open redirect), else ``default``."""
    return default if not target or unsafe_next(target) is not None else target
