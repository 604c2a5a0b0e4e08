"""RedBeat (celery-redbeat 2.x): its entries in Redis, read without RedBeat installed.

``location`` is the Redis URL RedBeat uses (its ``redbeat_redis_url``); the keys start
with ``context.key_prefix`` (RedBeat's ``redbeat_key_prefix``, default ``redbeat:``).
What RedBeat keeps, and what each part becomes:

* ``<prefix><name>``, a hash: ``definition`` is JSON of ``name``, ``task``, ``args``,
  ``kwargs``, ``options``, ``schedule`` and ``enabled``; ``meta`` is JSON of
  ``last_run_at`` and ``total_run_count``. Both use RedBeat's tagged objects
  (``{"__type__": "datetime" | "interval" | "crontab" | "rrule" | "weekday", ...}``),
  decoded here by :func:`decode` (RedBeat's own decoder would need RedBeat, and builds
  schedules that read the clock). Datetimes carry a zone name or an offset in seconds.
* ``<prefix>:schedule``, a sorted set of those keys scored by the next due time (Unix
  seconds; negative: RedBeat will never fire it again). A key listed there without a
  ``definition`` is refused; a hash under the prefix that is not listed is still read
  (RedBeat lists every entry it saves). ``<prefix>:statics`` and ``<prefix>:lock`` are
  RedBeat's own and skipped.

Schedules map through :mod:`celery_cronstore.adopt.convert`: an ``interval`` from its
last run (RedBeat fires ``every`` seconds after it; never run: the epoch grid, noted),
a ``crontab`` in ``context.zone`` (RedBeat evaluates it in the beat app's zone; both
day fields restricted become a calendar timer, as Celery ANDs them), an ``rrule`` from
its ``dtstart`` (the task's ``start_at``: dateutil never fires before it), in
``dtstart``'s UTC offset as RedBeat stores it. ``options`` (queue, priority, expires,
...) come over as they are; the store's checks apply.

Read-only: SCAN, ZRANGE and HGETALL. One bad entry becomes a :class:`Refused` naming its
key; the others are still read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery_cronstore.adopt import convert
from celery_cronstore.adopt.records import Incoming, Read, ReadContext, Refused
from celery_cronstore.adopt.sources.beat_schedule import arguments

__all__ = ["DEFAULT_PREFIX", "decode", "read"]

#: RedBeat's default ``redbeat_key_prefix``.
DEFAULT_PREFIX = "redbeat:"
_GLOB = re.compile(r"([*?\[\]\\])")


def read(location: str | None, context: ReadContext) -> list[Read]:
    """Return every RedBeat entry at the Redis URL ``location``, mapped (see the module doc).

    Without ``location``, the Redis RedBeat itself would use: the app's
    ``redbeat_redis_url``, else its ``broker_url`` (RedBeat's own fallback).
    """
    conf = getattr(context.app, "conf", None)
    if not location and conf is not None:
        location = conf.get("redbeat_redis_url") or conf.get("broker_url")
    if not location:
        raise ValueError(
            "give the Redis URL RedBeat uses (its redbeat_redis_url), e.g. "
            "--url redis://localhost:6379/0"
        )
    try:
        import redis
    except ImportError:  # pragma: no cover - the [redis] extra is missing
        raise ValueError(
            "reading RedBeat needs the redis client: pip install celery-cronstore[redis]"
        ) from None
    prefix = context.key_prefix or DEFAULT_PREFIX
    client = redis.Redis.from_url(location)
    try:
        return _read(client, prefix, context)
    finally:
        client.close()


def _read(client: Any, prefix: str, context: ReadContext) -> list[Read]:
    raw_prefix = prefix.encode()
    schedule_key = raw_prefix + b":schedule"
    scored = dict(client.zrange(schedule_key, 0, -1, withscores=True))
    pattern = _GLOB.sub(r"\\\1", prefix).encode() + b"*"
    keys = set(scored)
    for key in client.scan_iter(match=pattern, count=500, _type="HASH"):
        keys.add(key)
    results: list[Read] = []
    for key in sorted(k for k in keys if not k.startswith(raw_prefix + b":")):
        text = key.decode("utf-8", "backslashreplace")
        fields = client.hgetall(key) if client.type(key) == b"hash" else {}
        if b"definition" not in fields:
            if key in scored:
                results.append(
                    Refused(
                        text[len(prefix) :],
                        f"redbeat key {text}",
                        f"{text} is listed in {prefix}:schedule but has no definition hash "
                        "(a dangling entry): delete it from the sorted set, or save the "
                        "entry again in RedBeat",
                    )
                )
            continue  # another application's hash under the same prefix
        results.append(_entry(text, prefix, fields, scored.get(key), context))
    return results


def _entry(
    key: str, prefix: str, fields: Mapping[bytes, bytes], score: float | None, context: ReadContext
) -> Read:
    name = key[len(prefix) :]
    origin = f"redbeat key {key}"
    try:
        definition = decode(fields[b"definition"], "definition")
        meta = decode(fields.get(b"meta") or b"{}", "meta")
        if not isinstance(definition, dict):
            raise ValueError("its definition is not a JSON object")
        if not isinstance(meta, dict):
            raise ValueError("its meta is not a JSON object")
        given = definition.get("name")
        name = given if isinstance(given, str) and given else name
        return _incoming(name, origin, definition, meta, score, context)
    except ValueError as exc:
        return Refused(name, origin, f"{key}: {exc}")


def _incoming(
    name: str,
    origin: str,
    definition: Mapping[str, Any],
    meta: Mapping[str, Any],
    score: float | None,
    context: ReadContext,
) -> Incoming:
    task = definition.get("task")
    if not isinstance(task, str) or not task:
        raise ValueError(f"its task is {task!r}: save the entry with a task name in RedBeat")
    enabled = definition.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError(f"its enabled is {enabled!r}, not true or false")
    last_run_at = meta.get("last_run_at")
    if last_run_at is not None and not isinstance(last_run_at, datetime):
        raise ValueError(f"its meta last_run_at is {last_run_at!r}, not a datetime")
    runs = meta.get("total_run_count")
    if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 0):
        raise ValueError(f"its meta total_run_count is {runs!r}, not a whole number")
    notes: list[str] = []
    spec, start_at = _schedule(definition.get("schedule"), last_run_at, context, notes)
    if score is not None and score < 0:
        notes.append("RedBeat scored it -1: its schedule had no further fire there")
    values = {
        "task": task,
        "enabled": enabled,
        **spec.values(),
        **arguments(definition.get("args"), definition.get("kwargs"), definition.get("options")),
    }
    return Incoming(
        name=name,
        origin=origin,
        values=values,
        last_run_at=last_run_at,
        total_run_count=runs,
        start_at=start_at,
        notes=tuple(notes),
    )


def _schedule(
    schedule: Any, last_run_at: datetime | None, context: ReadContext, notes: list[str]
) -> tuple[convert.TimerSpec, datetime | None]:
    """Return the timer of a decoded ``schedule`` and the instant before which it must not
    fire (an rrule's dtstart)."""
    if not isinstance(schedule, dict):
        raise ValueError(f"its schedule {schedule!r} is not one RedBeat saves")
    kind = schedule.get("__type__")
    if kind == "interval":
        every, relative = schedule.get("every"), schedule.get("relative", False)
        if isinstance(every, bool) or not isinstance(every, (int, float)):
            raise ValueError(f"its interval every {every!r} is not a number of seconds")
        from celery.schedules import schedule as celery_schedule

        if last_run_at is None:
            notes.append(
                "never ran: fires on the interval grid from the epoch (RedBeat would fire "
                "it at once, then every period)"
            )
        try:
            run_every = timedelta(seconds=every)
        except OverflowError:
            raise ValueError(f"its interval every {every!r}s is out of range") from None
        every_spec = convert.schedule_timer(
            celery_schedule(run_every=run_every, relative=bool(relative)),
            context.zone,
            last_run_at=last_run_at,
        )
        return every_spec, None
    if kind == "crontab":
        minute, hour, day_of_month, month_of_year, day_of_week = (
            schedule.get(f, "*") for f in _CRON
        )
        cron = convert.crontab_timer(
            minute, hour, day_of_month, month_of_year, day_of_week, context.zone
        )
        return cron, None
    if kind == "rrule":
        rule = _rrule(schedule)
        return convert.rrule_timer(rule), rule.dtstart
    raise ValueError(
        f"its schedule is a {kind!r} object, which has no cronstore timer: recreate it as a "
        "cronstore timer"
    )


_CRON = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
_RRULE_FIELDS = (
    "wkst", "count", "bysetpos", "bymonth", "bymonthday", "byyearday", "byeaster",
    "byweekno", "byhour", "byminute", "bysecond",
)  # fmt: skip


def _rrule(data: Mapping[str, Any]) -> convert.RRule:
    """Return RedBeat's encoded rrule (timestamps plus offsets in minutes) as fields."""
    instants: dict[str, datetime | None] = {}
    for key in ("dtstart", "until"):
        stamp, minutes = data.get(key), data.get(f"{key}_tz") or 0
        if stamp is None:
            instants[key] = None
            continue
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)):
            raise ValueError(f"its rrule {key} {stamp!r} is not a Unix timestamp")
        if isinstance(minutes, bool) or not isinstance(minutes, (int, float)):
            raise ValueError(f"its rrule {key}_tz {minutes!r} is not an offset in minutes")
        try:
            zone = timezone(timedelta(minutes=minutes)) if minutes else timezone.utc
            instants[key] = datetime.fromtimestamp(stamp, tz=zone)
        except (ValueError, OverflowError, OSError) as exc:
            raise ValueError(f"its rrule {key} {stamp!r} cannot be read: {exc}") from None
    weekday = data.get("byweekday")
    interval = data.get("interval", 1)
    return convert.RRule(
        freq=data.get("freq"),  # type: ignore[arg-type]  # checked by rrule_timer
        dtstart=instants["dtstart"],
        until=instants["until"],
        interval=1 if interval is None else interval,
        byweekday=None if weekday is None else convert.weekdays(weekday),
        **{f: data.get(f) for f in _RRULE_FIELDS},
    )


def decode(raw: bytes, part: str) -> Any:
    """Return RedBeat's JSON ``raw`` with its tagged datetimes and weekdays decoded.

    Schedules stay tagged mappings (``{"__type__": "crontab", ...}``) for the mapping
    above; ``ValueError`` names ``part`` when the text or a datetime cannot be read.
    """
    try:
        text = raw.decode("utf-8")
        return json.loads(text, object_hook=_tagged)
    except UnicodeDecodeError:
        raise ValueError(f"its {part} is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"its {part} is not JSON ({exc})") from None
    except _BadTag as exc:
        raise ValueError(f"its {part} holds {exc}") from None


class _BadTag(Exception):
    """A tagged object that cannot be decoded (json.loads would hide a ValueError's kind)."""


def _tagged(obj: dict[str, Any]) -> Any:
    kind = obj.get("__type__")
    if kind == "datetime":
        return _datetime(obj)
    if kind == "weekday":
        return {"wkday": obj.get("wkday"), "n": obj.get("n")}
    return obj


def _datetime(obj: Mapping[str, Any]) -> datetime:
    zone_value = obj.get("timezone", "UTC")
    try:
        if isinstance(zone_value, (int, float)) and not isinstance(zone_value, bool):
            zone: Any = timezone(timedelta(seconds=zone_value))
        elif isinstance(zone_value, str):
            zone = ZoneInfo(zone_value)
        else:
            raise _BadTag(f"a datetime whose timezone {zone_value!r} is not a zone")
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise _BadTag(
            f"a datetime in the zone {zone_value!r}, which is not in the tz database: save "
            "the entry again in RedBeat with an IANA zone"
        ) from None
    parts = {k: obj.get(k, 0) for k in ("hour", "minute", "second", "microsecond")}
    try:
        return datetime(obj["year"], obj["month"], obj["day"], tzinfo=zone, **parts)
    except (KeyError, TypeError, ValueError) as exc:
        raise _BadTag(f"a datetime that cannot be read ({exc!r})") from None
