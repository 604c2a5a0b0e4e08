"""Ping URLs from the ledger: the heartbeat monitors teams already run (healthchecks.io,
Cronitor, Better Stack heartbeats all take this shape).

``cronstore_alert_pings`` maps task names to ping URLs; a name may be a shell-style
pattern (``"billing-*"``). A task's own name wins over the patterns, and among patterns
the first in the mapping's order that matches wins, so a catch-all (``"*"``) goes last.
Each alert pass, for each task with a URL, beat reports what changed in its newest fire
since the last look (:class:`~celery_cronstore.beat.changes.Changes`, as Sentry's
check-ins do): ``GET <url>/start`` when it started, ``GET <url>`` when it succeeded,
``GET <url>/fail`` when it ended badly — healthchecks.io's documented endpoints. Each
request carries ``?rid=<the fire's task id>``, so the monitor pairs the start and the end
of one run (and measures its duration), and the same report sent by two beat replicas is
one run there.

A ping is sent once, with ``cronstore_alert_timeout``, and not retried: a monitor that
missed a ping says so itself (that is what it is for), and the next change is the next
ping. A URL that does not answer 2xx is logged once, then again only after it answered;
it never stops the pass. Logs name the task and the URL's scheme and host alone: a ping
URL's path is its secret (``hc-ping.com/<uuid>``), and user and password, if the URL has
them, are sent as HTTP basic authentication, never logged. A 3xx is a failed ping: a
redirect is not followed (it could carry the credentials to another host).
"""

from __future__ import annotations

import base64
import fnmatch
import http.client
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from celery_cronstore.beat.changes import FAIL, START, Changes, run_id
from celery_cronstore.secrets import scrub
from celery_cronstore.store.alerts import NewestFire

__all__ = ["PingError", "Pings", "origin", "ping", "ping_url"]

logger = logging.getLogger("celery.beat")

#: Most bytes of a monitor's answer read (then the connection is closed).
_ANSWER_BYTES = 1024
#: The path each progress appends to the ping URL (a success is the URL itself).
_SUFFIX = {START: "/start", FAIL: "/fail"}
#: The characters that make a mapping key a pattern rather than a task name.
_GLOB = frozenset("*?[")


class PingError(Exception):
    """A ping the monitor did not take (the message says why, without the URL)."""


def ping_url(url: str, step: str, rid: str) -> str:
    """Return the URL reporting ``step`` of the run ``rid`` (user and password removed)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/") + _SUFFIX.get(step, "")
    query = f"{parts.query}&rid={rid}" if parts.query else f"rid={rid}"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, path, query, ""))


def origin(url: str) -> str:
    """Return what a log may say of ``url``: its scheme and host (and port)."""
    parts = urlsplit(url)
    return scrub(f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError with the 3xx status


_OPENER = urllib.request.build_opener(_NoRedirect)


def ping(url: str, step: str, rid: str, *, timeout: float) -> None:
    """GET the ping of ``step`` of run ``rid``; raise :class:`PingError` unless the
    monitor answered 2xx within ``timeout`` seconds."""
    headers = {"User-Agent": "celery-cronstore"}
    parts = urlsplit(url)
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    request = urllib.request.Request(ping_url(url, step, rid), headers=headers, method="GET")
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            answer.read(_ANSWER_BYTES)
            status = answer.status
    except urllib.error.HTTPError as exc:
        raise PingError(f"the monitor answered HTTP {exc.code}") from None
    except urllib.error.URLError as exc:
        raise PingError(f"no answer: {exc.reason}") from None
    except TimeoutError:
        raise PingError(f"no answer within {timeout:g}s") from None
    except (OSError, http.client.HTTPException) as exc:
        raise PingError(f"the connection failed: {type(exc).__name__}: {exc}") from None
    if not 200 <= status < 300:
        raise PingError(f"the monitor answered HTTP {status}")


class Pings:
    """The ping URLs of ``cronstore_alert_pings`` and what this beat pinged (see the module)."""

    def __init__(self, urls: Mapping[str, str], *, timeout: float) -> None:
        self._exact = dict(urls)
        self._patterns = [(key, url) for key, url in urls.items() if _GLOB & set(key)]
        self._timeout = timeout
        self._changes = Changes()
        #: URLs whose last ping failed (logged once): at most one per configured URL.
        self._failing: set[str] = set()
        #: Pings sent and failed so far (logs, tests).
        self.sent = 0
        self.failed = 0

    def __bool__(self) -> bool:
        return bool(self._exact)

    def url_for(self, name: str) -> str | None:
        """Return the ping URL of task ``name``: its own, else the first matching pattern's."""
        if name in self._exact:
            return self._exact[name]
        for pattern, url in self._patterns:
            if fnmatch.fnmatchcase(name, pattern):
                return url
        return None

    def look(
        self,
        newest: Sequence[NewestFire],
        now: datetime,
        stop: threading.Event | None = None,
    ) -> tuple[int, int]:
        """Ping what changed for the tasks with a URL; return ``(sent, failed)``."""
        urls: dict[str, str] = {}
        mine = []
        for row in newest:
            url = self.url_for(row.name)
            if url is not None:
                urls[row.name] = url
                mine.append(row)
        sent = failed = 0
        for row, step in self._changes.look(mine, now):
            if stop is not None and stop.is_set():
                break  # beat is stopping: these changes go unpinged, as after a crash
            url = urls[row.name]
            try:
                ping(url, step, str(run_id(row.fire.task_id)), timeout=self._timeout)
            except PingError as exc:
                failed += 1
                if url not in self._failing:
                    self._failing.add(url)
                    logger.warning(
                        "beat: ping URL of %s (%s) failed: %s (%s ping); not logged again"
                        " until it answers",
                        row.name,
                        origin(url),
                        scrub(str(exc)),
                        step,
                    )
                continue
            sent += 1
            if url in self._failing:
                self._failing.discard(url)
                logger.info("beat: ping URL of %s (%s) answers again", row.name, origin(url))
        self.sent += sent
        self.failed += failed
        return sent, failed
