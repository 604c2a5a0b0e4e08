"""Beat's sessions cannot hold row locks past half the lease (PostgreSQL, MariaDB).

A claim frozen just before its commit (the fault point ``before_claim_commit``) is cut
off by the server; another claimer takes the rows, and the frozen claim's commit fails.
Regression: psycopg 3 sends the batch UPDATE as a pipeline, after which PostgreSQL did
not arm ``idle_in_transaction_session_timeout``: the frozen claim committed 20 s late.
"""

from __future__ import annotations

import time

import pytest

from celery_cronstore import faults
from celery_cronstore.errors import StoreUnavailableError
from celery_cronstore.store import Claimer, Store


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ]
)
def server_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


def test_a_claim_frozen_before_its_commit_is_cut_off(server_url: str) -> None:
    setup = Store(server_url)
    setup.upgrade()
    with setup.begin() as conn:
        for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    for i in range(3):
        setup.add(f"t{i}", task="t.ok", timer="*:*:*")
    time.sleep(1.1)
    frozen = Store(server_url, session_timeout=1, pool_pre_ping=False)
    stalled: list[bool] = []

    def hook(point: str) -> None:
        if point == "before_claim_commit" and not stalled:
            stalled.append(True)
            time.sleep(3)  # the server cuts the session off after 1 s

    faults.install(hook)
    try:
        with pytest.raises(StoreUnavailableError):  # the session was cut off
            Claimer(frozen, "frozen").claim_due()
    finally:
        faults.install(None)
        frozen.close()
    result = Claimer(setup, "healthy").claim_due()
    assert len(result.claims) == 3, "the frozen claim's rows are free and uncommitted"
    assert {f.claimed_by for i in range(3) for f in setup.history(f"t{i}")} == {"healthy"}
    setup.close()
