"""The django-celery-beat reader: every field and schedule kind, bad rows, and the AND rule.

The data is made by django-celery-beat itself (its migrations and models, in a
subprocess: ``peers/make_dcb.py``), on SQLite and on PostgreSQL; only the reader's output
is checked here, not the import into the store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab

from celery_cronstore.adopt.records import Incoming, Read, ReadContext, Refused
from celery_cronstore.adopt.sources import django_celery_beat as dcb
from celery_cronstore.adopt.sources import reader
from celery_cronstore.timers import parse_timer
from harness.scratch import scratch_database

UTC = timezone.utc
PEERS = Path(__file__).parent / "peers"
TABLE = "django_celery_beat_periodictask"
CONTEXT = ReadContext(zone="Europe/Berlin")

LAST = "2026-05-04T07:15:00+00:00"
START = "2026-03-01T00:00:00+00:00"
EXPIRES = "2026-12-31T23:00:00+00:00"
CLOCKED = "2026-12-01T09:00:00+00:00"


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def _cron(
    minute: str = "*",
    hour: str = "*",
    dom: str = "*",
    moy: str = "*",
    dow: str = "*",
    tz: str = "UTC",
) -> dict[str, Any]:
    return {
        "crontab": {
            "minute": minute,
            "hour": hour,
            "day_of_month": dom,
            "month_of_year": moy,
            "day_of_week": dow,
            "timezone": tz,
        }
    }


def _every(every: int, period: str) -> dict[str, Any]:
    return {"interval": {"every": every, "period": period}}


#: name -> (schedule, PeriodicTask fields, fields forced past save(), schedule fields forced)
CATALOG: dict[str, tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any], dict[str, Any]]]
CATALOG = {
    "cron-all-fields": (
        _cron("*/15", "9-17", dow="mon-fri", tz="Europe/Berlin"),
        {
            "args": '[1, "a"]',
            "kwargs": '{"k": 2}',
            "queue": "q1",
            "exchange": "ex",
            "routing_key": "rk",
            "priority": 5,
            "headers": '{"h": "v"}',
            "expire_seconds": 30,
            "description": "all fields",
            "start_time": START,
            "last_run_at": LAST,
            "total_run_count": 7,
        },
        {},
        {},
    ),
    "cron-and": (_cron("0", "9", dom="1-7", dow="mon", tz="Europe/Berlin"), {}, {}, {}),
    "cron-and-list": (
        _cron("30", "6,18", dom="8-14", dow="fri,sat", tz="America/New_York"),
        {},
        {},
        {},
    ),
    "cron-dom-only": (_cron("0", "0", dom="13"), {}, {}, {}),
    "cron-spaces": (_cron("0, 30", "8", dow="sat,sun"), {}, {}, {}),
    "interval-ran": (_every(90, "minutes"), {"last_run_at": LAST, "total_run_count": 3}, {}, {}),
    "interval-start": (_every(10, "seconds"), {"start_time": START}, {}, {}),
    "interval-fresh": (_every(2, "hours"), {}, {}, {}),
    "interval-micro-whole": (_every(2_000_000, "microseconds"), {}, {}, {}),
    "clocked": ({"clocked": {"clocked_time": CLOCKED}}, {"one_off": True}, {}, {}),
    "oneoff-cron-start": (_cron("30", "6"), {"one_off": True, "start_time": START}, {}, {}),
    "oneoff-cron-changed": (
        _cron("0", "12"),
        {"one_off": True},
        {"date_changed": "2026-05-05T13:00:00+00:00"},
        {},
    ),
    "oneoff-interval-ran": (
        _every(1, "hours"),
        {"one_off": True, "last_run_at": LAST, "total_run_count": 1},
        {},
        {},
    ),
    "disabled": (_cron("0", "3"), {"enabled": False}, {}, {}),
    "expires": (_cron("0", "4"), {"expires": EXPIRES}, {}, {}),
    # refused
    "bad-step": (_cron("*/0"), {}, {}, {}),
    "bad-zone": (_cron("0", "9"), {}, {}, {"timezone": "Mars/Olympus_Mons"}),
    "bad-args": (_cron("0", "9"), {"args": "not json"}, {}, {}),
    "bad-kwargs": (_cron("0", "9"), {"kwargs": "[1, 2]"}, {}, {}),
    "bad-headers": (_cron("0", "9"), {"headers": '{"h": '}, {}, {}),
    "bad-micro": (_every(1_500_000, "microseconds"), {}, {}, {}),
    "bad-long": (_every(400, "days"), {}, {}, {}),
    "solar": (
        {"solar": {"event": "sunrise", "latitude": "52.520000", "longitude": "13.405000"}},
        {},
        {},
        {},
    ),
    "no-schedule": (_cron("0", "9"), {}, {"crontab": None}, {}),
    # Within half a degree of the pole: cronstore's solar timers refuse it.
    "bad-solar": (
        {"solar": {"event": "sunset", "latitude": "89.900000", "longitude": "0.000000"}},
        {},
        {},
        {},
    ),
}
REFUSED = {
    "bad-step": "crontab",
    "bad-zone": "'Mars/Olympus_Mons' is not in the tz database",
    "bad-args": "its args is not JSON",
    "bad-kwargs": "its kwargs is a JSON list, not a JSON object",
    "bad-headers": "its headers is not JSON",
    "bad-micro": "not a whole number of seconds",
    "bad-long": "longer than the 366 days",
    "no-schedule": "it has no schedule",
    "bad-solar": "is not a cronstore solar timer (the latitude must be",
}
BULK = 300


def _bulk(i: int) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any], dict[str, Any]]:
    kind = i % 4
    if kind == 0:
        return _cron(str(i % 60), str(i % 24), tz="Europe/Berlin"), {"args": f"[{i}]"}, {}, {}
    if kind == 1:
        return _every(i + 1, "minutes"), {"kwargs": json.dumps({"i": i})}, {}, {}
    if kind == 2:
        at = (_at(CLOCKED) + timedelta(hours=i)).isoformat()
        return {"clocked": {"clocked_time": at}}, {"one_off": True}, {}, {}
    return _cron(str(i % 60), dom=str(1 + i % 28), dow="tue"), {"queue": f"q{i}"}, {}, {}


def _spec() -> list[dict[str, Any]]:
    items = [(name, *row) for name, row in CATALOG.items()]
    items += [(f"bulk-{i:03d}", *_bulk(i)) for i in range(BULK)]
    return [
        {
            "name": name,
            "task": f"tasks.{name}",
            "schedule": schedule,
            "fields": fields,
            "force": force,
            "schedule_force": schedule_force,
        }
        for name, schedule, fields, force, schedule_force in items
    ]


def make_dcb(url: str, tasks: list[dict[str, Any]], *, read: bool = False) -> Any:
    """Run django-celery-beat in a subprocess to make ``tasks`` at ``url``."""
    env = {**os.environ, "DCB_DATABASE_URL": url}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, str(PEERS / "make_dcb.py"), *(["--read"] if read else [])],
        input=json.dumps({"tasks": tasks}),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(
    scope="module",
    params=[pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)],
)
def dcb_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A database with django-celery-beat's tables and the catalog, made by itself."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('dcb') / 'dcb.sqlite'}"
        make_dcb(url, _spec())
        yield url
        return
    with scratch_database(request.getfixturevalue("postgres_url"), prefix="dcb") as db:
        make_dcb(db.url, _spec())
        yield db.url


@pytest.fixture(scope="module")
def reads(dcb_url: str) -> dict[str, Read]:
    got = dcb.read(dcb_url, CONTEXT)
    return {r.name: r for r in got}


def incoming(reads: dict[str, Read], name: str) -> Incoming:
    found = reads[name]
    assert isinstance(found, Incoming), found
    return found


def fires(read: Incoming, after: datetime, count: int) -> list[datetime]:
    timer = parse_timer(read.values["timer"], kind=read.values["kind"], tz=read.values["tz"])
    out: list[datetime] = []
    while len(out) < count:
        nxt = timer.next_after(after)
        if nxt is None:
            break
        out.append(nxt)
        after = nxt
    return out


# -- Celery's own crontab, the reference --------------------------------------------------


def celery_walk(schedule: dict[str, Any], start: datetime, end: datetime) -> list[datetime]:
    """Every minute in [start, end) Celery's parsed crontab matches (both day fields)."""
    fields = schedule["crontab"]
    c = crontab(
        minute=fields["minute"],
        hour=fields["hour"],
        day_of_month=fields["day_of_month"],
        month_of_year=fields["month_of_year"],
        day_of_week=fields["day_of_week"],
    )
    zone = ZoneInfo(fields["timezone"])
    out, t = [], start
    while t < end:
        local = t.astimezone(zone)
        if (
            local.minute in c.minute
            and local.hour in c.hour
            and local.day in c.day_of_month
            and local.month in c.month_of_year
            and local.isoweekday() % 7 in c.day_of_week
        ):
            out.append(t)
        t += timedelta(minutes=1)
    return out


def celery_chain(schedule: dict[str, Any], start: datetime, count: int) -> list[datetime]:
    """The fires Celery's ``remaining_estimate`` gives, one after the other."""
    fields = schedule["crontab"]
    zone = ZoneInfo(fields["timezone"])
    app = Celery(set_as_current=False)
    app.conf.timezone = fields["timezone"]
    now = [start]
    c = crontab(
        minute=fields["minute"],
        hour=fields["hour"],
        day_of_month=fields["day_of_month"],
        month_of_year=fields["month_of_year"],
        day_of_week=fields["day_of_week"],
        app=app,
        nowfun=lambda: now[0],
    )
    out, last = [], start.astimezone(zone)
    for _ in range(count):
        now[0] = last
        nxt = (last + c.remaining_estimate(last)).astimezone(UTC)
        out.append(nxt)
        last = nxt.astimezone(zone)
    return out


# -- the tests -----------------------------------------------------------------------------


def test_every_row_read_in_table_order(reads: dict[str, Read]) -> None:
    names = list(reads)
    assert names == [*CATALOG, *(f"bulk-{i:03d}" for i in range(BULK))]
    assert {n for n, r in reads.items() if isinstance(r, Refused)} == set(REFUSED)


def test_every_incoming_parses(reads: dict[str, Read]) -> None:
    for read in reads.values():
        if isinstance(read, Incoming):
            assert read.values["kind"] in ("cron", "calendar", "interval", "once", "solar")
            parse_timer(read.values["timer"], kind=read.values["kind"], tz=read.values["tz"])
            assert read.origin.startswith(f"{TABLE} id=")


def test_fields_map(reads: dict[str, Read]) -> None:
    read = incoming(reads, "cron-all-fields")
    v = read.values
    assert v["task"] == "tasks.cron-all-fields"
    assert v["enabled"] is True
    assert v["args"] == [1, "a"]
    assert v["kwargs"] == {"k": 2}
    assert v["options"] == {
        "queue": "q1",
        "exchange": "ex",
        "routing_key": "rk",
        "priority": 5,
        "headers": {"h": "v"},
    }
    assert v["start_deadline"] == 30.0
    assert v["description"] == "all fields"
    assert (v["kind"], v["tz"]) == ("cron", "Europe/Berlin")
    assert read.last_run_at == _at(LAST)
    assert read.last_run_at.tzinfo is UTC
    assert read.start_at == _at(START)
    assert read.total_run_count == 7
    # Unset options stay out; empty args/kwargs are empty.
    plain = incoming(reads, "cron-dom-only").values
    assert (plain["options"], plain["args"], plain["kwargs"]) == ({}, [], {})
    assert plain["start_deadline"] is None
    assert incoming(reads, "disabled").values["enabled"] is False


def test_expires_is_an_iso_option_with_a_note(reads: dict[str, Read]) -> None:
    read = incoming(reads, "expires")
    assert _at(read.values["options"]["expires"]) == _at(EXPIRES)
    assert any("expires" in note and "disable" in note for note in read.notes)


@pytest.mark.parametrize(
    "name", ["cron-all-fields", "cron-and", "cron-and-list", "cron-dom-only", "cron-spaces"]
)
def test_crontab_fires_as_celery_does(reads: dict[str, Read], name: str) -> None:
    # April to August: no DST change in either zone, where Celery's own rule is murky.
    start, end = datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 8, 1, tzinfo=UTC)
    schedule = CATALOG[name][0]
    assert schedule is not None
    expected = celery_walk(schedule, start, end)
    read = incoming(reads, name)
    got = [t for t in fires(read, start - timedelta(microseconds=1), len(expected) + 1) if t < end]
    assert got == expected
    assert len(expected) >= 4
    # And Celery's own next-fire arithmetic (its offset sticks across DST: stay inside).
    count = min(8, len(expected))
    assert celery_chain(schedule, start - timedelta(minutes=1), count) == expected[:count]


def test_and_rule_makes_a_calendar_timer(reads: dict[str, Read]) -> None:
    read = incoming(reads, "cron-and")
    assert (read.values["kind"], read.values["tz"]) == ("calendar", "Europe/Berlin")
    # The first Monday of each month at 09:00 Berlin (cron's OR would fire on days 1-7 too).
    got = fires(read, datetime(2026, 4, 1, tzinfo=UTC), 4)
    assert [t.astimezone(ZoneInfo("Europe/Berlin")).date().isoformat() for t in got] == [
        "2026-04-06",
        "2026-05-04",
        "2026-06-01",
        "2026-07-06",
    ]
    assert incoming(reads, "cron-dom-only").values["kind"] == "cron"
    assert incoming(reads, "cron-spaces").values["kind"] == "cron"


def test_interval_origin_is_the_last_run(reads: dict[str, Read]) -> None:
    read = incoming(reads, "interval-ran")
    assert read.values["kind"] == "interval"
    last = _at(LAST)
    assert read.last_run_at == last
    assert fires(read, last, 2) == [last + timedelta(minutes=90), last + timedelta(minutes=180)]


def test_interval_origin_else_start_time_else_none(reads: dict[str, Read]) -> None:
    start = incoming(reads, "interval-start")
    assert start.start_at == _at(START)
    assert fires(start, _at(START) - timedelta(microseconds=1), 2) == [
        _at(START),
        _at(START) + timedelta(seconds=10),
    ]
    fresh = incoming(reads, "interval-fresh")
    # The epoch grid: every even hour on the hour.
    assert fires(fresh, datetime(2026, 6, 1, 0, 30, tzinfo=UTC), 1) == [
        datetime(2026, 6, 1, 2, tzinfo=UTC)
    ]
    assert any("epoch" in note for note in fresh.notes)
    whole = incoming(reads, "interval-micro-whole")
    assert fires(whole, datetime(2026, 6, 1, tzinfo=UTC), 1) == [
        datetime(2026, 6, 1, 0, 0, 2, tzinfo=UTC)
    ]


def test_a_solar_row_fires_as_celerys_solar_schedule(reads: dict[str, Read]) -> None:
    """Issue 25: solar rows come over as solar timers (they were refused)."""
    from celery import Celery
    from celery.schedules import solar

    read = incoming(reads, "solar")
    assert (read.values["timer"], read.values["kind"]) == ("sunrise 52.52 13.405", "solar")
    app = Celery(set_as_current=False)
    now = datetime(2026, 5, 1, tzinfo=UTC)
    for fire in fires(read, now, 5):
        at = now
        schedule = solar("sunrise", 52.52, 13.405, app=app, nowfun=lambda at=at: at)
        assert abs(now + schedule.remaining_estimate(now) - fire) < timedelta(minutes=1)
        now = fire + timedelta(minutes=2)


def test_clocked_is_a_once_timer(reads: dict[str, Read]) -> None:
    read = incoming(reads, "clocked")
    assert read.values["kind"] == "once"
    assert fires(read, datetime(2026, 1, 1, tzinfo=UTC), 2) == [_at(CLOCKED)]
    assert read.notes == ()


def test_one_off_crontab_and_interval_become_once_timers(reads: dict[str, Read]) -> None:
    start = incoming(reads, "oneoff-cron-start")
    assert start.values["kind"] == "once"
    assert fires(start, datetime(2026, 1, 1, tzinfo=UTC), 2) == [
        datetime(2026, 3, 1, 6, 30, tzinfo=UTC)
    ]
    assert any("one-off" in note for note in start.notes)
    changed = incoming(reads, "oneoff-cron-changed")
    assert fires(changed, datetime(2026, 1, 1, tzinfo=UTC), 2) == [
        datetime(2026, 5, 6, 12, 0, tzinfo=UTC)
    ]
    done = incoming(reads, "oneoff-interval-ran")
    assert done.values["kind"] == "once"
    assert done.last_run_at == _at(LAST)
    assert fires(done, _at(LAST), 1) == []  # it already ran: nothing fires again
    assert any("already ran" in note for note in done.notes)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_bad_rows_are_refused_with_name_origin_and_fix(reads: dict[str, Read], name: str) -> None:
    read = reads[name]
    assert isinstance(read, Refused), read
    assert read.name == name
    assert read.origin.startswith(f"{TABLE} id=")
    assert REFUSED[name] in read.reason
    assert any(word in read.reason for word in ("fix", "recreate", "set", "give", "keep", "use")), (
        read.reason
    )


def test_a_few_hundred_rows_read_fast(dcb_url: str) -> None:
    began = time.perf_counter()
    got = dcb.read(dcb_url, CONTEXT)
    took = time.perf_counter() - began
    bulk = [r for r in got if r.name.startswith("bulk-")]
    assert len(bulk) == BULK
    assert all(isinstance(r, Incoming) for r in bulk)
    kinds = {r.values["kind"] for r in bulk if isinstance(r, Incoming)}
    assert kinds == {"cron", "interval", "once", "calendar"}
    assert took < 5, f"{len(got)} rows took {took:.2f}s"


def test_reader_is_registered() -> None:
    assert reader("django-celery-beat") is dcb.read


def test_through_the_django_orm(dcb_url: str, reads: dict[str, Read]) -> None:
    if not dcb_url.startswith("sqlite"):
        pytest.skip("the ORM path is the same code on every backend; SQLite suffices")
    through_orm = make_dcb(dcb_url, [], read=True)
    expected = {name: _summary(read) for name, read in reads.items()}
    assert through_orm == json.loads(json.dumps(expected, default=str))


def _summary(read: Read) -> dict[str, Any]:
    if isinstance(read, Refused):
        return {"refused": read.reason, "origin": read.origin}
    return {
        "values": dict(read.values),
        "origin": read.origin,
        "last_run_at": read.last_run_at,
        "start_at": read.start_at,
        "total_run_count": read.total_run_count,
        "notes": list(read.notes),
    }


def test_missing_tables_and_files_are_lookup_and_os_errors(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="no SQLite database"):
        dcb.read(f"sqlite:///{tmp_path / 'absent.sqlite'}", CONTEXT)
    assert not (tmp_path / "absent.sqlite").exists()
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    with pytest.raises(LookupError, match=TABLE):
        dcb.read(f"sqlite:///{empty}", CONTEXT)
    with pytest.raises(LookupError, match="not a database URL"):
        dcb.read("not a url", CONTEXT)


def test_without_url_or_django_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("django")
    from django.conf import settings

    if settings.configured:
        pytest.skip("Django is configured in this process (by another test)")
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
    with pytest.raises(LookupError, match="DJANGO_SETTINGS_MODULE"):
        dcb.read(None, CONTEXT)
