"""Beat's chunk to Redis is one transaction: a refusal part of the way through sends none.

A Redis of the test's own runs at its ``maxmemory`` (``noeviction``) with room for about
a dozen of the thirty 5 kB messages of a chunk. kombu's own batch (a plain pipeline)
writes the first ones and has the rest refused: beat cannot tell which went. Beat's
(:mod:`celery_cronstore.beat.redis_batch`) sends the chunk in ``MULTI``/``EXEC``: Redis
refuses it whole (:class:`~celery_cronstore.beat.outcome.Refused`), and once Redis takes
writes again the same chunk goes whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Connection, Exchange, Queue
from kombu.exceptions import BatchPublishError
from redis_server import private_redis

from celery_cronstore.beat.outcome import Refused
from celery_cronstore.beat.redis_batch import install

pytestmark = pytest.mark.redis

BODY = "x" * 5000
COUNT = 30
ROOM = 60_000  # bytes over what Redis holds: about a dozen messages


@pytest.fixture
def redis_port(tmp_path: Path) -> Iterator[int]:
    with private_redis(tmp_path) as (_url, port):
        yield port


def _client(port: int) -> Any:
    return redis.Redis(port=port)


def _squeeze(port: int) -> None:
    client = _client(port)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + ROOM)


def _free(port: int) -> None:
    _client(port).config_set("maxmemory", 0)


def _queued(port: int) -> int:
    return int(_client(port).llen("q"))


def _send_chunk(port: int, atomic: bool, squeeze: bool = True) -> None:
    with Connection(f"redis://127.0.0.1:{port}/0") as conn:
        producer = conn.Producer()
        queue = Queue("q", Exchange("q"), routing_key="q")
        producer.publish("warm-up", exchange=queue.exchange, routing_key="q", declare=[queue])
        _client(port).delete("q")
        if atomic:
            assert install(producer.channel)
        if squeeze:
            _squeeze(port)
        with producer.batch(max_size=10_000):
            for i in range(COUNT):
                producer.publish(f"{i}:{BODY}", exchange=queue.exchange, routing_key="q")


def test_kombu_s_own_batch_half_writes_a_refused_chunk(redis_port: int) -> None:
    """The fault, first: without a transaction part of the chunk is queued."""
    with pytest.raises(BatchPublishError):
        _send_chunk(redis_port, atomic=False)
    assert 0 < _queued(redis_port) < COUNT


def test_beat_s_batch_sends_a_refused_chunk_whole_or_not_at_all(redis_port: int) -> None:
    with pytest.raises(Refused, match="Redis refused the batch"):
        _send_chunk(redis_port, atomic=True)
    assert _queued(redis_port) == 0
    _free(redis_port)
    _send_chunk(redis_port, atomic=True, squeeze=False)  # Redis takes writes again
    assert _queued(redis_port) == COUNT
