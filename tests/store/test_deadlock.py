"""A deadlock between two beats' claims is a race lost, not an outage (MariaDB's gap locks
on the due index made two beats deadlock now and then; beat logged it as "the database
has not answered"). Here a real deadlock on each server: the store's error is recognised
by ``claims.deadlock``, and an outage is not."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from celery_cronstore.errors import StoreUnavailableError
from celery_cronstore.store import Store
from celery_cronstore.store.engine import deadlock


@pytest.mark.parametrize("backend", [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
])  # fmt: skip
def test_a_deadlock_is_told_apart_from_an_outage(
    request: pytest.FixtureRequest, backend: str
) -> None:
    url = str(request.getfixturevalue(f"{backend}_url"))
    store = Store(url)
    store.upgrade()
    names = [f"deadlock-{backend}-{i}" for i in range(2)]
    with store.begin() as conn:
        conn.execute(
            sa.text("DELETE FROM cronstore_periodic_task WHERE name LIKE :p"), {"p": "deadlock-%"}
        )
    for name in names:
        store.add(name, task="t", timer="every 1m")
    update = sa.text("UPDATE cronstore_periodic_task SET version = version + 1 WHERE name = :n")
    locked = threading.Barrier(2)
    errors: list[BaseException] = []

    def cross(first: str, second: str) -> None:
        try:
            with store.begin() as conn:
                conn.execute(update, {"n": first})
                locked.wait(10)
                conn.execute(update, {"n": second})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=cross, args=pair) for pair in (names, names[::-1])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    try:
        assert len(errors) == 1, errors
        (error,) = errors
        assert isinstance(error, StoreUnavailableError)
        assert deadlock(error), error.reason
        outage = StoreUnavailableError("db", "connection refused", unreachable=True)
        assert not deadlock(outage)
        timeout = StoreUnavailableError("db", "canceling statement due to lock timeout")
        assert not deadlock(timeout)
    finally:
        for name in names:
            store.remove(name)
        store.close()
