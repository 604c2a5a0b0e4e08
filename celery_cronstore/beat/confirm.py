"""One batch's messages and, with RabbitMQ's publisher confirms, one wait for all their
acks.

kombu's confirm mode waits for each message's ack before it sends the next (a round trip
each). :func:`confirmed` sends the batch on a channel of its own that does not wait, and
awaits the acks of the whole batch together at the end. :class:`Tally` is what a batch
knows of its messages: where they go and the delivery tag of each, in order.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from celery_cronstore.beat.outcome import Acks, BatchFailed

__all__ = ["CONFIRM_WAIT", "Tally", "confirmed", "confirming"]

#: Longest wait (seconds) for RabbitMQ's confirms of one batch before it is held back.
CONFIRM_WAIT = 30.0


class Tally:
    """The messages of one batch, in the order sent.

    ``out`` is where the batch's own messages go (the producer, or a producer on a
    confirmed channel that does not wait); ``tags`` holds each message's delivery tag on
    that channel, or ``None`` for one sent through Celery's path, which waited for its own
    confirm.
    """

    def __init__(self, out: Any) -> None:
        self.out = out
        self.sent = 0
        self.tags: list[int | None] = []

    def published(self) -> None:
        """Count a message sent on ``out``."""
        self.sent += 1
        self.tags.append(self.sent)

    def passed(self) -> None:
        """Count a message sent through Celery's own path."""
        self.tags.append(None)


def confirming(producer: Any) -> bool:
    """Return whether ``producer``'s channel is RabbitMQ's with publisher confirms."""
    channel = producer.channel
    return bool(getattr(getattr(channel, "connection", None), "confirm_publish", False)) and (
        hasattr(channel, "_basic_publish")
    )


@contextlib.contextmanager
def confirmed(producer: Any) -> Iterator[Tally]:
    """Yield the tally of a batch sent on a confirmed channel of its own; on leaving, wait
    for the acks of the whole batch.

    A nack, no confirm within :data:`CONFIRM_WAIT`, or a broken connection raises
    :class:`~celery_cronstore.beat.outcome.BatchFailed` saying which messages were
    confirmed and which refused.
    """
    from kombu.messaging import Producer as _Producer

    Producer: Any = _Producer  # kombu ships no types

    connection = producer.connection
    channel = connection.channel()
    acks = Acks()
    try:
        channel.confirm_select()
        channel._confirm_selected = True
        channel.basic_publish = channel._basic_publish  # this channel does not wait
        channel.events["basic_ack"].add(acks.ack)
        channel.events["basic_nack"].add(acks.nack)
        tally = Tally(Producer(channel, exchange=producer.exchange, auto_declare=False))
        try:
            yield tally
            deadline = time.monotonic() + CONFIRM_WAIT
            while not acks.covers(tally.sent):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise acks.failed(
                        f"RabbitMQ confirmed {acks.upto} of {tally.sent} messages "
                        f"in {CONFIRM_WAIT:g}s",
                        tally.tags,
                    )
                connection.drain_events(timeout=left)
        except BatchFailed:
            raise
        except Exception as exc:
            if tally.tags:  # what was confirmed went, the rest is unsure
                raise acks.failed(f"RabbitMQ batch broke off: {exc}", tally.tags) from exc
            raise
        if acks.nacked:
            raise acks.failed(f"RabbitMQ refused (nack) {len(acks.nacked)} message(s)", tally.tags)
    finally:
        with contextlib.suppress(Exception):
            channel.close()
