"""How beat stops on SIGTERM or SIGINT: between two chunks of a send, never inside one.

Celery's beat answers SIGTERM by closing the scheduler from inside the signal handler and
raising ``SystemExit`` wherever the main thread happens to be. In the middle of a send that
leaves fires the broker took recorded as merely claimed (the next beat sends them again:
a plain task runs twice), a kombu batch half torn down, and a close that publishes again
on it (a beat that never exits). :class:`StopSignal` replaces that handler once beat's
scheduler is built: outside a send it stops beat at once, as Celery does; inside one it
only records the request, the send ends its chunk and records it, and beat stops at the
end of its tick. The scheduler's ``close`` then hands back what it did not send.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["StopSignal"]

logger = logging.getLogger("celery.beat")


class StopSignal:
    """SIGTERM/SIGINT for one beat: a request to stop, honoured at the next safe point."""

    def __init__(self) -> None:
        #: A stop was asked for (beat ends its tick, then stops).
        self.requested = False
        self._busy = 0
        self._closing = False
        self._previous: dict[int, Any] = {}

    def install(self) -> bool:
        """Take over SIGTERM and SIGINT (main thread only: an embedded beat in a thread
        keeps its host's handlers). Return whether they were taken over."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous.setdefault(signum, signal.signal(signum, self._handle))
        return True

    def closing(self) -> None:
        """Beat is closing: from now on nothing raises ``SystemExit`` (the close finishes
        its work), and the handlers taken over are given back."""
        self._closing = True
        if threading.current_thread() is threading.main_thread():
            for signum, previous in self._previous.items():
                if previous is not None:
                    signal.signal(signum, previous)
        self._previous.clear()

    @contextlib.contextmanager
    def sending(self) -> Iterator[None]:
        """Mark a send in progress: a stop asked for meanwhile waits for its end (the
        send stops after its current chunk and records it), then beat stops."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1
        self.check()

    def check(self) -> None:
        """Stop now (``SystemExit``) if a stop was asked for."""
        if self.requested and not self._busy and not self._closing:
            raise SystemExit()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.requested:
            logger.info("beat: %s received; stopping", signal.Signals(signum).name)
        self.requested = True
        self.check()
