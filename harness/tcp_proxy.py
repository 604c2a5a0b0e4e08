"""A TCP proxy that can cut every connection: a database outage without stopping it."""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    """Forward 127.0.0.1:<port> to ``target``; ``down()`` drops everything until ``up()``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port: int = self._server.getsockname()[1]
        self._alive = True
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if not self._alive:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)  # the 5 s was for connecting: idle links stay up
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def down(self) -> None:
        """Refuse new connections and cut the open ones (the database 'goes away')."""
        self._alive = False
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._open.clear()

    def up(self) -> None:
        """Accept connections again."""
        self._alive = True

    def close(self) -> None:
        self.down()
        self._server.close()
