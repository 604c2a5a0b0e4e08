"""What beat remembers of its sends, to write back claims a failover lost: bounded in
time and in size (``beat.recent``)."""

from __future__ import annotations

from timeline import T0

from celery_cronstore.beat.recent import RecentSends
from celery_cronstore.records import Claim


def claim(task_id: str) -> Claim:
    return Claim(1, "a", "x.do", [], {}, {}, T0, task_id, 1)


def test_fires_are_forgotten_after_the_window() -> None:
    recent = RecentSends(keep_for=60.0)
    recent.add([claim("a"), claim("b")], at=100.0)
    recent.add([claim("c")], at=130.0)
    assert [c.task_id for c in recent.since(159.0)] == ["a", "b", "c"]
    assert [c.task_id for c in recent.since(160.5)] == ["c"]
    assert recent.since(191.0) == []
    assert len(recent) == 0


def test_the_oldest_go_first_past_the_size_bound() -> None:
    recent = RecentSends(keep_for=60.0, most=3)
    recent.add([claim(str(i)) for i in range(5)], at=10.0)
    assert [c.task_id for c in recent.since(10.0)] == ["2", "3", "4"]


def test_a_fire_sent_twice_is_written_back_once() -> None:
    recent = RecentSends()
    recent.add([claim("a")], at=1.0)
    recent.add([claim("a")], at=2.0)
    assert [c.task_id for c in recent.since(3.0)] == ["a"]
