"""A real HTTP receiver on loopback for what beat sends out (alert webhooks, Sentry
envelopes): ``http.server`` on a thread, answering as a test tells it to.

Each request is recorded with its headers, its body (gunzipped) and how it was answered.
``script`` is a list of behaviours taken one per request, then ``then`` for the rest:
``"ok"`` (200), ``"fail"`` (500), ``"slow"`` (200 after ``slow`` seconds, later than
beat's timeout), ``"down"`` (the connection is closed without an answer).
"""

from __future__ import annotations

import contextlib
import gzip
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    """One request as the receiver saw it."""

    path: str
    #: By lower-case name.
    headers: dict[str, str]
    body: bytes
    #: How it was answered: ok, fail, slow, down.
    answer: str


@dataclass
class Receiver:
    """The receiver's state (its address, what it got, what it will answer)."""

    url: str = ""
    port: int = 0
    script: list[str] = field(default_factory=list)
    then: str = "ok"
    slow: float = 1.0
    #: Seconds every other answer waits (within the sender's timeout).
    lag: float = 0.0
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_answer(self) -> str:
        with self.lock:
            return self.script.pop(0) if self.script else self.then

    def record(self, item: Received) -> None:
        with self.lock:
            self.received.append(item)

    def answered(self, *answers: str) -> list[Received]:
        """Return the requests answered one of ``answers`` (all if none are named)."""
        with self.lock:
            return [r for r in self.received if not answers or r.answer in answers]


def _handler(state: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(size)
            if self.headers.get("Content-Encoding") == "gzip":
                raw = gzip.decompress(raw)
            answer = state.next_answer()
            headers = {k.lower(): v for k, v in self.headers.items()}
            state.record(Received(self.path, headers, raw, answer))
            if answer == "down":
                self.close_connection = True
                self.connection.close()
                return
            if answer == "slow":
                time.sleep(state.slow)
            elif state.lag:
                time.sleep(state.lag)
            self.send_response(500 if answer == "fail" else 200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            with contextlib.suppress(OSError):  # the sender gave up waiting
                self.wfile.write(b"{}")

        do_GET = do_POST  # ping URLs (GET, no body): recorded and answered the same way

        def log_message(self, *args: object) -> None:  # quiet
            pass

    return Handler


@contextmanager
def receiver(**options: object) -> Iterator[Receiver]:
    """Run a receiver on a free loopback port for the ``with`` block."""
    state = Receiver(**options)  # type: ignore[arg-type]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.port = server.server_address[1]
    state.url = f"http://127.0.0.1:{state.port}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
