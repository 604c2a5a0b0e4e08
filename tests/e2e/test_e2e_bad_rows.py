"""Every column of a row corrupted by raw SQL, under a real beat and worker (issue 11).

One beat, one worker (Redis), one store per database: two healthy 1-second tasks and one
row per kind of corruption. Every healthy task keeps its grid; every bad row either ends
in ``error`` with a reason naming the problem, or is planned harmlessly (said so in
``OUTCOMES``); then each is fixed through the API (``Store.update``, or ``cronstore edit``
for args that do not fit) and fires again. The table of outcomes is in
docs/reliability.md ("Bad rows").
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from processes import deliveries, wait_for
from test_e2e_isolation import (
    ALL_STORES,
    assert_claim_once,
    assert_each_delivered_once,
    by_name,
    celery,
    fresh_store,
    grid_gaps,
    ledger,
    store_url,
)

from celery_cronstore.store import Store
from celery_cronstore.store.schema import periodic_task

pytestmark = [pytest.mark.slow, pytest.mark.redis]

EVERY_SECOND = "*:*:*"
HEALTHY = ("ok-1", "ok-2")


def _fix(**changes: Any) -> Any:
    return lambda store, name: store.update(name, **changes)


def _replan(store: Store, name: str) -> None:
    store.disable(name)
    store.enable(name)


def _edit(store: Store, name: str) -> None:
    """Marker: fixed with ``cronstore edit --args`` (see the test)."""


# kind -> (task, SET clause or next_run/last_fire offsets, expected reason or None, fix)
# A reason of None: beat plans the row harmlessly (no error) and it keeps firing.
Case = tuple[str, Any, str | None, Any]
OUTCOMES: dict[str, Case] = {
    "args-bad-json": ("e2e.record", "args = '[1,'", "args is not valid JSON", None),
    "args-not-array": ("e2e.record", "args = '{\"a\": 1}'", "args must be a JSON array", None),
    "args-do-not-fit": ("e2e.pair", "args = '[\"args-do-not-fit\"]'", "do not fit", _edit),
    "kwargs-bad-json": ("e2e.record", "kwargs = 'nope'", "kwargs is not valid JSON", None),
    "kwargs-not-object": ("e2e.record", "kwargs = '[1]'", "kwargs must be a JSON object", None),
    "kwargs-do-not-fit": ("e2e.record", "kwargs = '{\"c\": 1}'", "do not fit", _fix(kwargs={})),
    "options-bad-json": ("e2e.record", "options = '{'", "options is not valid JSON", None),
    "options-not-object": ("e2e.record", "options = '\"q\"'", "must be a JSON object", None),
    "options-reserved-header": (
        "e2e.record",
        'options = \'{"headers": {"task": "os.system"}}\'',
        "headers may not set",
        _fix(options={}),
    ),
    "options-unknown-key": (
        "e2e.record",
        'options = \'{"link": "os.system"}\'',
        "unknown Celery option(s) link",
        _fix(options={}),
    ),
    "options-pickle": (
        "e2e.record",
        'options = \'{"serializer": "pickle"}\'',
        "serializer 'pickle' is refused",
        _fix(options={}),
    ),
    "timer-garbage": ("e2e.record", "timer = 'whenever'", "whenever", _fix(timer=EVERY_SECOND)),
    "timer-kind": (
        "e2e.record",
        "timer_kind = 'sundial'",
        "unknown timer kind",
        _fix(timer=EVERY_SECOND),
    ),
    "tz-unknown": ("e2e.record", "tz = 'Mars/Olympus'", "Mars/Olympus", _fix(tz="UTC")),
    "task-unregistered": ("nowhere.task", None, "not registered", _fix(task="e2e.record")),
    "misfire-policy-text": ("e2e.record", "misfire_policy = 'sometimes'", None, None),
    "overlap-policy-text": ("e2e.record", "overlap_policy = 'never'", None, None),
    "version-negative": ("e2e.record", "version = -7", None, None),
    "version-huge": ("e2e.record", "version = 2000000000", None, None),
    "owner-half": ("e2e.record", "owner_type = 'ghost', owner_id = NULL", None, None),
    "owner-id-only": ("e2e.record", "owner_type = NULL, owner_id = '42'", None, None),
    "next-run-an-hour-ago": ("e2e.record", {"next_run": -3600}, None, None),
    "next-run-before-last-fire": ("e2e.record", {"next_run": -30, "last_fire": -2}, None, None),
    "next-run-far-future": ("e2e.record", {"next_run": "9999"}, None, _replan),
    "next-run-null": ("e2e.record", {"next_run": "null"}, None, _replan),
}
#: Rows that beat leaves alone without an error and that do not fire until replanned.
SILENT = {"next-run-far-future", "next-run-null"}


def _default_fix(kind: str) -> Any:
    column = kind.split("-")[0]
    return _fix(**{column: {"kwargs": {}, "options": {}}.get(column, [kind])})


def break_rows(store: Store) -> None:
    now = store.now().replace(microsecond=0)
    for kind, (_task, breakage, _reason, _fixer) in OUTCOMES.items():
        if isinstance(breakage, str):
            with store.begin() as conn:
                conn.exec_driver_sql(
                    f"UPDATE cronstore_periodic_task SET {breakage} WHERE name = '{kind}'"
                )
        elif isinstance(breakage, dict):
            values: dict[str, datetime | None] = {}
            for column, offset in breakage.items():
                if offset == "null":
                    values[column] = None
                elif offset == "9999":
                    values[column] = datetime(9999, 12, 31, tzinfo=timezone.utc)
                else:
                    values[column] = now + timedelta(seconds=offset)
            with store.begin() as conn:
                conn.execute(
                    sa.update(periodic_task).where(periodic_task.c.name == kind).values(**values)
                )


@pytest.mark.parametrize("store_kind", ALL_STORES)
def test_every_corrupted_column_costs_only_its_row_and_an_edit_fixes_it(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str, store_kind: str
) -> None:
    url = store_url(request, store_kind, tmp_path)
    store = fresh_store(url)
    for name in HEALTHY:
        store.add(name, task="e2e.record", timer=EVERY_SECOND, args=[name])
    for kind, (task, _breakage, _reason, _fixer) in OUTCOMES.items():
        args: list[Any] = [kind, 2] if task == "e2e.pair" else [kind]
        if task == "nowhere.task":
            store.add(kind, task="e2e.record", timer=EVERY_SECOND, args=args)
            with store.begin() as conn:
                conn.exec_driver_sql(
                    f"UPDATE cronstore_periodic_task SET task = '{task}' WHERE name = '{kind}'"
                )
        else:
            store.add(kind, task=task, timer=EVERY_SECOND, args=args)
    break_rows(store)
    record = tmp_path / "record.jsonl"
    with celery(tmp_path, redis_url, url, E2E_LEASE="5") as procs:
        procs.worker()
        procs.beat("beat")

        def fired(name: str, n: int, since: float = 0.0) -> bool:
            return sum(1 for d in by_name(deliveries(record))[name] if d["at"] >= since) >= n

        wait_for(lambda: all(fired(n, 2) for n in HEALTHY), 40, "healthy fires", tmp_path)
        start = store.now()
        time.sleep(6)
        end = store.now()
        seen = {kind: store.get(kind) for kind in OUTCOMES}
        fires = ledger(store)
        outcome: dict[str, str] = {}
        for kind in OUTCOMES:
            row = seen[kind]
            mine = [f for f in fires if f["name"] == kind]
            if row.error is not None:
                states = sorted({f["state"] for f in mine})
                outcome[kind] = f"error: {row.error[:90]} | fires {states}"
            else:
                outcome[kind] = f"planned, {len(by_name(deliveries(record))[kind])} delivered"
        report = "\n".join(f"  {k}: {v}" for k, v in outcome.items())
        print(f"\n{store_kind}:\n{report}")
        for kind, (_task, _breakage, reason, _fixer) in OUTCOMES.items():
            error = seen[kind].error
            if reason is None:
                assert error is None, f"{kind}: put in error: {error}"
            else:
                assert error is not None, f"{kind}: not in error ({outcome[kind]})"
                assert reason in error, f"{kind}: {error}"
        for kind in set(OUTCOMES) - SILENT:
            if OUTCOMES[kind][2] is None:
                assert fired(kind, 2), f"{kind}: planned but not firing"

        # Fix every row through the API (args that do not fit: `cronstore edit`).
        fixed_at = time.time()
        for kind, (_task, _breakage, reason, fixer) in OUTCOMES.items():
            if fixer is _edit:
                done = procs.cli("edit", kind, "--args", f'["{kind}", "fixed"]')
                assert done.returncode == 0, done.stdout + done.stderr
            elif fixer is not None:
                fixer(store, kind)
            elif reason is not None:
                _default_fix(kind)(store, kind)
        wait_for(
            lambda: all(fired(kind, 1, fixed_at) for kind in OUTCOMES),
            20,
            "every fixed row to fire",
            tmp_path,
        )
        assert {kind: store.get(kind).error for kind in OUTCOMES} == dict.fromkeys(OUTCOMES)

    got = deliveries(record)
    assert_each_delivered_once(got)
    fires = ledger(store)
    assert_claim_once(fires)
    for name in HEALTHY:
        times = [
            f["fire_time"]
            for f in fires
            if f["name"] == name and start + timedelta(seconds=1) <= f["fire_time"] <= end
        ]
        assert len(times) >= int((end - start).total_seconds()) - 2, f"{name}: {times}"
        assert grid_gaps(times, 1) == [], f"{name} lost fires next to the bad rows"
    store.close()
