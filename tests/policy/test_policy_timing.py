"""The timer memo of the rules (``policy.timer_of``): it answers exactly as the timer it
wraps, for every method of the Timer contract, and a long backlog is counted exactly."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import itertools
import pickle
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from task_rows import periodic_task
from timeline import T0

from celery_cronstore import policy
from celery_cronstore.records import PeriodicTask
from celery_cronstore.timers import TIMER_KINDS, Timer, parse_timer

#: (kind, expression, zone): every kind, in a zone with DST where it matters.
TIMERS = [
    ("calendar", "Mon..Fri *-*-* 09:30", "Europe/Berlin"),
    ("calendar", "*-*-* *:00/15", "UTC"),
    ("cron", "*/5 * * * *", "UTC"),
    ("cron", "30 2 * * *", "Europe/Berlin"),
    ("interval", "every 1m", "UTC"),
    ("interval", "every 1h30m from 2026-01-01T00:10", "Europe/Berlin"),
    ("once", "2026-05-01T09:00:00Z", "UTC"),
    ("solar", "sunrise 52.52 13.405", "Europe/Berlin"),
    ("solar", "dusk 69.65 18.96", "UTC"),  # Tromsø: weeks without a dusk
]
INSTANTS = [
    T0,  # a Monday noon
    datetime(2026, 3, 29, 1, 30, tzinfo=timezone.utc),  # Berlin springs forward
    datetime(2026, 5, 1, 9, 0, tzinfo=timezone.utc),  # the one-off instant itself
    datetime(2026, 10, 25, 0, 59, 59, tzinfo=timezone.utc),  # Berlin falls back
]

#: Arguments tried for each parameter name of a Timer method. Spans reach past 1,000
#: grid points so that an exact count and a bounded walk disagree when not delegated.
ARGUMENTS: dict[str, Any] = {
    "after": lambda t: [t],
    "now": lambda t: [t],
    "instant": lambda t: [t],
    "last_fire": lambda t: [None, t - timedelta(hours=1)],
    "until": lambda t: [t + timedelta(hours=2), t + timedelta(days=30)],
    "limit": lambda t: [10, 1000],
}


def contract() -> list[str]:
    """Return the public methods of the Timer contract, found by introspection."""
    return sorted(
        name for name, value in vars(Timer).items() if callable(value) and not name.startswith("_")
    )


def row(kind: str, expression: str, tz: str) -> PeriodicTask:
    """Return an enabled stored task with the given timer."""
    return periodic_task(
        timer_kind=kind,
        timer=expression,
        tz=tz,
        next_run=None,
        created_at=T0 - timedelta(days=10),
        updated_at=T0 - timedelta(days=10),
    )


def outcome(method: Any, kwargs: dict[str, Any]) -> tuple[str, Any]:
    """Return what a call gives: its answer, or the type and text of its error."""
    try:
        return ("answer", method(**kwargs))
    except Exception as exc:  # the wrapper must fail as the timer does
        return ("error", (type(exc), str(exc)))


def calls(method: Any, instant: datetime) -> list[dict[str, Any]]:
    """Return every combination of the arguments tried for ``method`` at ``instant``."""
    names = [name for name in inspect.signature(method).parameters if name != "self"]
    missing = [name for name in names if name not in ARGUMENTS]
    assert not missing, f"{method.__qualname__}: add test arguments for {missing}"
    choices = [ARGUMENTS[name](instant) for name in names]
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*choices)]


def test_every_kind_is_tried() -> None:
    assert {kind for kind, _, _ in TIMERS} == set(TIMER_KINDS)


def test_the_contract_is_found() -> None:
    # A guard on the introspection itself: it must see the methods known today.
    assert {"next_after", "first_fire", "last_at_or_before", "count_between", "describe"} <= set(
        contract()
    )


@pytest.mark.parametrize("method", contract())
def test_the_memo_delegates_every_method_of_the_contract(method: str) -> None:
    """Inherited, a method would run the base class's generic version on the memo."""
    wrapped = policy.timer_of(row("interval", "every 1m", "UTC"))
    assert method in vars(type(wrapped)), f"the timer memo inherits {method}()"


@pytest.mark.parametrize(("kind", "expression", "tz"), TIMERS)
@pytest.mark.parametrize("method", contract())
def test_the_memo_answers_as_the_timer_it_wraps(
    kind: str, expression: str, tz: str, method: str
) -> None:
    timer = parse_timer(expression, kind=kind, tz=tz)
    wrapped = policy.timer_of(row(kind, expression, tz))
    for instant in INSTANTS:
        for kwargs in calls(getattr(timer, method), instant):
            expected = outcome(getattr(timer, method), kwargs)
            assert outcome(getattr(wrapped, method), kwargs) == expected, (method, kwargs)


@pytest.mark.parametrize(("kind", "expression", "tz"), TIMERS)
def test_the_memo_looks_like_the_timer_it_wraps(kind: str, expression: str, tz: str) -> None:
    timer = parse_timer(expression, kind=kind, tz=tz)
    wrapped = policy.timer_of(row(kind, expression, tz))
    assert (wrapped.kind, wrapped.tz_name) == (timer.kind, timer.tz_name)
    assert (str(wrapped), repr(wrapped)) == (str(timer), repr(timer))
    assert wrapped == timer
    assert hash(wrapped) == hash(timer)
    # Beyond the contract: what each kind adds (``matches``, ``period``...).
    extras = [name for name in dir(timer) if not name.startswith("_") and name != "parse"]
    for name in extras:
        mine, theirs = getattr(wrapped, name), getattr(timer, name)
        if callable(theirs) and name not in contract():
            assert mine(T0) == theirs(T0), name  # the extras take one instant
        elif not callable(theirs):
            assert mine == theirs, name


@pytest.mark.parametrize(("kind", "expression", "tz"), TIMERS)
def test_the_memo_copies_and_pickles_as_an_equal_memo(kind: str, expression: str, tz: str) -> None:
    wrapped = policy.timer_of(row(kind, expression, tz))
    for again in (copy.copy(wrapped), copy.deepcopy(wrapped), pickle.loads(pickle.dumps(wrapped))):
        assert again == wrapped
        assert again.next_after(T0) == wrapped.next_after(T0)
        assert again.count_between(T0, T0 + timedelta(days=30), limit=10) == (
            wrapped.count_between(T0, T0 + timedelta(days=30), limit=10)
        )


def test_a_three_day_outage_of_an_every_minute_task_counts_its_missed_fires_exactly() -> None:
    """Regression: through the memo the interval's exact count was hidden; after a 3-day
    outage the missed entry said "about 4320 fire(s)" instead of counting them."""
    task = dataclasses.replace(row("interval", "every 1m", "UTC"), next_run=T0 - timedelta(days=3))
    result = policy.plan(
        task,
        policy.timer_of(task),
        T0,
        lambda: None,
        node="beat-1",
        lease=timedelta(seconds=30),
        grace=timedelta(seconds=30),
    )
    (missed, claimed) = result.entries
    # The grid holds 3 * 1440 + 1 points from T0 - 3 days to T0; T0 itself is published.
    assert (missed.state, missed.fire_count) == ("missed", 3 * 1440)
    assert missed.fire_until == T0 - timedelta(minutes=1)
    assert missed.reason is not None
    assert missed.reason.startswith(f"{3 * 1440} fire(s) from ")
    assert "about" not in missed.reason
    assert (claimed.state, claimed.fire_time) == ("claimed", T0)
