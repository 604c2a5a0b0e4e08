"""When a task's alert episode opens and resolves, and how ``alert_after`` reads. Pure.

An *episode* is one stretch of trouble of one task, of one kind:

- ``failing``: the task's fires ended badly (:data:`BAD_ENDS`: failed, timed out,
  abandoned, lost, dropped, expired, missed) ``cronstore_alert_failures`` times in a row
  (default 3). "In a row" means after its newest success, counted in fires (a ``missed``
  row standing for 40 grid points counts 40). With 1, the first bad end opens one.
  A success resolves it. Skipped fires (overlap ``skip``) and fires still in flight
  count neither way.
- ``silent``: the dead man's switch. ``alert_after`` (the task's own, else
  ``cronstore_alert_after``; neither: no switch) is either ``N periods`` or a duration
  (``6h``, ``1h30m``, ``2d``). With ``N periods`` the task is silent once N fires in a
  row have each had a whole period to succeed and none did: the (N+1)-th fire of its
  timer after the newest success's fire time is due. A duration counts from that fire
  time. An edit of the task (``updated_at``) starts the switch afresh, so enabling a task
  that was off for a week does not alert at once. A timer with no next fire (a past
  one-off) is never silent. A success (or an edit) resolves it.

A disabled task opens nothing, and its open episodes resolve: someone switched it off.
One episode per task and kind is open at a time (the store's unique ``open_key``), so a
task alerts once per episode however many beats evaluate it, and once more when it is
resolved. Nothing here reads the clock: ``now`` is passed in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from celery_cronstore.states import FireState
from celery_cronstore.timers import Timer
from celery_cronstore.timers.once import format_instant

__all__ = [
    "BAD_ENDS",
    "COUNT_LIMIT",
    "FAILING",
    "KINDS",
    "MAX_PERIODS",
    "OPEN",
    "REASON_CHARS",
    "RESOLVE",
    "SILENT",
    "UPDATE",
    "AlertAfter",
    "AlertSettings",
    "BadEnd",
    "Change",
    "Episode",
    "TaskFacts",
    "by_kind",
    "check_alert_settings",
    "evaluate",
    "every_task_watched",
    "parse_alert_after",
    "retry_delay",
]

#: The ends of a fire that count toward a ``failing`` episode.
BAD_ENDS = (
    FireState.FAILED,
    FireState.TIMED_OUT,
    FireState.ABANDONED,
    FireState.LOST,
    FireState.DROPPED,
    FireState.EXPIRED,
    FireState.MISSED,
)

FAILING = "failing"
SILENT = "silent"
KINDS = (FAILING, SILENT)

OPEN = "open"
UPDATE = "update"
RESOLVE = "resolve"

#: Most periods ``alert_after`` may name (a switch further off than that is no switch).
MAX_PERIODS = 1000
#: Longest duration ``alert_after`` may name.
MAX_DURATION = timedelta(days=366)
#: A silent episode's count (fires due since the newest success) is counted up to this:
#: a calendar timer is walked fire by fire, and that walk must stay short every pass.
COUNT_LIMIT = 100
#: Longest reason an episode keeps (a failure's reason may be a long exception text).
REASON_CHARS = 2000
#: First wait before a failed delivery is tried again, and the longest (seconds).
RETRY_FIRST = 10.0
RETRY_MAX = 3600.0

_HOW = "give a number of periods ('3 periods') or a duration ('6h', '1h30m', '2d')"
_PERIODS = re.compile(r"(\d+)\s*(periods?)", re.IGNORECASE | re.ASCII)
_PART = re.compile(r"(\d+)\s*([a-z]+)", re.IGNORECASE | re.ASCII)
_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
_WORDS = {
    **{u: u for u in _UNITS},
    **{w: w[0] for w in ("week", "day", "hour", "minute", "second")},
    **{w + "s": w[0] for w in ("week", "day", "hour", "minute", "second")},
    "min": "m",
    "mins": "m",
    "sec": "s",
    "secs": "s",
}


@dataclass(frozen=True)
class AlertAfter:
    """A parsed ``alert_after``: ``periods`` of the task's timer, or ``seconds``."""

    text: str
    periods: int | None = None
    seconds: float | None = None

    def __str__(self) -> str:
        return self.text


def parse_alert_after(text: str) -> AlertAfter:
    """Return what ``text`` (``"3 periods"``, ``"6h"``, ``"1h 30m"``) means.

    Raise ``ValueError`` naming the bad token and what to give instead.
    """
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"alert_after is empty: {_HOW}")
    whole = _PERIODS.fullmatch(stripped)
    if whole is not None:
        periods = int(whole[1])
        if not 1 <= periods <= MAX_PERIODS:
            raise ValueError(
                f"alert_after {stripped!r}: the number of periods must be 1..{MAX_PERIODS}"
            )
        return AlertAfter(f"{periods} period{'s' if periods > 1 else ''}", periods=periods)
    seen: dict[str, int] = {}
    at = 0
    while at < len(stripped):
        part = _PART.match(stripped, at)
        if part is None:
            token = stripped[at:].split()[0]
            raise ValueError(f"alert_after {stripped!r}: cannot read {token!r}: {_HOW}")
        unit = _WORDS.get(part[2].lower())
        if unit is None:
            hint = " (periods take a number alone: '3 periods')" if "period" in part[2] else ""
            raise ValueError(
                f"alert_after {stripped!r}: unknown unit {part[2]!r} in {part[0]!r}{hint}: "
                f"use w, d, h, m or s, or {_HOW}"
            )
        if unit in seen:
            raise ValueError(f"alert_after {stripped!r}: the unit {unit!r} is given twice")
        seen[unit] = int(part[1])
        at = part.end()
        while at < len(stripped) and stripped[at].isspace():
            at += 1
    seconds = sum(n * _UNITS[u] for u, n in seen.items())
    if seconds <= 0:
        raise ValueError(f"alert_after {stripped!r} is no time at all: {_HOW}")
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(f"alert_after {stripped!r} is longer than 366 days: shorten it")
    canonical = "".join(f"{seen[u]}{u}" for u in _UNITS if seen.get(u))
    return AlertAfter(canonical, seconds=float(seconds))


@dataclass(frozen=True)
class AlertSettings:
    """The settings the rules read: ``cronstore_alert_failures``, ``cronstore_alert_after``."""

    failures: int = 3
    after: str | None = None


@dataclass(frozen=True)
class BadEnd:
    """The newest fire of a task that ended badly."""

    state: str
    fire_time: datetime
    reason: str | None = None


@dataclass(frozen=True)
class TaskFacts:
    """What the rules know of one task (the store reads it for every task at once)."""

    id: int
    name: str
    enabled: bool
    #: Its timer (``None``: unreadable, or not needed).
    timer: Timer | None
    #: Its own ``alert_after`` (``None``: the default).
    alert_after: str | None
    #: When it was last added or edited (an edit starts the dead man's switch afresh).
    changed_at: datetime
    #: The fire time of its newest success.
    last_success: datetime | None
    #: Fires that ended badly after the newest success (a missed range counts its fires).
    bad_run: int = 0
    newest_bad: BadEnd | None = None


@dataclass(frozen=True)
class Episode:
    """One alert episode of a task, with its delivery state (a ``cronstore_alert`` row)."""

    id: int
    periodic_task_id: int
    name: str
    kind: str
    opened_at: datetime
    resolved_at: datetime | None
    reason: str | None
    count: int
    sent_at: datetime | None
    resolve_sent_at: datetime | None
    attempts: int
    next_attempt_at: datetime | None
    last_error: str | None

    @property
    def is_open(self) -> bool:
        """Whether the trouble goes on."""
        return self.resolved_at is None

    @property
    def pending(self) -> str | None:
        """Return the delivery owed next: ``open``, ``resolve`` or ``None``.

        The open goes first, even for an episode resolved before it could be sent, so a
        receiver never gets a resolve for an episode it was never told about.
        """
        if self.sent_at is None:
            return OPEN
        if self.resolved_at is not None and self.resolve_sent_at is None:
            return RESOLVE
        return None


@dataclass(frozen=True)
class Change:
    """What becomes of one episode: ``open`` it, ``update`` its count and reason, or
    ``resolve`` it."""

    action: str
    kind: str
    reason: str | None = None
    count: int = 0


def evaluate(
    facts: TaskFacts,
    episodes: Mapping[str, Episode],
    settings: AlertSettings,
    now: datetime,
) -> list[Change]:
    """Return what becomes of the task's episodes at ``now`` (``episodes``: its open
    ones, by kind). A healthy task without open episodes gets ``[]``."""
    if not facts.enabled:
        return [Change(RESOLVE, kind) for kind in sorted(episodes)]
    changes: list[Change] = []
    failing = episodes.get(FAILING)
    if failing is not None or facts.bad_run >= settings.failures:
        changes += _track(failing, FAILING, facts.bad_run, _bad_reason(facts))
    silent = _silence(facts, settings, now)
    episode = episodes.get(SILENT)
    if episode is not None or silent is not None:
        count, reason = silent if silent is not None else (0, None)
        changes += _track(episode, SILENT, count, reason)
    return changes


def every_task_watched(settings: AlertSettings) -> bool:
    """Whether every enabled task must be judged on each pass: a default dead man's switch
    is set. Otherwise :func:`evaluate` returns nothing for an enabled task without an open
    episode, a bad end or an ``alert_after`` of its own, and the store need not read it."""
    return bool(settings.after)


def _track(episode: Episode | None, kind: str, count: int, reason: str | None) -> list[Change]:
    """Open, update or resolve one kind: ``count`` 0 means the trouble is over."""
    if episode is None:
        return [Change(OPEN, kind, reason, count)] if count else []
    if not count:
        return [Change(RESOLVE, kind)]
    if (episode.count, episode.reason) != (count, reason):
        return [Change(UPDATE, kind, reason, count)]
    return []


def _bad_reason(facts: TaskFacts) -> str | None:
    bad = facts.newest_bad
    if bad is None:
        return None
    head = f"{bad.state} (fire of {format_instant(bad.fire_time)})"
    text = f"{head}: {bad.reason}" if bad.reason else head
    return _bounded(f"{facts.bad_run} bad end(s) in a row; newest {text}")


def _silence(facts: TaskFacts, settings: AlertSettings, now: datetime) -> tuple[int, str] | None:
    """Return ``(fires due since, reason)`` if the task is silent at ``now``, else None."""
    text = facts.alert_after or settings.after
    if not text:
        return None
    try:
        switch = parse_alert_after(text)
    except ValueError:  # written by raw SQL: the field refuses it everywhere else
        return None
    since = facts.changed_at
    if facts.last_success is not None and facts.last_success > since:
        since = facts.last_success
    due = _fires_between(facts.timer, since, now)
    if switch.periods is not None:
        if facts.timer is None or due <= switch.periods:
            return None
    elif switch.seconds is None or (now - since).total_seconds() < switch.seconds:
        return None
    if facts.last_success is None or facts.last_success < since:
        start = f"since it was added or edited at {format_instant(since)}"
    else:
        start = f"since the fire of {format_instant(since)}"
    shown = f"{due}+" if due >= COUNT_LIMIT else str(due)
    return max(due, 1), _bounded(
        f"no success {start} ({shown} fire(s) due since; alert_after {switch})"
    )


def _fires_between(timer: Timer | None, after: datetime, until: datetime) -> int:
    if timer is None or until <= after:
        return 0
    count = timer.count_between(after, until, limit=COUNT_LIMIT)
    return COUNT_LIMIT if count is None else min(count, COUNT_LIMIT)


def _bounded(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def retry_delay(attempts: int) -> float:
    """Return the seconds before a delivery that failed ``attempts`` times is tried again:
    doubling from :data:`RETRY_FIRST` up to :data:`RETRY_MAX` (never given up on)."""
    exponent = min(max(attempts - 1, 0), 20)
    return float(min(RETRY_FIRST * 2**exponent, RETRY_MAX))


def by_kind(episodes: Sequence[Episode]) -> dict[int, dict[str, Episode]]:
    """Return open ``episodes`` by task id, then kind."""
    out: dict[int, dict[str, Episode]] = {}
    for episode in episodes:
        out.setdefault(episode.periodic_task_id, {})[episode.kind] = episode
    return out


def check_alert_settings(values: dict[str, Any]) -> None:
    """Refuse an alert setting beat could not use, naming it (at start, not at the first
    alert)."""
    after = values.get("alert_after")
    if after is not None:
        try:
            parse_alert_after(after)
        except ValueError as exc:
            raise ValueError(f"cronstore_{exc}") from None
    hook = values.get("alert_webhook", "")
    if hook and not hook.lower().startswith(("http://", "https://")):
        raise ValueError(
            "cronstore_alert_webhook must be an http:// or https:// URL, got "
            f"{hook.split(':', 1)[0]!r} (a URL's scheme)"
        )
    for name, url in values.get("alert_pings", {}).items():
        if not isinstance(name, str) or not name:
            raise ValueError(
                "cronstore_alert_pings: each key must be a task name or a shell-style pattern"
                f' such as "billing-*", got {name!r}'
            )
        _check_ping(name, url)


def _check_ping(name: str, url: Any) -> None:
    """Refuse a ping URL that is not ``http(s)://host...``, naming the entry but not the
    URL (its path is its secret)."""
    if not isinstance(url, str):
        problem = f"got a value of type {type(url).__name__}"
    elif "://" not in url:
        problem = "got no scheme (write https://...)"
    elif not url.lower().startswith(("http://", "https://")):
        problem = f"got scheme {url.split('://', 1)[0]!r}"
    elif not urlsplit(url).netloc.rpartition("@")[2]:
        problem = "got no host"
    else:
        return
    raise ValueError(
        f"cronstore_alert_pings[{name!r}] must be an http:// or https:// URL: {problem}"
    )
