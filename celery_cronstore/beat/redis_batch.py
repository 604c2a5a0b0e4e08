"""One chunk of beat's messages to Redis as one transaction: all of it went, or none.

kombu 5.7 groups a producer's publishes to Redis in one pipeline (``Producer.batch``),
but a non-transactional one: when Redis refuses writes part-way (``maxmemory`` with
``noeviction``), some messages are queued and the others are not, and kombu can only say
"delivery is uncertain". Beat must then either send the chunk again (a plain task of the
half that went runs twice) or give it all up (the other half never runs).

:class:`AtomicBatch` is kombu's own Redis batch (the same commands, built by kombu's
channel: queue keys, priorities, queue expiry) sent in ``MULTI``/``EXEC``: a refused
command aborts the whole transaction, so a refusal means none of the chunk went
(:class:`~celery_cronstore.beat.outcome.Refused`, the chunk is sent again later), and
only a connection that breaks during ``EXEC`` leaves a chunk unsure
(:class:`~celery_cronstore.beat.outcome.BatchFailed`). It also flushes once, when the
chunk ends, never part-way. Hand-written because kombu has no switch for a
transactional batch; it subclasses kombu's and changes only the pipeline and the flush.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from celery_cronstore.beat.outcome import BatchFailed, Refused

__all__ = ["install"]

#: Commands a batch may buffer: beat flushes each chunk once, at its end.
_NO_AUTO_FLUSH = 10**9


def install(channel: Any) -> bool:
    """Make ``channel`` (kombu's Redis channel) batch atomically; return whether it does.

    Returns ``False`` for any other transport, or a kombu without batches (each message
    then goes on its own, and a refusal is certain per message).
    """
    if getattr(channel, "_cronstore_atomic", False):
        return True
    try:
        from kombu.transport.redis import Channel, PublishBatch
    except ImportError:  # the redis package, or kombu < 5.7
        return False
    if not isinstance(channel, Channel) or not getattr(channel, "supports_batch_publish", True):
        return False
    target: Any = channel
    target.create_publish_batch = partial(_atomic_class(PublishBatch), channel)
    target._cronstore_atomic = True
    return True


def _atomic_class(base: Any) -> Any:
    class AtomicBatch(base):  # type: ignore[misc]
        """kombu's Redis publish batch in ``MULTI``/``EXEC``, flushed once."""

        def __init__(self, channel: Any, max_size: int = _NO_AUTO_FLUSH) -> None:
            super().__init__(channel, _NO_AUTO_FLUSH)
            # kombu opens a plain pipeline; redis-py sends one in MULTI/EXEC when this
            # is set (its ``execute`` reads it each time).
            self.pipeline.transaction = True
            self._failed: BaseException | None = None
            #: The Redis commands of the last message kombu published through the batch
            #: (what ``beat.template`` learns a task's message from).
            self.last: list[tuple[str, tuple[Any, ...]]] = []

        def publish(self, message: Any, **kwargs: Any) -> Any:
            self.last = []
            return super().publish(message, **kwargs)

        def add(self, name: str, *args: Any) -> None:
            super().add(name, *args)
            self.last.append((name, args))

        def push(self, key: Any, text: str) -> None:
            """Buffer one message made ready by the fast path (its ``LPUSH``): it goes
            with the rest of the chunk, in the same transaction."""
            self._check_usable()
            try:
                self.pipeline.lpush(key, text)
            except BaseException as exc:
                self._failed = exc
                self._buffered = 0
                self.pipeline.reset()
                raise
            self._buffered += 1

        def flush(self) -> None:
            from redis.exceptions import ConnectionError as RedisConnectionError
            from redis.exceptions import ResponseError
            from redis.exceptions import TimeoutError as RedisTimeoutError

            self._check_usable()
            if not count_of(self):
                return
            count = count_of(self)
            pipeline = self.pipeline
            try:  # connect first: a Redis that cannot be reached took nothing
                if pipeline.connection is None:
                    pipeline.connection = pipeline.connection_pool.get_connection()
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                self._failed = exc
                self._buffered = 0
                pipeline.reset()
                raise Refused(f"Redis unreachable: {exc}") from exc
            try:
                pipeline.execute()
            except ResponseError as exc:  # EXECABORT: Redis queued nothing of it
                self._failed = exc
                raise Refused(f"Redis refused the batch of {count} command(s): {exc}") from exc
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                self._failed = exc
                raise BatchFailed(f"Redis connection lost during EXEC: {exc}") from exc
            finally:
                self._buffered = 0
                self.pipeline.reset()

    return AtomicBatch


def count_of(batch: Any) -> int:
    """Return the commands a kombu Redis batch holds, not yet sent."""
    return int(batch._buffered)
