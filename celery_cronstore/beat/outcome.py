"""What became of a chunk of claims the broker did not wholly take: went, unsure or unsent.

A fire that may have reached the broker must not be sent again (a plain task would run
twice), and one that surely did not must be (or nothing runs it). When sending a chunk
fails, :func:`settle` sorts its claims by what the failure tells:

- a broker that *refused* (Redis answered an error to the whole atomic batch, or to the
  one message sent; RabbitMQ nacked a message) took nothing of what it refused: unsent;
- a batch that failed while buffered (before its one flush) sent nothing: unsent;
- messages RabbitMQ confirmed, or (without batching) whose publish call returned before
  the failure, went;
- anything else handed over when the connection broke (a flush cut off, a confirm never
  received) may or may not have gone: unsure;
- claims after the failing one were never handed over: unsent.

Pure: no broker, no database, no clock. :class:`~celery_cronstore.beat.send.Sender`
records the result (``store.marks``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from kombu.exceptions import OperationalError

from celery_cronstore.records import Claim

__all__ = ["Acks", "BatchFailed", "ChunkOutcome", "Refused", "settle"]


class Refused(OperationalError):
    """The broker answered "no" to every message of the failing unit: none of them went."""


class BatchFailed(OperationalError):
    """A batch the broker did not wholly take, with what is known of each message.

    ``went`` and ``refused`` hold positions in the batch (0 is its first message) known to
    have gone and known not to have; the others are unknown.
    """

    def __init__(
        self,
        message: str,
        *,
        went: Collection[int] = (),
        refused: Collection[int] = (),
    ) -> None:
        super().__init__(message)
        self.went = frozenset(went)
        self.refused = frozenset(refused)


@dataclass
class ChunkOutcome:
    """The claims of a failed chunk, sorted by whether they reached the broker."""

    went: list[Claim] = field(default_factory=list)
    unsure: list[Claim] = field(default_factory=list)
    unsent: list[Claim] = field(default_factory=list)


def settle(
    handed: list[Claim],
    failing: Claim | None,
    rest: list[Claim],
    exc: BaseException,
    *,
    buffered: bool,
) -> ChunkOutcome:
    """Sort a failed chunk (see the module docstring).

    ``handed``: the claims whose send returned, in order; ``failing``: the one whose send
    raised ``exc`` (``None`` when the batch's flush did); ``rest``: the claims after it;
    ``buffered``: whether sends inside the batch wait for one flush (an atomic Redis
    batch) instead of going at once.
    """
    out = ChunkOutcome()
    if isinstance(exc, BatchFailed):
        for i, claim in enumerate(handed):
            if i in exc.refused:
                out.unsent.append(claim)
            elif i in exc.went:
                out.went.append(claim)
            else:
                out.unsure.append(claim)
    elif isinstance(exc, Refused) and failing is None:
        out.unsent.extend(handed)  # the whole batch was refused
    elif buffered and failing is not None:
        out.unsent.extend(handed)  # the batch was never flushed
    elif buffered:
        out.unsure.extend(handed)  # its flush broke off: any of it may have gone
    else:
        out.went.extend(handed)
    if failing is not None:
        if buffered or isinstance(exc, Refused):
            out.unsent.append(failing)
        else:
            out.unsure.append(failing)
    out.unsent.extend(rest)  # in order: the chunk's own, then the rest
    return out


class Acks:
    """Publisher confirms seen on one channel (delivery tags count from 1)."""

    def __init__(self) -> None:
        self.upto = 0  # every tag up to this one is answered
        self.single: set[int] = set()
        self.nacked: set[int] = set()

    def ack(self, tag: int, multiple: bool) -> None:
        if multiple:
            self.upto = max(self.upto, tag)
        else:
            self.single.add(tag)
        while self.upto + 1 in self.single:
            self.upto += 1
            self.single.discard(self.upto)

    def nack(self, tag: int, multiple: bool) -> None:
        first = self.upto + 1 if multiple else tag
        self.nacked.update(t for t in range(first, tag + 1) if t not in self.single)
        self.ack(tag, multiple)

    def covers(self, count: int) -> bool:
        return self.upto >= count

    def failed(self, message: str, tags: list[int | None]) -> BatchFailed:
        """Return the error of a batch whose messages had delivery ``tags`` in order
        (``None``: sent and confirmed on its own): which went, which were refused."""
        went, refused = set(), set()
        for position, tag in enumerate(tags):
            if tag is not None and tag in self.nacked:
                refused.add(position)
            elif tag is None or tag <= self.upto or tag in self.single:
                went.add(position)
        return BatchFailed(message, went=went, refused=refused)
