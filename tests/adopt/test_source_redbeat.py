"""The RedBeat reader, on keys RedBeat itself wrote (``RedBeatSchedulerEntry.save``).

Each test has a key prefix of its own, removed afterwards. Bad entries RedBeat cannot
write (a ``*/0`` crontab, a zone the tz database lacks, text that is not JSON) are made by
saving a good entry with RedBeat and then damaging its hash, as a botched hand edit would.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from celery import Celery
from celery.schedules import crontab, schedule, solar
from redbeat import RedBeatSchedulerEntry
from redbeat.schedules import rrule

from celery_cronstore.adopt.records import Incoming, Read, ReadContext, Refused
from celery_cronstore.adopt.sources import reader
from celery_cronstore.timers import fires, parse_timer

pytestmark = pytest.mark.redis

UTC = timezone.utc
LAST = datetime(2026, 3, 2, 10, 0, 7, tzinfo=UTC)
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    name = f"test-redbeat-{uuid.uuid4().hex[:8]}:"
    yield name
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{name}*"))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def app(redis_url: str, prefix: str) -> Celery:
    app = Celery("redbeat-peer", set_as_current=False)
    app.conf.update(
        timezone="Europe/Berlin", redbeat_redis_url=redis_url, redbeat_key_prefix=prefix
    )
    return app


def save(app: Celery, name: str, schedule_: Any, **fields: Any) -> RedBeatSchedulerEntry:
    entry = RedBeatSchedulerEntry(
        name=name, task=fields.pop("task", "peer.task"), schedule=schedule_, app=app, **fields
    )
    return entry.save()


def read_all(redis_url: str, prefix: str) -> dict[str, Read]:
    got = reader("redbeat")(redis_url, ReadContext(zone="Europe/Berlin", key_prefix=prefix))
    return {r.name: r for r in got}


def incoming(reads: dict[str, Read], name: str) -> Incoming:
    read = reads[name]
    assert isinstance(read, Incoming), read
    return read


def first_fires(read: Incoming, after: datetime, count: int) -> list[datetime]:
    values = read.values
    timer = parse_timer(values["timer"], kind=values["kind"], tz=values["tz"])
    return list(fires(timer, after, limit=count))


def test_entries_written_by_redbeat_come_over(app: Celery, redis_url: str, prefix: str) -> None:
    save(app, "fresh", schedule(timedelta(minutes=5)))
    ran = save(app, "ran", schedule(timedelta(seconds=90)), args=[1, "two"], kwargs={"k": 3})
    ran._next_instance(last_run_at=LAST)  # as RedBeat's beat does after a fire
    save(
        app,
        "first-monday",
        crontab(minute=0, hour=9, day_of_month="1-7", day_of_week="mon"),
        options={"queue": "reports", "priority": 5, "expires": 600},
    )
    save(app, "weekdays", crontab(minute="*/30", hour="8-17", day_of_week="mon-fri"))
    save(app, "off", crontab(minute=0, hour=3), enabled=False)
    save(
        app,
        "rule",
        rrule("WEEKLY", dtstart=START, byweekday=[0, 4], byhour=9, byminute=0, bysecond=0, app=app),
    )

    reads = read_all(redis_url, prefix)
    assert sorted(reads) == ["first-monday", "fresh", "off", "ran", "rule", "weekdays"]

    fresh = incoming(reads, "fresh")
    # RedBeat stamps a new entry's last_run_at with the time it was saved, and fires it
    # one period later: so does the interval.
    assert fresh.last_run_at is not None
    assert fresh.values["timer"].startswith("every 5m from ")
    assert first_fires(fresh, fresh.last_run_at, 1) == [fresh.last_run_at + timedelta(minutes=5)]
    assert fresh.origin == f"redbeat key {prefix}fresh"

    ran_read = incoming(reads, "ran")
    assert ran_read.last_run_at == LAST
    assert ran_read.total_run_count == 1
    assert (ran_read.values["args"], ran_read.values["kwargs"]) == ([1, "two"], {"k": 3})
    # RedBeat fires it 90 s after its last run, and on from there.
    assert first_fires(ran_read, LAST, 2) == [
        LAST + timedelta(seconds=90),
        LAST + timedelta(seconds=180),
    ]

    monday = incoming(reads, "first-monday")
    assert (monday.values["kind"], monday.values["timer"], monday.values["tz"]) == (
        "calendar", "Mon *-*-01..07 09:00:00", "Europe/Berlin"
    )  # fmt: skip
    assert monday.values["options"] == {"queue": "reports", "priority": 5, "expires": 600}
    assert monday.values["enabled"] is True
    april = first_fires(monday, datetime(2026, 4, 1, tzinfo=UTC), 2)
    assert [t.date().isoformat() for t in april] == ["2026-04-06", "2026-05-04"]

    assert incoming(reads, "weekdays").values["timer"] == "*/30 8-17 * * 1-5"
    assert incoming(reads, "off").values["enabled"] is False

    rule = incoming(reads, "rule")
    assert rule.start_at == START
    assert rule.values["kind"] == "calendar"
    # The same fires dateutil (RedBeat's engine) gives.
    loaded = RedBeatSchedulerEntry.from_key(f"{prefix}rule", app=app).schedule.rrule
    cursor, theirs = START - timedelta(microseconds=1), []
    for _ in range(6):
        cursor = loaded.after(cursor)
        theirs.append(cursor.astimezone(UTC))
    assert first_fires(rule, START - timedelta(microseconds=1), 6) == theirs


def test_bad_entries_are_refused_and_the_rest_read(
    app: Celery, redis_url: str, prefix: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    save(app, "good", crontab(minute=15, hour=4))
    save(app, "step", crontab(minute=5))
    definition = json.loads(client.hget(f"{prefix}step", "definition"))
    definition["schedule"]["minute"] = "*/0"
    client.hset(f"{prefix}step", "definition", json.dumps(definition))
    zone = save(app, "zone", schedule(timedelta(minutes=1)))
    zone._next_instance(last_run_at=LAST)
    meta = json.loads(client.hget(f"{prefix}zone", "meta"))
    meta["last_run_at"]["timezone"] = "Mars/Olympus_Mons"
    client.hset(f"{prefix}zone", "meta", json.dumps(meta))
    save(app, "garbled", crontab(minute=5))
    client.hset(f"{prefix}garbled", "definition", '{"task": "x", "args": [1,')
    save(app, "counted", rrule("DAILY", dtstart=START, count=3, app=app))
    client.zadd(f"{prefix}:schedule", {f"{prefix}dangling": 1})
    client.hset(f"{prefix}not-redbeat", "field", "value")  # another app's hash: skipped
    with pytest.raises(TypeError):  # RedBeat cannot even store a solar schedule
        save(app, "sun", solar("sunrise", 52.5, 13.4))
    client.close()

    reads = read_all(redis_url, prefix)
    assert isinstance(reads.pop("good"), Incoming)
    reasons = {name: r.reason for name, r in reads.items() if isinstance(r, Refused)}
    assert set(reasons) == set(reads) == {"step", "zone", "garbled", "counted", "dangling"}
    assert "crontab minute '*/0' cannot be translated" in reasons["step"]
    assert "'Mars/Olympus_Mons'" in reasons["zone"]
    assert "definition is not JSON" in reasons["garbled"]
    assert "rrule count cannot be expressed yet" in reasons["counted"]
    assert "no definition" in reasons["dangling"]
    for name, reason in reasons.items():
        assert reason.startswith(f"{prefix}{name}"), reason  # each names its key


def test_reading_writes_nothing(app: Celery, redis_url: str, prefix: str) -> None:
    save(app, "one", crontab(minute=1))
    client = redis.Redis.from_url(redis_url)
    before = {k: client.dump(k) for k in client.scan_iter(match=f"{prefix}*")}
    read_all(redis_url, prefix)
    assert {k: client.dump(k) for k in client.scan_iter(match=f"{prefix}*")} == before
    client.close()


def test_a_url_is_required() -> None:
    with pytest.raises(ValueError, match="Redis URL"):
        reader("redbeat")(None, ReadContext())
