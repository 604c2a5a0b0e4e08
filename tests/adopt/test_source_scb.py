"""The sqlalchemy-celery-beat reader: every schedule kind and field, bad rows, schemas.

The data is made by sqlalchemy-celery-beat itself (its session manager and models, in a
subprocess: ``peers/make_scb.py``), on SQLite and on PostgreSQL (there in a schema of its
own, as its ``beat_schema`` setting puts it); only the reader's output is checked here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab

from celery_cronstore.adopt.records import Incoming, Read, ReadContext, Refused
from celery_cronstore.adopt.sources import reader
from celery_cronstore.adopt.sources import sqlalchemy_celery_beat as scb
from celery_cronstore.timers import parse_timer
from harness.scratch import scratch_database

UTC = timezone.utc
PEERS = Path(__file__).parent / "peers"
SCHEMA = "beat"

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


#: name -> (schedule, PeriodicTask fields, task fields forced, schedule fields forced)
CATALOG: dict[str, tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any], dict[str, Any]]]
CATALOG = {
    "cron-all-fields": (
        _cron("0", "9", dow="mon-fri", tz="Europe/Berlin"),
        {
            "args": "[42]",
            "kwargs": '{"k": "v"}',
            "queue": "mail",
            "exchange": "ex",
            "routing_key": "rk",
            "priority": 9,
            "headers": '{"team": "ops"}',
            "expire_seconds": 60,
            "description": "weekday mornings",
            "start_time": START,
            "last_run_at": LAST,
            "total_run_count": 12,
        },
        {},
        {},
    ),
    "cron-and": (_cron("15", "8", dom="1-7", dow="tue", tz="Europe/Berlin"), {}, {}, {}),
    "interval-ran": (_every(45, "minutes"), {"last_run_at": LAST}, {}, {}),
    "interval-fresh": (_every(30, "seconds"), {}, {}, {}),
    "clocked": ({"clocked": {"clocked_time": CLOCKED}}, {"one_off": True}, {}, {}),
    "oneoff-cron": (_cron("30", "6"), {"one_off": True, "start_time": START}, {}, {}),
    "disabled": (_cron("0", "3"), {"enabled": False}, {}, {}),
    "expires": (_cron("0", "4"), {"expires": EXPIRES}, {}, {}),
    # refused
    "bad-step": (_cron("0", "9"), {}, {}, {"minute": "*/0"}),
    "bad-zone": (_cron("0", "9"), {}, {}, {"timezone": "Mars/Olympus_Mons"}),
    "bad-args": (_cron("0", "9"), {"args": "[1, 2"}, {}, {}),
    "bad-micro": (_every(250_000, "microseconds"), {}, {}, {}),
    "solar": (
        {"solar": {"event": "sunset", "latitude": 48.85, "longitude": 2.35}},
        {},
        {},
        {},
    ),
    "dangling": (None, {}, {}, {}),
    "bad-solar": (
        {"solar": {"event": "sunset", "latitude": 89.9, "longitude": 2.35}},
        {},
        {},
        {},
    ),
}
REFUSED = {
    "bad-step": "crontab",
    "bad-zone": "'Mars/Olympus_Mons' is not in the tz database",
    "bad-args": "its args is not JSON",
    "bad-micro": "not a whole number of seconds",
    "dangling": "schedule row does not exist",
    "bad-solar": "is not a cronstore solar timer (the latitude must be",
}
BULK = 300


def _bulk(i: int) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any], dict[str, Any]]:
    kind = i % 4
    if kind == 0:
        return _cron(str(i % 60), str(i % 24), tz="Europe/Berlin"), {"args": f"[{i}]"}, {}, {}
    if kind == 1:
        return _every(i + 1, "seconds"), {"kwargs": json.dumps({"i": i})}, {}, {}
    if kind == 2:
        at = (_at(CLOCKED) + timedelta(minutes=i)).isoformat()
        return {"clocked": {"clocked_time": at}}, {"one_off": True}, {}, {}
    return _cron("0", dom=str(1 + i % 28), dow="sun"), {"queue": f"q{i}"}, {}, {}


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


def make_scb(url: str, tasks: list[dict[str, Any]], schema: str | None = None) -> Any:
    """Run sqlalchemy-celery-beat in a subprocess to make ``tasks`` at ``url``."""
    env = {**os.environ, "SCB_DATABASE_URL": url, "SCB_SCHEMA": schema or ""}
    done = subprocess.run(
        [sys.executable, str(PEERS / "make_scb.py")],
        input=json.dumps({"tasks": tasks}),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@dataclass(frozen=True)
class Peer:
    url: str
    schema: str | None
    #: The table as refusals name it.
    table: str


@pytest.fixture(
    scope="module",
    params=[pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)],
)
def peer(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Peer]:
    """A database with sqlalchemy-celery-beat's tables and the catalog, made by itself."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('scb') / 'scb.sqlite'}"
        make_scb(url, _spec())
        yield Peer(url, None, "celery_periodictask")
        return
    with scratch_database(request.getfixturevalue("postgres_url"), prefix="scb") as db:
        make_scb(db.url, _spec(), schema=SCHEMA)
        yield Peer(db.url, SCHEMA, f"{SCHEMA}.celery_periodictask")


def context(peer: Peer) -> ReadContext:
    app = Celery(set_as_current=False)
    app.conf.beat_schema = peer.schema
    return ReadContext(zone="Europe/Berlin", app=app)


@pytest.fixture(scope="module")
def reads(peer: Peer) -> dict[str, Read]:
    return {r.name: r for r in scb.read(peer.url, context(peer))}


def incoming(reads: dict[str, Read], name: str) -> Incoming:
    found = reads[name]
    assert isinstance(found, Incoming), found
    return found


def fires(read: Incoming, after: datetime, count: int) -> list[datetime]:
    timer = parse_timer(read.values["timer"], kind=read.values["kind"], tz=read.values["tz"])
    out: list[datetime] = []
    while len(out) < count and (nxt := timer.next_after(after)) is not None:
        out.append(nxt)
        after = nxt
    return out


def test_every_row_read_in_table_order(reads: dict[str, Read], peer: Peer) -> None:
    assert list(reads) == [*CATALOG, *(f"bulk-{i:03d}" for i in range(BULK))]
    assert {n for n, r in reads.items() if isinstance(r, Refused)} == set(REFUSED)
    for read in reads.values():
        assert read.origin.startswith(f"{peer.table} id=")
        if isinstance(read, Incoming):
            parse_timer(read.values["timer"], kind=read.values["kind"], tz=read.values["tz"])


def test_fields_map(reads: dict[str, Read]) -> None:
    read = incoming(reads, "cron-all-fields")
    v = read.values
    assert v["task"] == "tasks.cron-all-fields"
    assert (v["timer"], v["kind"], v["tz"]) == ("0 9 * * 1-5", "cron", "Europe/Berlin")
    assert v["args"] == [42]
    assert v["kwargs"] == {"k": "v"}
    assert v["options"] == {
        "queue": "mail",
        "exchange": "ex",
        "routing_key": "rk",
        "priority": 9,
        "headers": {"team": "ops"},
    }
    assert v["start_deadline"] == 60.0
    assert v["description"] == "weekday mornings"
    assert v["enabled"] is True
    assert read.last_run_at == _at(LAST)
    assert read.start_at == _at(START)
    assert read.total_run_count == 12
    assert incoming(reads, "disabled").values["enabled"] is False
    expires = incoming(reads, "expires")
    assert _at(expires.values["options"]["expires"]) == _at(EXPIRES)
    assert expires.notes


def test_and_rule_fires_as_celery_does(reads: dict[str, Read]) -> None:
    read = incoming(reads, "cron-and")
    assert (read.values["kind"], read.values["tz"]) == ("calendar", "Europe/Berlin")
    zone = ZoneInfo("Europe/Berlin")
    c = crontab(minute="15", hour="8", day_of_month="1-7", day_of_week="tue")
    start, end = datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 8, 1, tzinfo=UTC)
    expected, t = [], start
    while t < end:  # Celery's parsed fields, all of them required (its AND)
        local = t.astimezone(zone)
        if (
            local.minute in c.minute
            and local.hour in c.hour
            and local.day in c.day_of_month
            and local.isoweekday() % 7 in c.day_of_week
        ):
            expected.append(t)
        t += timedelta(minutes=1)
    assert len(expected) == 4
    assert fires(read, start, 4) == expected


def test_intervals(reads: dict[str, Read]) -> None:
    ran = incoming(reads, "interval-ran")
    last = _at(LAST)
    assert fires(ran, last, 2) == [last + timedelta(minutes=45), last + timedelta(minutes=90)]
    fresh = incoming(reads, "interval-fresh")
    assert fires(fresh, datetime(2026, 6, 1, 0, 0, 10, tzinfo=UTC), 1) == [
        datetime(2026, 6, 1, 0, 0, 30, tzinfo=UTC)
    ]


def test_clocked_and_one_off(reads: dict[str, Read]) -> None:
    clocked = incoming(reads, "clocked")
    assert clocked.values["kind"] == "once"
    assert fires(clocked, datetime(2026, 1, 1, tzinfo=UTC), 2) == [_at(CLOCKED)]
    one_off = incoming(reads, "oneoff-cron")
    assert one_off.values["kind"] == "once"
    assert fires(one_off, datetime(2026, 1, 1, tzinfo=UTC), 2) == [
        datetime(2026, 3, 1, 6, 30, tzinfo=UTC)
    ]
    assert one_off.notes


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_bad_rows_are_refused(reads: dict[str, Read], peer: Peer, name: str) -> None:
    read = reads[name]
    assert isinstance(read, Refused), read
    assert read.origin.startswith(f"{peer.table} id=")
    assert REFUSED[name] in read.reason
    assert "sqlalchemy-celery-beat" in read.reason or "recreate" in read.reason


def test_a_few_hundred_rows_read_fast(peer: Peer) -> None:
    began = time.perf_counter()
    got = scb.read(peer.url, context(peer))
    took = time.perf_counter() - began
    bulk = [r for r in got if isinstance(r, Incoming) and r.name.startswith("bulk-")]
    assert len(bulk) == BULK
    assert {r.values["kind"] for r in bulk} == {"cron", "interval", "once", "calendar"}
    assert took < 5, f"{len(got)} rows took {took:.2f}s"


def test_schema_found_without_an_app(peer: Peer) -> None:
    """Without ``beat_schema``: the default schema, else the one schema that has it."""
    got = scb.read(peer.url, ReadContext(zone="UTC"))
    assert [r.name for r in got] == [*CATALOG, *(f"bulk-{i:03d}" for i in range(BULK))]


def test_missing_tables(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    with pytest.raises(LookupError, match="celery_periodictask"):
        scb.read(f"sqlite:///{empty}", ReadContext())
    with pytest.raises(LookupError, match="no database URL"):
        scb.read(None, ReadContext())
    with pytest.raises(OSError, match="no SQLite database"):
        scb.read(f"sqlite:///{tmp_path / 'absent.sqlite'}", ReadContext())


def test_reader_is_registered() -> None:
    assert reader("sqlalchemy-celery-beat") is scb.read
