"""How far ahead of a fire beat starts claiming it. Pure.

Beat claims a fire ``claim_ahead`` seconds before its time and holds the claim until then
(``celery_cronstore.beat.held``), so the claim's transaction does not make it late. One
claim transaction takes a batch, though: when thousands of fires fall due together, the
batches after the first were claimed after their time and published late by as long as
the claims before them took (seconds for 10,000). So beat counts the fires due with the
earliest one (within :data:`BURST_SPAN`) and starts early enough to claim them all at
the pace its claims lately kept, with a margin: the whole burst is held when its time
comes, and only publishing remains.

Once the lead has begun, beat claims the burst to its end (:data:`BURST_SPAN` after its
earliest fire), batch after full batch, without pausing.

The lead is bounded twice: by :data:`MAX_LEAD`, and by a quarter of the claim lease, so a
claim held that long (the lead plus at most :data:`BURST_SPAN`) is still beat's own when
it is published (a lapsed lease would let another replica publish it too).
"""

from __future__ import annotations

__all__ = [
    "BURST_SPAN",
    "COUNT_CAP",
    "DEFAULT_ROW_COST",
    "MARGIN",
    "MAX_LEAD",
    "MIN_ROWS_TIMED",
    "claim_lead",
    "lead_bound",
]

#: Seconds after the earliest fire whose fires count as the same burst.
BURST_SPAN = 1.0
#: Most due rows counted for one burst (the lead reaches its bound well before).
COUNT_CAP = 100_000
#: Seconds one due row's claim is assumed to take until beat has timed a claim: on the
#: slow side (claims measured 0.1-0.5 ms a row on a 2-core machine), since a lead too short
#: leaves the end of a burst to be claimed after its time, and one too long costs nothing.
DEFAULT_ROW_COST = 5e-4
#: Claims of fewer rows than this do not time the per-row cost (fixed costs dominate).
MIN_ROWS_TIMED = 100
#: How much longer than the measured pace the lead allows for.
MARGIN = 1.5
#: Longest lead (seconds), whatever the burst.
MAX_LEAD = 10.0


def lead_bound(lease: float) -> float:
    """The longest lead (seconds) a claim lease of ``lease`` seconds allows."""
    return min(MAX_LEAD, lease / 4)


def claim_lead(ahead: float, due: int, batch: int, row_cost: float, lease: float) -> float:
    """Seconds before the earliest fire that beat starts claiming it.

    ``ahead``: the configured ``claim_ahead`` (0: never claim ahead, and no lead either);
    ``due``: fires due within :data:`BURST_SPAN` of the earliest; ``batch``: rows one
    claim transaction takes (a burst that fits in one needs no more than ``ahead``);
    ``row_cost``: seconds a due row's claim lately took; ``lease``: the claim lease.
    """
    if ahead <= 0:
        return 0.0
    if due <= batch:
        return ahead
    needed = ahead + MARGIN * due * max(0.0, row_cost)
    return max(ahead, min(needed, lead_bound(lease)))
