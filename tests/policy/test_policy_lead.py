"""How far ahead beat starts claiming a burst (policy.lead): a plain table."""

from __future__ import annotations

import pytest

from celery_cronstore.policy.lead import MARGIN, MAX_LEAD, claim_lead, lead_bound


@pytest.mark.parametrize(
    ("ahead", "due", "batch", "row_cost", "lease", "expected"),
    [
        # claim-ahead off: no lead, whatever is due
        (0.0, 10_000, 500, 1e-4, 30.0, 0.0),
        # one fire, or a burst one transaction takes: claim_ahead as configured
        (0.1, 1, 500, 1e-4, 30.0, 0.1),
        (0.1, 500, 500, 1e-4, 30.0, 0.1),
        # a burst of 10,000 at 100 us a row: claim_ahead plus the pace with its margin
        (0.1, 10_000, 500, 1e-4, 30.0, 0.1 + MARGIN * 10_000 * 1e-4),
        # bounded by a quarter of the lease...
        (0.1, 100_000, 500, 1e-4, 30.0, 7.5),
        # ...and by MAX_LEAD
        (0.1, 100_000, 500, 1e-4, 300.0, MAX_LEAD),
        # never less than claim_ahead, even when the lease bound is shorter
        (2.0, 10_000, 500, 1e-3, 4.0, 2.0),
        # a cost not measured yet cannot make the lead negative
        (0.1, 10_000, 500, -1.0, 30.0, 0.1),
    ],
)
def test_claim_lead(
    ahead: float, due: int, batch: int, row_cost: float, lease: float, expected: float
) -> None:
    assert claim_lead(ahead, due, batch, row_cost, lease) == pytest.approx(expected)


def test_the_bound_keeps_a_held_claim_inside_its_lease() -> None:
    for lease in (1.0, 10.0, 30.0, 600.0):
        assert lead_bound(lease) <= lease / 4
        assert lead_bound(lease) <= MAX_LEAD
