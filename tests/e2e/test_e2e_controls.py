"""Pause until, exclusion calendars and backfill with three real beat replicas (issue 25):
each control is exact, fire by fire, when three beats share the store.

Four plain tasks fire ``every 2s``; three beats share one PostgreSQL store and a Redis
broker, and a worker records each delivery with its arrival time and its nominal fire
time (the fire-time header). Once the fires flow, all at once, each on its own task:

* ``pause``: paused until a point 12 s ahead, resuming with ``newest``: of the fires the
  pause held back only the newest is sent, once, when beat resumes the task at its
  ``until``; the older ones are one ``skipped`` row carrying the pause's note; every fire
  after is sent;
* ``hold``: paused with no end (``skip``), resumed by hand 8 s later: nothing between the
  pause and the resume is sent, everything after is;
* ``excluded``: an exclusion calendar's 10 s window: no fire inside it is sent, each is
  recorded ``skipped`` with the calendar's reason, every fire outside it is sent once;
* ``backfilled``: a task whose bounds lie in the past (beat sends none of it) is
  backfilled over them: each grid point is sent once with its nominal time; the same
  backfill again claims nothing.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from processes import beat, celery_env, deliveries, running, wait_for, worker

from celery_cronstore.actions import backfill
from celery_cronstore.records import Fire
from celery_cronstore.states import NOT_RUN, FireState
from celery_cronstore.store import Store
from celery_cronstore.timers import Timer, parse_timer

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres, pytest.mark.serial]

PAUSE, HOLD, EXCLUDED, BACKFILLED = "ctl-pause", "ctl-hold", "ctl-excluded", "ctl-backfilled"
SCHEDULED = [PAUSE, HOLD, EXCLUDED]
GRID = parse_timer("every 2s")
STEP = timedelta(seconds=2)
PAUSE_NOTE = "e2e pause until"
HOLD_NOTE = "e2e pause by hand"
NODE = "e2e-backfill"
#: How early beat may claim a fire (``cronstore_claim_ahead``'s default), with a margin.
AHEAD = timedelta(seconds=0.2)


def test_three_replicas_keep_pause_exclusions_and_backfill_exact(
    tmp_path: Path, redis_url: str, postgres_url: str
) -> None:
    store = Store(postgres_url)
    store.upgrade()
    with store.begin() as conn:
        for table in ("cronstore_fire", "cronstore_periodic_task", "cronstore_beat"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    # A window long past for now: the real one is set once the fires flow.
    store.calendars.add(
        "maint", entries=["2000-01-01T00:00:00Z..2000-01-01T00:00:10Z"], replace=True
    )
    for name in SCHEDULED:
        store.add(
            name,
            task="e2e.record",
            timer="every 2s",
            args=[name],
            # Every grid point is sent even if all three beats fall behind on a loaded
            # machine (run_once would record the older ones missed).
            misfire_policy="run_all",
            exclude="maint" if name == EXCLUDED else None,
        )
    # Bounds in the past: beat plans nothing of it, a backfill claims them all.
    base = _last(store.now().replace(microsecond=0))
    first_at, last_at = base - timedelta(seconds=30), base - timedelta(seconds=10)
    store.add(
        BACKFILLED,
        task="e2e.record",
        timer="every 2s",
        args=[BACKFILLED],
        start_at=first_at,
        end_at=last_at,
    )
    assert store.get(BACKFILLED).next_run is None
    queue = f"controls-{uuid.uuid4().hex[:8]}"
    app = _operator_app(redis_url, postgres_url, queue)
    record = tmp_path / "record.jsonl"
    env = celery_env(redis_url, postgres_url, record, E2E_QUEUE=queue)
    commands = [worker("w1", pool="threads"), beat(), beat(), beat()]
    with running(commands, env, tmp_path):
        wait_for(
            lambda: {n for d in deliveries(record) for n in d["args"]} >= set(SCHEDULED),
            90,
            "the first fires of every task",
            tmp_path,
        )
        start = _midway(store)  # between two grid points: no fire is being claimed
        gap = _next(start + timedelta(seconds=5))
        window = (gap, gap + timedelta(seconds=10))  # starts and ends on a grid point
        store.calendars.add(
            "maint", entries=[f"{window[0].isoformat()}..{window[1].isoformat()}"], replace=True
        )
        until = _next(start + timedelta(seconds=11)) + timedelta(seconds=1)  # midway too
        paused = store.pause(PAUSE, note=PAUSE_NOTE, until=until, resume="newest")
        held = store.pause(HOLD, note=HOLD_NOTE, resume="skip")
        assert paused.paused_at is not None
        assert held.paused_at is not None
        assert paused.paused_until == until
        assert paused.next_run == until
        filled = backfill(
            app, store, BACKFILLED, first_at, last_at, node=NODE, rate=50, pace=lambda s: None
        )
        points = _grid(first_at - timedelta(microseconds=1), last_at)
        assert len(points) == 11
        assert filled.fire_times == points
        assert [c.fire_time for c in filled.sent] == points
        assert filled.not_sent == []
        assert filled.taken == []

        while store.now() < held.paused_at + timedelta(seconds=8):
            time.sleep(0.2)
        resumed = store.resume(HOLD)
        assert resumed.paused_at is None
        resumed_at = resumed.updated_at  # the resume's transaction time (the database's now)

        while store.now() < max(until, window[1]) + timedelta(seconds=8):
            time.sleep(0.5)
        end = store.now()
        wait_for(
            lambda: (
                all(_accounted(store, n, record, start, end) for n in SCHEDULED)
                and len(_times(deliveries(record), BACKFILLED)) >= len(points)
            ),
            60,
            "every fire of the window sent or recorded",
            tmp_path,
        )
        again = backfill(
            app, store, BACKFILLED, first_at, last_at, node=NODE, rate=50, pace=lambda s: None
        )
        assert again.claimed == []
        assert again.sent == []
        assert again.taken == points
        time.sleep(3)  # a second copy of any fire would arrive by now
        for name in SCHEDULED:
            store.disable(name)
        time.sleep(1)

    got = deliveries(record)
    per_id = Counter(d["task_id"] for d in got)
    assert {k: v for k, v in per_id.items() if v > 1} == {}, "delivered more than once"
    assert all(d["fire_time"] is not None for d in got)
    history = {name: store.history(name, 1000) for name in [*SCHEDULED, BACKFILLED]}
    observed = _grid(start, end)
    assert len(observed) >= 12

    # Pause until, resuming with the newest fire held back.
    assert store.get(PAUSE).paused_at is None
    sent = _times(got, PAUSE)
    assert _doubles(sent) == {}, f"{PAUSE}: fires sent twice"
    sent = [p for p in sent if p <= end]
    # A fire claimed before the pause committed is sent (pausing stops claiming only).
    cut = max(paused.paused_at, paused.last_fire or paused.paused_at)
    after = sorted(p for p in sent if p > cut)
    newest = after[0]
    row = _row(history[PAUSE], newest)
    assert row.claimed_at is not None
    # Beat claims up to cronstore_claim_ahead (0.1 s) early, planned as of the claim's
    # time: the resume is planned as of ``until`` then.
    assert row.claimed_at >= until - AHEAD, f"resumed at {row.claimed_at}, before {until}"
    resumed_by_beat = max(row.claimed_at, until)
    # The newest grid point held back when beat resumed it, and nothing else of them.
    assert newest == GRID.last_at_or_before(resumed_by_beat), f"{newest} is not the newest"
    assert newest >= _last(until)
    assert newest < until + timedelta(seconds=30)
    inside = [p for p in sent if paused.paused_at <= p < until]
    if resumed_by_beat < _next(until):  # beat resumed it before the grid point after until
        assert inside == [newest], f"{PAUSE}: sent {inside} while paused"
    else:
        assert inside == [], f"{PAUSE}: sent {inside} while paused"
    early = (until - AHEAD).timestamp()
    assert all(_arrival(got, PAUSE, p) >= early for p in after), "sent before its until"
    follow = [p for p in observed if p > newest]
    assert after == [newest, *follow], f"{PAUSE}: after the pause sent {after}"
    backlog = _grid(cut, newest - STEP)
    assert len(backlog) >= 4
    missed = [f for f in history[PAUSE] if f.state == FireState.SKIPPED and f.fire_time > cut]
    assert [(f.fire_time, f.fire_until, f.fire_count) for f in missed] == [
        (backlog[0], backlog[-1], len(backlog))
    ], f"{PAUSE}: missed rows {missed}"
    assert PAUSE_NOTE in (missed[0].reason or "")
    _check_accounted(history[PAUSE], sent, observed, PAUSE)

    # Pause with no end, resumed by hand: nothing in between is sent, all after is.
    sent = _times(got, HOLD)
    assert _doubles(sent) == {}, f"{HOLD}: fires sent twice"
    sent = [p for p in sent if p <= end]
    cut = max(held.paused_at, held.last_fire or held.paused_at)
    assert [p for p in sent if cut < p <= resumed_at] == [], f"{HOLD}: sent while paused"
    assert [p for p in sent if p > resumed_at] == [p for p in observed if p > resumed_at]
    gone = _grid(cut, resumed_at)
    assert len(gone) >= 3
    missed = [f for f in history[HOLD] if f.state == FireState.SKIPPED and f.fire_time > cut]
    assert [(f.fire_time, f.fire_until, f.fire_count) for f in missed] == [
        (gone[0], gone[-1], len(gone))
    ], f"{HOLD}: missed rows {missed}"
    assert HOLD_NOTE in (missed[0].reason or "")
    _check_accounted(history[HOLD], sent, observed, HOLD)

    # The exclusion window: half-open, [start, end).
    sent = _times(got, EXCLUDED)
    assert _doubles(sent) == {}, f"{EXCLUDED}: fires sent twice"
    sent = [p for p in sent if p <= end]
    inside = [p for p in observed if window[0] <= p < window[1]]
    assert len(inside) == 5
    assert [p for p in sent if window[0] <= p < window[1]] == [], "sent inside the window"
    assert [p for p in sent if p > start] == [p for p in observed if p not in inside]
    skipped = sorted(
        (f for f in history[EXCLUDED] if f.state == FireState.SKIPPED), key=lambda f: f.fire_time
    )
    assert [f.fire_time for f in skipped] == inside
    assert all("excluded by calendar 'maint'" in (f.reason or "") for f in skipped)
    assert [
        f for f in history[EXCLUDED] if f.state == FireState.MISSED and f.fire_time > start
    ] == []
    _check_accounted(history[EXCLUDED], sent, observed, EXCLUDED)

    # Backfill: each point of the range once, with its nominal fire time; beat sent none.
    sent = _times(got, BACKFILLED)
    assert sent == points, f"{BACKFILLED}: delivered {sent}"
    rows = history[BACKFILLED]
    assert sorted(f.fire_time for f in rows) == points
    assert {f.claimed_by for f in rows} == {NODE}
    assert {f.task_id for f in rows} == {c.task_id for c in filled.sent}
    assert store.get(BACKFILLED).next_run is None

    claimers = {f.claimed_by for name in SCHEDULED for f in history[name]} - {None}
    assert len(claimers) >= 2, f"only {claimers} claimed"
    store.close()


def _operator_app(broker: str, url: str, queue: str) -> Celery:
    """An app that publishes as the workers' (tests/e2e/e2e_app.py) does: same broker,
    same default queue; it knows ``e2e.record`` by name only."""
    app = Celery("controls", broker=broker, set_as_current=False)
    app.conf.update(
        broker_connection_retry_on_startup=True,
        task_ignore_result=True,
        task_default_queue=queue,
        cronstore_url=url,
    )

    app.task(name="e2e.record", shared=False)(_record)
    return app


def _record(*args: object) -> None:
    """The operator's app publishes ``e2e.record``; only the workers run it."""


def _midway(store: Store) -> datetime:
    """Wait until the database's clock is between 0.8 and 1.2 s past a grid point."""
    while True:
        now = store.now()
        last = _last(now)
        offset = (now - last).total_seconds()
        if 0.8 <= offset <= 1.2:
            return now
        time.sleep(0.05 if offset < 0.8 else max(0.05, 2.8 - offset))


def _last(instant: datetime) -> datetime:
    last = GRID.last_at_or_before(instant)
    assert last is not None
    return last


def _next(instant: datetime) -> datetime:
    """The first grid point at or after ``instant``."""
    point = GRID.next_after(instant - timedelta(microseconds=1))
    assert point is not None
    return point


def _grid(start: datetime, end: datetime, grid: Timer = GRID) -> list[datetime]:
    """The grid points in ``(start, end]``."""
    points = []
    point = grid.next_after(start)
    while point is not None and point <= end:
        points.append(point)
        point = grid.next_after(point)
    return points


def _times(got: list[dict[str, Any]], name: str) -> list[datetime]:
    return sorted(datetime.fromisoformat(d["fire_time"]) for d in got if d["args"] == [name])


def _doubles(times: list[datetime]) -> dict[datetime, int]:
    return {t: n for t, n in Counter(times).items() if n > 1}


def _arrival(got: list[dict[str, Any]], name: str, point: datetime) -> float:
    (at,) = [d["at"] for d in got if d["args"] == [name] and d["fire_time"] == point.isoformat()]
    return float(at)


def _row(history: list[Fire], point: datetime) -> Fire:
    (row,) = [f for f in history if f.fire_time == point]
    return row


def _unsent_points(history: list[Fire]) -> list[datetime]:
    """The grid points the ledger holds as never sent (each point of a missed span)."""
    points = []
    for f in history:
        if f.state not in NOT_RUN:
            continue
        points.append(f.fire_time)
        if f.fire_until is not None:
            points.extend(_grid(f.fire_time, f.fire_until))
    return points


def _accounted(store: Store, name: str, record: Path, start: datetime, end: datetime) -> bool:
    """Whether each grid point of task ``name`` in ``(start, end]`` is delivered or held
    by the ledger as never sent."""
    done = set(_times(deliveries(record), name)) | set(_unsent_points(store.history(name, 1000)))
    return all(p in done for p in _grid(start, end))


def _check_accounted(
    history: list[Fire], sent: list[datetime], observed: list[datetime], name: str
) -> None:
    """Each observed grid point is sent or recorded unsent, never both, never twice."""
    unsent = [p for p in _unsent_points(history) if observed[0] <= p <= observed[-1]]
    assert _doubles(unsent) == {}, f"{name}: points recorded unsent twice"
    both = set(unsent) & set(sent)
    assert both == set(), f"{name}: sent and recorded unsent: {sorted(both)}"
    assert set(observed) <= set(unsent) | set(sent), f"{name}: points unaccounted for"
