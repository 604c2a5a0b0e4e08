"""What became of a chunk the broker did not wholly take, as tables: no broker, no clock.

:func:`~celery_cronstore.beat.outcome.settle` sorts a failed chunk's claims into went,
unsure and unsent; :class:`~celery_cronstore.beat.outcome.Acks` turns RabbitMQ's
publisher confirms into which messages of a batch went and which were refused.
"""

from __future__ import annotations

from typing import Any

import pytest
from timeline import at

from celery_cronstore.beat.outcome import Acks, BatchFailed, Refused, settle
from celery_cronstore.records import Claim

#: The chunk: six claims; the first two were handed over, the third failed.
CHUNK = [Claim(i, f"t{i}", "x.do", [], {}, {}, at(10), f"id{i}", 1) for i in range(6)]
HANDED, FAILING, REST = CHUNK[:2], CHUNK[2], CHUNK[3:]


def ids(claims: list[Claim]) -> list[int]:
    return [c.periodic_task_id for c in claims]


#: (id, failing claim?, error, buffered, (went, unsure, unsent))
TABLE: list[tuple[str, bool, BaseException, bool, tuple[list[int], list[int], list[int]]]] = [
    # One message at a time (no batch): what returned went; the failing one is unknown
    # unless the broker refused it; the rest never left.
    ("immediate-connection-lost", True, ConnectionError("reset"), False, ([0, 1], [2], [3, 4, 5])),
    ("immediate-refused", True, Refused("OOM"), False, ([0, 1], [], [2, 3, 4, 5])),
    # A buffered batch (one Redis transaction) that failed before its flush: none went.
    ("buffered-before-flush", True, ConnectionError("reset"), True, ([], [], [0, 1, 2, 3, 4, 5])),
    # ... that Redis refused whole at its flush (EXECABORT), or could not reach: none went.
    ("buffered-refused", False, Refused("EXECABORT"), True, ([], [], [0, 1, 3, 4, 5])),
    # ... whose flush broke off: any of it may have gone.
    ("buffered-cut-off", False, BatchFailed("lost during EXEC"), True, ([], [0, 1], [3, 4, 5])),
    ("buffered-flush-error", False, OSError("broken pipe"), True, ([], [0, 1], [3, 4, 5])),
    # RabbitMQ confirms: what was confirmed went, what was nacked did not, the rest is unknown.
    (
        "confirms-partial",
        False,
        BatchFailed("timeout", went={0}, refused={1}),
        False,
        ([0], [], [1, 3, 4, 5]),
    ),
    ("confirms-none", False, BatchFailed("cut"), False, ([], [0, 1], [3, 4, 5])),
]


@pytest.mark.parametrize(
    ("failing", "exc", "buffered", "want"), [pytest.param(*r[1:], id=r[0]) for r in TABLE]
)
def test_settle(
    failing: bool, exc: BaseException, buffered: bool, want: tuple[list[int], ...]
) -> None:
    out = settle(HANDED, FAILING if failing else None, REST, exc, buffered=buffered)
    assert (ids(out.went), ids(out.unsure), ids(out.unsent)) == want
    # Every claim is sorted once, and unsent keeps the chunk's order (sent again in order).
    sorted_ = ids(out.went) + ids(out.unsure) + ids(out.unsent)
    assert sorted(sorted_) == sorted(set(sorted_))
    assert ids(out.unsent) == sorted(ids(out.unsent))


def _acks(*events: tuple[str, int, bool]) -> Acks:
    acks = Acks()
    for kind, tag, multiple in events:
        (acks.ack if kind == "ack" else acks.nack)(tag, multiple)
    return acks


#: (id, confirm events, tags of the batch's messages, (went, refused))
ACKS: list[tuple[str, list[tuple[str, int, bool]], list[Any], tuple[set[int], set[int]]]] = [
    ("all-acked-at-once", [("ack", 3, True)], [1, 2, 3], ({0, 1, 2}, set())),
    ("one-by-one-out-of-order", [("ack", 2, False), ("ack", 1, False)], [1, 2, 3], ({0, 1}, set())),
    ("a-nack", [("ack", 1, False), ("nack", 2, False)], [1, 2, 3], ({0}, {1})),
    ("nack-multiple", [("ack", 1, False), ("nack", 3, True)], [1, 2, 3], ({0}, {1, 2})),
    # A message sent through Celery's own path waited for its confirm there: it went.
    ("celery-path", [("ack", 1, False)], [1, None, 2], ({0, 1}, set())),
    ("nothing-confirmed", [], [1, 2], (set(), set())),
]


@pytest.mark.parametrize(("events", "tags", "want"), [pytest.param(*r[1:], id=r[0]) for r in ACKS])
def test_confirms(
    events: list[tuple[str, int, bool]], tags: list[Any], want: tuple[set[int], set[int]]
) -> None:
    failed = _acks(*events).failed("batch", tags)
    assert (set(failed.went), set(failed.refused)) == want


def test_covers_counts_answers_in_order() -> None:
    acks = _acks(("ack", 2, False))
    assert not acks.covers(2)  # tag 1 unanswered
    acks.ack(1, False)
    assert acks.covers(2)
