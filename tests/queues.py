"""Reading what beat sent: drain a queue of the app's (in-memory) broker."""

from __future__ import annotations

import queue
from typing import Any

from celery import Celery


def drain(app: Celery, name: str = "q") -> list[Any]:
    """Take every message waiting in queue ``name``, acknowledged, in order."""
    out = []
    with app.connection_for_read() as conn:
        q = conn.SimpleQueue(name)
        while True:
            try:
                message = q.get(timeout=0.05)
            except queue.Empty:
                break
            message.ack()
            out.append(message)
        q.close()
    return out
