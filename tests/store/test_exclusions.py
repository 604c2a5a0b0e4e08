"""Exclusion calendars (issue 25) through the store and three claimers, on every backend:
a task skips the days and windows of the calendars it names (recorded ``skipped`` with the
calendar's reason, never sent), a calendar edited between fires counts at once, a task
naming an unknown calendar is refused, and a calendar in use is not removed silently."""

from __future__ import annotations

import pytest
from timeline import T0, at

from celery_cronstore.fields import FieldValueError
from celery_cronstore.states import FireState
from celery_cronstore.store import Claimer, Store
from celery_cronstore.store.calendars import CalendarInUseError
from celery_cronstore.testing import FrozenClock

DAY = T0.date().isoformat()  # T0's day, in UTC


def test_three_replicas_skip_the_excluded_fires_and_send_the_rest(
    store: Store, clock: FrozenClock
) -> None:
    store.calendars.add("maint", entries=[f"{at(20).isoformat()}..{at(40).isoformat()}"])
    store.add("e", task="t", timer="*:*:0/10", exclude="maint")
    store.add("free", task="t", timer="*:*:0/10")
    replicas = [Claimer(store, f"b{i}") for i in range(3)]
    sent: list[tuple[str, int]] = []
    for second in range(0, 61, 5):
        clock.set(at(second))
        for replica in replicas:
            sent += [
                (c.name, int((c.fire_time - T0).total_seconds()))
                for c in replica.claim_due().claims
            ]
    assert [s for n, s in sent if n == "e"] == [10, 40, 50, 60]  # 20 and 30 in the window
    assert [s for n, s in sent if n == "free"] == [10, 20, 30, 40, 50, 60]
    history = {int((f.fire_time - T0).total_seconds()): f for f in store.history("e")}
    for second in (20, 30):
        assert history[second].state == FireState.SKIPPED
        assert "excluded by calendar 'maint' (in the window" in (history[second].reason or "")
    assert store.get("e").total_run_count == 4

    # The whole day excluded from now on: the next fire is skipped at once.
    store.calendars.add("maint", entries=[DAY], replace=True)
    clock.set(at(70))
    assert [c.name for r in replicas for c in r.claim_due().claims] == ["free"]
    assert store.history("e")[0].state == FireState.SKIPPED


def test_unknown_calendars_and_calendars_in_use_are_refused(
    store: Store, clock: FrozenClock
) -> None:
    with pytest.raises(FieldValueError, match="exclude names no calendar 'nope'"):
        store.add("e", task="t", timer="every 1m", exclude="nope")
    assert store.list() == []
    store.calendars.add("hol", entries=[DAY])
    store.add("e", task="t", timer="every 1m", exclude="hol")
    with pytest.raises(FieldValueError, match="exclude names no calendar 'gone'"):
        store.update("e", exclude="hol,gone")
    assert store.get("e").exclude == "hol"
    with pytest.raises(CalendarInUseError, match=r"excluded by 1 task\(s\) \(e\)"):
        store.calendars.remove("hol")
    assert "hol" in store.calendars.all()
    # Removed by force: beat puts the task in error, naming the calendar; others go on.
    assert store.calendars.remove("hol", force=True) == ["e"]
    store.add("other", task="t", timer="every 1m")
    clock.set(at(60))
    claimed = [c.name for c in Claimer(store, "b1").claim_due().claims]
    assert claimed == ["other"]
    assert "exclusion calendar 'hol' does not exist" in (store.get("e").error or "")
    actions = [e.action for e in store.audit_trail(task="calendar:hol")]
    assert actions == ["calendar-remove", "calendar-add"]
