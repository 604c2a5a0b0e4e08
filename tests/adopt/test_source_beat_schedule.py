"""The ``beat_schedule`` reader: the setting, and the shelve Celery's own
``PersistentScheduler`` writes (made here by ticking it, in a temporary directory)."""

from __future__ import annotations

import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.beat import PersistentScheduler
from celery.schedules import crontab, solar

from celery_cronstore.adopt.records import Incoming, Read, ReadContext, Refused
from celery_cronstore.adopt.sources import reader
from celery_cronstore.timers import fires, parse_timer

UTC = timezone.utc
LAST = datetime(2026, 3, 2, 10, 0, 7, tzinfo=UTC)

SCHEDULE: dict[str, Any] = {
    "every-10s": {"task": "peer.poll", "schedule": 10.0, "args": (1, 2)},
    "nightly": {"task": "peer.nightly", "schedule": crontab(minute=15, hour=3)},
    "first-monday": {
        "task": "peer.report",
        "schedule": crontab(minute=0, hour=9, day_of_month="1-7", day_of_week="mon"),
        "kwargs": {"fmt": "pdf"},
        "options": {"queue": "reports"},
    },
    "hourly-rel": {"task": "peer.tidy", "schedule": timedelta(hours=1), "relative": True},
}


def app_with(schedule: dict[str, Any], zone: str = "Europe/Berlin") -> Celery:
    app = Celery("peer", set_as_current=False, broker="memory://")
    app.conf.update(timezone=zone, beat_schedule=schedule)
    return app


def make_shelve(path: Path, schedule: dict[str, Any]) -> None:
    """Let Celery's PersistentScheduler write its shelve: start, tick, record a run, sync."""
    beat = PersistentScheduler(app=app_with(schedule), schedule_filename=str(path))
    beat.tick()
    ran = beat.schedule["every-10s"]
    ran.last_run_at, ran.total_run_count = LAST, 4
    beat.sync()
    beat.close()


def by_name(reads: list[Read]) -> dict[str, Read]:
    return {r.name: r for r in reads}


def incoming(reads: dict[str, Read], name: str) -> Incoming:
    read = reads[name]
    assert isinstance(read, Incoming), read
    return read


def next_fires(read: Incoming, after: datetime, count: int) -> list[datetime]:
    v = read.values
    return list(fires(parse_timer(v["timer"], kind=v["kind"], tz=v["tz"]), after, limit=count))


def check_setting(reads: dict[str, Read]) -> None:
    assert incoming(reads, "every-10s").values["args"] == [1, 2]
    nightly = incoming(reads, "nightly")
    assert (nightly.values["timer"], nightly.values["tz"]) == ("15 3 * * *", "Europe/Berlin")
    monday = incoming(reads, "first-monday")
    assert (monday.values["kind"], monday.values["timer"]) == (
        "calendar", "Mon *-*-01..07 09:00:00"
    )  # fmt: skip
    assert monday.values["options"] == {"queue": "reports"}
    assert monday.values["kwargs"] == {"fmt": "pdf"}


def test_setting_from_the_app() -> None:
    # cronstore's own beat reads an entry's "cronstore" mapping (policies): so does this.
    policies = {"cronstore": {"misfire_policy": "skip"}}
    schedule = {**SCHEDULE, "first-monday": {**SCHEDULE["first-monday"], **policies}}
    reads = by_name(reader("beat-schedule")(None, ReadContext(app=app_with(schedule))))
    check_setting(reads)
    assert incoming(reads, "first-monday").values["misfire_policy"] == "skip"
    fresh = incoming(reads, "every-10s")
    assert fresh.values["timer"] == "every 10s"
    assert any("epoch" in note for note in fresh.notes)


@pytest.mark.parametrize("attribute", ["beatconf:beat_schedule", "beatconf.app", "beatconf:app"])
def test_setting_from_a_python_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attribute: str
) -> None:
    (tmp_path / "beatconf.py").write_text(
        textwrap.dedent(
            """
            from celery import Celery
            from celery.schedules import crontab
            beat_schedule = {"nightly": {"task": "t", "schedule": crontab(minute=15, hour=3)}}
            app = Celery("conf", set_as_current=False)
            app.conf.update(timezone="Asia/Tokyo", beat_schedule=beat_schedule)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reads = by_name(reader("beat-schedule")(attribute, ReadContext(zone="UTC")))
    # A dict is read in the context's zone, an app in its own.
    zone = "UTC" if attribute.endswith("beat_schedule") else "Asia/Tokyo"
    assert incoming(reads, "nightly").values["tz"] == zone


def test_shelve_alone_gives_entries_and_last_runs(tmp_path: Path) -> None:
    path = tmp_path / "celerybeat-schedule"
    make_shelve(path, SCHEDULE)
    reads = by_name(reader("beat-schedule")(str(path), ReadContext(zone="UTC")))
    check_setting(reads)  # the zone the shelve was written in, not the context's
    ran = incoming(reads, "every-10s")
    assert (ran.last_run_at, ran.total_run_count) == (LAST, 4)
    assert next_fires(ran, LAST, 2) == [LAST + timedelta(seconds=10), LAST + timedelta(seconds=20)]
    # relative=True: Celery rounds last run + 1 h down to the hour.
    rel = incoming(reads, "hourly-rel")
    assert rel.last_run_at is not None
    [first] = next_fires(rel, rel.last_run_at, 1)
    assert first == (rel.last_run_at + timedelta(hours=1)).replace(
        minute=0, second=0, microsecond=0
    )


def test_setting_with_the_shelve_for_last_runs(tmp_path: Path) -> None:
    path = tmp_path / "celerybeat-schedule"
    make_shelve(path, {**SCHEDULE, "retired": {"task": "t", "schedule": 60.0}})
    app = app_with(SCHEDULE)
    for location, context in [
        (str(path), ReadContext(app=app)),
        (f"{__name__}:SCHEDULE@{path}", ReadContext(zone="Europe/Berlin")),
    ]:
        reads = by_name(reader("beat-schedule")(location, context))
        check_setting(reads)
        assert incoming(reads, "every-10s").last_run_at == LAST
        retired = reads["retired"]
        assert isinstance(retired, Refused)
        assert "no longer in beat_schedule" in retired.reason


def test_a_shelve_of_another_zone_gives_no_last_runs(tmp_path: Path) -> None:
    path = tmp_path / "celerybeat-schedule"
    make_shelve(path, SCHEDULE)
    reads = by_name(reader("beat-schedule")(str(path), ReadContext(app=app_with(SCHEDULE, "UTC"))))
    ran = incoming(reads, "every-10s")
    assert ran.last_run_at is None
    assert any("Celery resets it" in note for note in ran.notes)


def test_bad_entries_are_refused_and_the_rest_read(tmp_path: Path) -> None:
    bad: dict[str, Any] = {
        "good": {"task": "t", "schedule": crontab(minute=1)},
        "step": {"task": "t", "schedule": "*/0 * * * *"},
        "zone": {"task": "t", "schedule": "Mon 09:00 Mars/Olympus_Mons"},
        "args": {"task": "t", "schedule": 60.0, "args": [object()]},
        "sun": {"task": "t", "schedule": solar("sunrise", 89.9, 13.4)},
        "policy": {"task": "t", "schedule": 60.0, "cronstore": {"colour": "red"}},
        "notask": {"schedule": 60.0},
    }
    reads = by_name(reader("beat-schedule")(None, ReadContext(app=app_with(bad))))
    assert isinstance(reads.pop("good"), Incoming)
    reasons = {name: r.reason for name, r in reads.items() if isinstance(r, Refused)}
    assert set(reasons) == set(reads)
    assert "'*/0'" in reasons["step"] or "*/0" in reasons["step"]
    assert "Mars/Olympus_Mons" in reasons["zone"]
    assert "args must be JSON-serializable" in reasons["args"]
    assert "latitude must be a number of degrees from -89.5 to 89.5" in reasons["sun"]
    assert "unknown 'cronstore' key(s) colour" in reasons["policy"]
    assert "its task is None" in reasons["notask"]
    for name, reason in reasons.items():
        assert reason.startswith(f"beat_schedule entry {name!r}")


def test_bad_locations() -> None:
    read = reader("beat-schedule")
    with pytest.raises(ValueError, match="no beat_schedule to read"):
        read(None, ReadContext())
    with pytest.raises(ValueError, match="cannot import"):
        read("no_such_module_here:beat_schedule", ReadContext())
    with pytest.raises(ValueError, match="cannot read the beat shelve"):
        read("/nonexistent/celerybeat-schedule", ReadContext())
