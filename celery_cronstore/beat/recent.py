"""What beat sent lately, kept to write back claims a failover lost (``store.restore``).

Bounded in time and in size: a fire is kept :data:`RECENT_FOR` seconds after it was sent
(asynchronous replication loses the last moments before a primary dies, far less than
that), and at most :data:`RECENT_MAX` fires (the oldest go first).
"""

from __future__ import annotations

from collections import deque

from celery_cronstore.records import Claim

__all__ = ["RECENT_FOR", "RECENT_MAX", "RecentSends"]

#: Seconds a sent fire is remembered.
RECENT_FOR = 60.0
#: Most fires remembered.
RECENT_MAX = 50_000


class RecentSends:
    """The fires sent in the last :data:`RECENT_FOR` seconds (times passed in: monotonic)."""

    def __init__(self, keep_for: float = RECENT_FOR, most: int = RECENT_MAX) -> None:
        self.keep_for = keep_for
        self._sent: deque[tuple[float, Claim]] = deque(maxlen=most)

    def __len__(self) -> int:
        return len(self._sent)

    def add(self, claims: list[Claim], at: float) -> None:
        """Remember ``claims``, sent at ``at``."""
        self._forget(at)
        self._sent.extend((at, claim) for claim in claims)

    def since(self, now: float) -> list[Claim]:
        """Return the fires sent in the last :attr:`keep_for` seconds before ``now``,
        oldest first (one per task id)."""
        self._forget(now)
        unique = {claim.task_id: claim for _, claim in self._sent}
        return list(unique.values())

    def _forget(self, now: float) -> None:
        horizon = now - self.keep_for
        sent = self._sent
        while sent and sent[0][0] < horizon:
            sent.popleft()
