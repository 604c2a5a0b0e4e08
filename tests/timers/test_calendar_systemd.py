"""Differential test: CalendarTimer against ``systemd-analyze calendar`` (systemd 252).

Every expression is run through both, in several zones and from base times around DST
changes, month ends and leap days; normalized forms, acceptance and the next elapses
(``--iterations``) must agree. systemd prints elapses at whole seconds, so fractional
elapses are compared after truncating to the second (the Python side keeps microseconds).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from systemd_reference import (
    Tally,
    refused_as_never,
    true_expectation,
    without_second_pass,
    zone_transitions,
)
from systemd_reference import compare as compare_with_systemd

from celery_cronstore.errors import TimerSearchError, TimerSyntaxError
from celery_cronstore.timers.calendar import CalendarTimer

pytestmark = pytest.mark.systemd

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
if SYSTEMD_ANALYZE is None and os.environ.get("CI") != "true":
    pytest.skip(
        "systemd-analyze is not installed (the reference for calendar events); "
        "CI=true makes this a failure",
        allow_module_level=True,
    )

ITERATIONS = 6
ZONES = (
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "Pacific/Chatham",
    "America/Sao_Paulo",
)

# Every calendar example of systemd.time(7), plus the shorthands and the brief's cases.
MAN_EXAMPLES = (
    "Thu,Fri 2012-*-1,5 11:12:13",
    "Sat,Thu,Mon..Wed,Sat..Sun",
    "Mon,Sun 12-*-* 2,1:23",
    "Wed *-1",
    "Wed..Wed,Wed *-1",
    "Wed, 17:48",
    "Wed..Sat,Tue 12-10-15 1:2:3",
    "*-*-7 0:0:0",
    "10-15",
    "monday *-12-* 17:00",
    "Mon,Fri *-*-3,1,2 *:30:45",
    "12,14,13,12:20,10,30",
    "12..14:10,20,30",
    "mon,fri *-1/2-1,3 *:30:45",
    "03-05 08:05:40",
    "08:05:40",
    "05:40",
    "Sat,Sun 12-05 08:05:40",
    "Sat,Sun 08:05:40",
    "2003-03-05 05:40",
    "05:40:23.4200004/3.1700005",
    "2003-02..04-05",
    "2003-03-05 05:40 UTC",
    "2003-03-05",
    "03-05",
    "hourly",
    "daily",
    "daily UTC",
    "monthly",
    "weekly",
    "weekly Pacific/Auckland",
    "yearly",
    "annually",
    "*:2/3",
    "minutely",
    "quarterly",
    "semiannually",
    "semi-annually",
    "biannually",
    "*-02~03",
    "Mon *-05~07/1",
    "*-*~01",
    "*-*~01..03",
    "2020..2030/2-1-1",
    "*-*-1/15",
    "*-02-29 12:00",
    "*-02-30",
    "Mon 2026-03-03",
    "*-*-* 02:30",
    "*-*-* 02:30 Europe/Berlin",
    "*:0/20",
    "*:*:0/15",
    "*-*-* 0/5:00",
    "*-*-* *:*:1.5..3.5/0.7",
    "@1900000000",
    "@1395716396",
    "2026..2027-*-* 01:59:59",
)

INVALID = (
    "foo",
    "",
    " daily",
    "daily ",
    "*-*-* 24:00",
    "*:*:60",
    "*:*:1.5..2",
    "mon..",
    "mon,,tue",
    "wed..mon",
    "*/2:00",
    "1..3..5:00",
    "2200-1-1",
    "*-13-1",
    "*-*-32",
    "*-*~29",
    "*:0/0",
    "*:*:1.",
    "@-1",
    "today",
    "*-*~03..01",
    "now",
    "daily Mars/Phobos",
    "*-*-* 12:00 Europe/",
)


def _zone_transitions(zone_name: str, years: range) -> list[datetime]:
    """Return the UTC instants (to the minute) at which ``zone_name`` changes offset."""
    if zone_name == "UTC":
        return []
    zone = ZoneInfo(zone_name)
    found = []
    start = datetime(years.start, 1, 1, tzinfo=timezone.utc)
    end = datetime(years.stop, 1, 1, tzinfo=timezone.utc)
    step = timedelta(hours=1)
    moment = start
    previous = moment.astimezone(zone).utcoffset()
    while moment < end:
        nxt = moment + step
        offset = nxt.astimezone(zone).utcoffset()
        if offset != previous:
            low, high = moment, nxt  # bisect to the minute
            while high - low > timedelta(minutes=1):
                mid = low + (high - low) / 2
                if mid.astimezone(zone).utcoffset() == previous:
                    low = mid
                else:
                    high = mid
            found.append(high)
            previous = offset
        moment = nxt
    return found


def _base_times(zone_name: str) -> list[datetime]:
    utc = timezone.utc
    bases = [
        datetime(2026, 1, 31, 22, 59, 59, tzinfo=utc),
        datetime(2028, 2, 28, 20, 0, tzinfo=utc),
        datetime(2026, 12, 31, 21, 30, tzinfo=utc),
        datetime(2030, 6, 15, 12, 34, 56, tzinfo=utc),
    ]
    years = range(2018, 2020) if zone_name == "America/Sao_Paulo" else range(2026, 2027)
    for moment in _zone_transitions(zone_name, years):
        bases += [moment - timedelta(minutes=95), moment - timedelta(seconds=1)]
        bases.append(moment + timedelta(minutes=20))
    return bases


def _random_chain(rng: random.Random, lo: int, hi: int, width: int = 0) -> str:
    if rng.random() < 0.3:
        return "*"
    parts = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        start = rng.randint(lo, hi) if rng.random() > 0.03 else hi + 1
        kind = rng.random()
        text = str(start).zfill(width) if rng.random() < 0.5 else str(start)
        if kind < 0.45:
            parts.append(text)
        elif kind < 0.7:
            parts.append(f"{text}..{rng.randint(start, max(start, hi))}")
        elif kind < 0.85:
            parts.append(f"{text}/{rng.randint(1, max(1, (hi - lo) // 2))}")
        else:
            parts.append(f"{text}..{rng.randint(start, max(start, hi))}/{rng.randint(1, 5)}")
    return ",".join(parts)


def _random_seconds(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.5:
        return _random_chain(rng, 0, 59, 2)
    if roll < 0.75:
        return f"{rng.randint(0, 58)}.{rng.randint(0, 999999):06d}"
    return f"{rng.randint(0, 30)}.{rng.randint(0, 9)}/{rng.randint(1, 20)}.{rng.randint(0, 99)}"


def _random_weekdays(rng: random.Random) -> str:
    names = [
        ("Mon", "Monday"), ("Tue", "Tuesday"), ("Wed", "Wednesday"), ("Thu", "Thursday"),
        ("Fri", "Friday"), ("Sat", "Saturday"), ("Sun", "Sunday"),
    ]  # fmt: skip

    def name(i: int) -> str:
        text = rng.choice(names[i])
        return rng.choice((text, text.lower(), text.upper()))

    parts = []
    for _ in range(rng.randint(1, 3)):
        a = rng.randint(0, 6)
        if rng.random() < 0.4:
            b = rng.randint(a, 6)
            parts.append(f"{name(a)}{rng.choice(('..', '-'))}{name(b)}")
        else:
            parts.append(name(a))
    return ",".join(parts)


def generate_expressions(count: int, seed: int = 20260329) -> list[str]:
    """Return ``count`` deterministic random calendar expressions (some invalid)."""
    rng = random.Random(seed)
    out = []
    shorthands = ("minutely", "hourly", "daily", "weekly", "monthly", "quarterly", "yearly")
    zones = ("", "", "", "", " UTC", " Europe/Berlin", " America/New_York", " Asia/Kolkata")
    for _ in range(count):
        if rng.random() < 0.05:
            out.append(rng.choice(shorthands) + rng.choice(zones))
            continue
        pieces = []
        if rng.random() < 0.3:
            pieces.append(_random_weekdays(rng))
        roll = rng.random()
        if roll < 0.35:
            sep = "~" if rng.random() < 0.15 else "-"
            year = _random_chain(rng, 2024, 2040) if rng.random() < 0.7 else "*"
            days = _random_chain(rng, 1, 28 if sep == "~" else 31, 2)
            pieces.append(f"{year}-{_random_chain(rng, 1, 12, 2)}{sep}{days}")
        elif roll < 0.6:
            sep = "~" if rng.random() < 0.15 else "-"
            days = _random_chain(rng, 1, 28 if sep == "~" else 31, 2)
            pieces.append(f"{_random_chain(rng, 1, 12, 2)}{sep}{days}")
        roll = rng.random()
        if roll < 0.4:
            pieces.append(f"{_random_chain(rng, 0, 23, 2)}:{_random_chain(rng, 0, 59, 2)}")
        elif roll < 0.85:
            hour, minute = _random_chain(rng, 0, 23, 2), _random_chain(rng, 0, 59, 2)
            pieces.append(f"{hour}:{minute}:{_random_seconds(rng)}")
        expression = " ".join(pieces) or "*:*"
        out.append(expression + rng.choice(zones))
    return out


@dataclass
class SystemdResult:
    """What systemd said about one expression."""

    normalized: str | None = None
    elapses: list[datetime | None] = field(default_factory=list)
    parse_failed: bool = False
    search_failed: bool = False


_STAMP = re.compile(r"^\w{3} (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) UTC$")


def run_systemd(expressions: list[str], tz: str, base: datetime) -> dict[str, SystemdResult]:
    """Run ``systemd-analyze calendar`` once for many expressions; return results by text."""
    assert SYSTEMD_ANALYZE is not None
    epoch = int(base.timestamp())
    proc = subprocess.run(
        [SYSTEMD_ANALYZE, "calendar", f"--iterations={ITERATIONS}", f"--base-time=@{epoch}",
         "--", *expressions],
        env={**os.environ, "TZ": tz, "SYSTEMD_COLORS": "0", "SYSTEMD_LOG_LEVEL": "err"},
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    results = {e: SystemdResult() for e in expressions}
    for line in proc.stderr.splitlines():
        match = re.match(
            r"Failed to (parse calendar specification|determine next elapse for) '(.*)':", line
        )
        if match and match.group(2) in results:
            if match.group(1).startswith("parse"):
                results[match.group(2)].parse_failed = True
            else:
                results[match.group(2)].search_failed = True
    # One block per expression, blank-line separated; a rejected one leaves its block empty.
    blocks: list[list[str]] = [[]]
    for raw in proc.stdout.splitlines():
        if raw.strip():
            blocks[-1].append(raw.strip())
        else:
            blocks.append([])
    assert len(blocks) == len(expressions), proc.stdout[-2000:]
    for expression, block in zip(expressions, blocks, strict=True):
        current = results[expression]
        for line in block:
            key, _, value = line.partition(": ")
            if key == "Normalized form":
                current.normalized = value
            elif key == "Next elapse" and value == "never":
                current.elapses.append(None)
            elif key == "(in UTC)" or (
                tz == "UTC" and (key == "Next elapse" or key.startswith("Iter. #"))
            ):
                current.elapses.append(_stamp(value))
    return results


def _stamp(text: str) -> datetime:
    match = _STAMP.match(text)
    assert match, f"unexpected systemd timestamp {text!r}"
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)


def _ours(
    expression: str, tz: str, base: datetime
) -> tuple[str | None, list[datetime | None], bool]:
    """Return (normalized or None if rejected, elapses (exact), search failed)."""
    try:
        timer = CalendarTimer.parse(expression, tz=tz)
    except TimerSyntaxError:
        return None, [], False
    elapses: list[datetime | None] = []
    moment = base
    try:
        for _ in range(ITERATIONS):
            found = timer.next_after(moment)
            elapses.append(found)
            if found is None:
                break
            moment = found
    except TimerSearchError:
        return str(timer), elapses, True
    return str(timer), elapses, False


def compare(expressions: list[str], tz: str, base: datetime) -> tuple[int, list[str]]:
    """Return (number of elapses compared, mismatch descriptions)."""
    compared = 0
    problems = []
    for expression, theirs in run_systemd(expressions, tz, base).items():
        normalized, exact, failed = _ours(expression, tz, base)
        elapses = [None if e is None else e.replace(microsecond=0) for e in exact]
        where = f"{expression!r} TZ={tz} base={base.isoformat()}"
        if theirs.parse_failed or (theirs.normalized is None and not theirs.search_failed):
            if normalized is not None:
                problems.append(f"{where}: systemd rejects, we accept as {normalized!r}")
            continue
        if normalized is None:
            if theirs.elapses[:1] != [None] or not refused_as_never(expression, tz):
                problems.append(f"{where}: systemd accepts, we reject")
            continue
        if theirs.search_failed:
            # systemd gives up after 1000 steps on impossible dates (we say "never") and
            # where its walk loops around a DST gap. There we return the true next fire
            # (celery_cronstore.timers.calendar.scan); it must still move forward.
            found = [e for e in elapses if e is not None]
            if found and (found != sorted(set(found)) or found[0] < base.replace(microsecond=0)):
                problems.append(f"{where}: systemd gives up, ours go backwards: {elapses}")
            DIVERGENCES.append(where)
            continue
        if normalized != theirs.normalized:
            problems.append(f"{where}: normalized {normalized!r} != systemd {theirs.normalized!r}")
        if failed:
            problems.append(f"{where}: we gave up, systemd found {theirs.elapses}")
            continue
        expected, _ = true_expectation(
            without_second_pass(theirs.elapses, expression, tz, base),
            False,
            exact,
            expression,
            tz,
            base,
            ITERATIONS,
        )
        if expected and expected[-1] is None:
            expected = expected[:1] if len(expected) == 1 else expected
        if elapses[: len(expected)] != expected:
            problems.append(f"{where}: elapses {elapses} != systemd {expected}")
        compared += len(expected)
    return compared, problems


DIVERGENCES: list[str] = []
EXPRESSIONS = list(dict.fromkeys(MAN_EXAMPLES + INVALID + tuple(generate_expressions(300))))


@pytest.mark.parametrize("tz", ZONES)
def test_matches_systemd(tz: str) -> None:
    total = 0
    problems: list[str] = []
    for base in _base_times(tz):
        compared, found = compare(EXPRESSIONS, tz, base)
        total += compared
        problems += found
    print(
        f"{tz}: {len(EXPRESSIONS)} expressions, {total} elapses compared, "
        f"{len(DIVERGENCES)} systemd give-ups so far"
    )
    assert not problems, f"{len(problems)} mismatches:\n" + "\n".join(problems[:25])


# Issue 13: zones with negative DST, gaps that are not a whole hour, midnight gaps, and
# every-N-hours / every-N-months steps across each 2026 transition. A bounded sample
# (a few seconds); benchmarks/calendar_differential.py runs 2026-2028 in full.
ISSUE_13_ZONES = (
    "Europe/Dublin",
    "Africa/Casablanca",
    "Pacific/Chatham",
    "Australia/Lord_Howe",
    "Europe/London",
    "America/New_York",
    "America/Santiago",
    "Europe/Kyiv",
)
_STEPS = tuple(
    [f"*-*-* {s}/{n}:00" for n in (2, 3, 5, 7, 12) for s in range(min(n, 3))]
    + [f"*-{s}/{n}-01" for n in (2, 5) for s in (1, 2)]
    + ["hourly", "daily", "*:20/30", "*:5/50", "*:7/49", "*-*-* 00:30", "*-*-* 0..3:0/20"]
)


@pytest.mark.parametrize("tz", ISSUE_13_ZONES)
def test_matches_systemd_across_transitions(tz: str) -> None:
    tally = Tally()
    for moment in zone_transitions(tz, range(2026, 2027)):
        for base in (moment - timedelta(hours=3), moment - timedelta(seconds=1)):
            tally.add(compare_with_systemd(list(_STEPS), tz, base))
    problems = tally.disagreements + tally.gave_up_problems
    assert tally.elapses > 0
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:25])
