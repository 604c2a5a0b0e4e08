"""Run ``systemd-analyze calendar`` (systemd 252) and compare its elapses with ours.

Shared by the differential test (``test_calendar_systemd.py``) and the large local run
(``benchmarks/calendar_differential.py``). Not collected by pytest (no ``test_`` prefix).

systemd prints every elapse at whole seconds, so ours are truncated before comparing.
When systemd gives up on an iteration ("Infinite loop in calendar calculation") it prints
nothing at all for the expression; :func:`run_systemd` then asks again with fewer
iterations, so the elapses before the one it gives up on are still compared.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from calendar_oracle import brute_next

from celery_cronstore.errors import TimerError, TimerSyntaxError
from celery_cronstore.timers.calendar import CalendarTimer

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
_STAMP = re.compile(r"^\w{3} (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) UTC$")
_FAILED = re.compile(r"Failed to (parse calendar specification|determine next elapse for) '(.*)':")


@dataclass
class SystemdResult:
    """What systemd said about one expression from one base time."""

    normalized: str | None = None
    elapses: list[datetime | None] = field(default_factory=list)
    parse_failed: bool = False
    # systemd gave up on elapse number len(elapses) + 1 (EDEADLK).
    search_failed: bool = False


def _stamp(text: str) -> datetime:
    match = _STAMP.match(text)
    if match is None:
        raise AssertionError(f"unexpected systemd timestamp {text!r}")
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)


def _run(
    expressions: list[str], tz: str, base: datetime, iterations: int
) -> dict[str, SystemdResult]:
    if SYSTEMD_ANALYZE is None:
        raise RuntimeError("systemd-analyze is not installed")
    epoch = int(base.timestamp())
    proc = subprocess.run(
        [SYSTEMD_ANALYZE, "calendar", f"--iterations={iterations}", f"--base-time=@{epoch}",
         "--", *expressions],
        env={**os.environ, "TZ": tz, "SYSTEMD_COLORS": "0", "SYSTEMD_LOG_LEVEL": "err"},
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    results = {e: SystemdResult() for e in expressions}
    for line in proc.stderr.splitlines():
        match = _FAILED.match(line)
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
    if len(blocks) != len(expressions):
        raise AssertionError(proc.stdout[-2000:] + proc.stderr[-2000:])
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


def run_systemd(
    expressions: list[str], tz: str, base: datetime, iterations: int
) -> dict[str, SystemdResult]:
    """Run ``systemd-analyze calendar`` for many expressions; return results by text."""
    results = _run(expressions, tz, base, iterations)
    gave_up = [e for e, r in results.items() if r.search_failed]
    # systemd-analyze prints nothing when any iteration fails: find the answered prefix.
    for count in range(iterations - 1, 0, -1):
        if not gave_up:
            break
        again = _run(gave_up, tz, base, count)
        for expression in list(gave_up):
            if not again[expression].search_failed:
                results[expression].normalized = again[expression].normalized
                results[expression].elapses = again[expression].elapses
                gave_up.remove(expression)
    for expression in gave_up:
        # Even the first elapse fails; the normalized form comes from ``--iterations=0``-like
        # output systemd never prints, so leave it unset.
        results[expression].elapses = []
    return results


@dataclass
class Ours:
    """What CalendarTimer says: normalized form (None if rejected) and elapses."""

    normalized: str | None
    elapses: list[datetime | None]
    error: str | None = None


def ours(expression: str, tz: str, base: datetime, iterations: int) -> Ours:
    """Return our normalized form and up to ``iterations`` elapses (full precision)."""
    try:
        timer = CalendarTimer.parse(expression, tz=tz)
    except TimerSyntaxError:
        return Ours(None, [])
    elapses: list[datetime | None] = []
    moment = base
    try:
        for _ in range(iterations):
            found = timer.next_after(moment)
            elapses.append(found)
            if found is None:
                break
            moment = found
    except TimerError as exc:
        return Ours(str(timer), elapses, f"{type(exc).__name__}: {exc}")
    return Ours(str(timer), elapses)


def refused_as_never(expression: str, tz: str) -> bool:
    """Return whether we refuse ``expression`` as a date that never exists (``*-02-30``).

    A deliberate deviation (issue 25, docs/timers.md): systemd accepts such an event and
    answers "never"; we refuse it at parse time with the reason.
    """
    try:
        CalendarTimer.parse(expression, tz=tz)
    except TimerSyntaxError as exc:
        return "so the timer would never fire" in exc.reason
    return False


def _second_pass(moment: datetime, zone: ZoneInfo) -> bool:
    local = moment.astimezone(zone)
    return local.fold == 1 and local.utcoffset() != local.replace(fold=0).utcoffset()


def without_second_pass(
    elapses: list[datetime | None], expression: str, tz: str, base: datetime
) -> list[datetime | None]:
    """Return systemd's ``elapses`` of ``expression`` as we fire them from ``base``.

    A deliberate deviation (issue 25, docs/timers.md): from a base inside the second pass
    of an autumn fold in the timer's zone (the expression's own, else ``tz``), systemd
    fires the second occurrences of the wall times left in the repeated hour; they fired
    in the first pass, so we skip them.
    """
    name = CalendarTimer.parse(expression, tz=tz).tz_name
    if name == "UTC":
        return elapses
    zone = ZoneInfo(name)
    if not _second_pass(base, zone):
        return elapses
    at = 0
    while at < len(elapses) and (e := elapses[at]) is not None and _second_pass(e, zone):
        at += 1
    return elapses[at:]


def true_expectation(
    expected: list[datetime | None],
    search_failed: bool,
    mine: list[datetime | None],
    expression: str,
    tz: str,
    base: datetime,
    iterations: int,
) -> tuple[list[datetime | None], bool]:
    """Return systemd's ``expected`` elapses with each one that skips a real fire replaced.

    A deliberate deviation (issue 25, docs/timers.md): where systemd's answer is later
    than ours, the expectation becomes the first fire after the previous one found by
    :func:`calendar_oracle.brute_next` (every minute or second, with ``zoneinfo``) if
    that is earlier than systemd's; systemd is then asked again from there for the
    rest. Elsewhere systemd's answer stays the expectation. ``mine`` are our elapses.
    Returns (expected, whether systemd gave up after them).
    """
    timer = CalendarTimer.parse(expression, tz=tz)
    out: list[datetime | None] = []
    previous = base
    while expected and len(out) < iterations:
        theirs = expected[0]
        ours_ = _second(mine[len(out)]) if len(out) < len(mine) else None
        if theirs is not None and ours_ is not None and ours_ < theirs:
            true = brute_next(timer, previous, theirs - previous)
            if true is not None and true < theirs:
                out.append(_second(true))
                previous, expected, search_failed = true, [], False
                if len(out) < iterations:
                    # systemd starts at whole seconds: from a fraction, it answers ``true``.
                    extra = int(true.microsecond > 0)
                    count = iterations - len(out) + extra
                    again = run_systemd([expression], tz, true, count)[expression]
                    expected = without_second_pass(again.elapses, expression, tz, true)
                    expected = expected[extra:] if expected[:1] == [_second(true)] else expected
                    search_failed = again.search_failed
                continue
        exact = mine[len(out)] if ours_ == theirs else None  # ours keeps the fraction
        out.append(theirs)
        expected = expected[1:]
        if theirs is None:
            break
        previous = theirs if exact is None else exact
    return out, search_failed


@dataclass
class Tally:
    """Counts of one differential run."""

    cases: int = 0  # (expression, zone, base) triples run
    elapses: int = 0  # elapses compared with an answer of systemd's
    disagreements: list[str] = field(default_factory=list)
    gave_up: int = 0  # cases where systemd gives up on some elapse
    gave_up_we_answer: int = 0  # ... and we give a later, strictly increasing answer
    gave_up_problems: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.cases += other.cases
        self.elapses += other.elapses
        self.disagreements += other.disagreements
        self.gave_up += other.gave_up
        self.gave_up_we_answer += other.gave_up_we_answer
        self.gave_up_problems += other.gave_up_problems


def _second(moment: datetime | None) -> datetime | None:
    return None if moment is None else moment.replace(microsecond=0)


def _keeps_fraction(mine: str, theirs: str) -> bool:
    # Deliberate: "0/1" with a fractional second ("*:*:0/1,59.5") stays a list in ours;
    # systemd prints "*", which no longer fires at :59.5 when parsed again.
    return theirs.endswith(":*") and "00/1," in mine and "." in mine.rsplit(":", 1)[-1]


def compare(expressions: list[str], tz: str, base: datetime, iterations: int = 6) -> Tally:
    """Run ``expressions`` through systemd and us from ``base`` in ``tz``; tally."""
    tally = Tally()
    for expression, theirs in run_systemd(expressions, tz, base, iterations).items():
        tally.cases += 1
        mine = ours(expression, tz, base, iterations)
        where = f"{expression!r} TZ={tz} base={base.isoformat()}"
        if theirs.parse_failed or (theirs.normalized is None and not theirs.search_failed):
            if mine.normalized is not None:
                tally.disagreements.append(f"{where}: systemd rejects, we accept")
            continue
        if mine.normalized is None:
            if theirs.elapses[:1] != [None] or not refused_as_never(expression, tz):
                tally.disagreements.append(f"{where}: systemd accepts, we reject")
            continue
        if (
            theirs.normalized is not None
            and mine.normalized != theirs.normalized
            and not _keeps_fraction(mine.normalized, theirs.normalized)
        ):
            tally.disagreements.append(
                f"{where}: normalized {mine.normalized!r} != systemd {theirs.normalized!r}"
            )
        expected, search_failed = true_expectation(
            without_second_pass(theirs.elapses, expression, tz, base),
            theirs.search_failed,
            mine.elapses,
            expression,
            tz,
            base,
            iterations,
        )
        got = [_second(e) for e in mine.elapses]
        if got[: len(expected)] != expected:
            tally.disagreements.append(f"{where}: elapses {got} != systemd {expected}")
            continue
        tally.elapses += len(expected)
        if not search_failed:
            if mine.error is not None:
                tally.disagreements.append(f"{where}: {mine.error}")
            continue
        tally.gave_up += 1
        # systemd has no answer for elapse len(expected) + 1: ours must exist and move on.
        previous = base if not expected else expected[-1]
        answer = mine.elapses[len(expected)] if len(mine.elapses) > len(expected) else None
        if mine.error is not None or answer is None or answer <= previous:
            tally.gave_up_problems.append(f"{where}: systemd gives up, we say {mine}")
        else:
            tally.gave_up_we_answer += 1
    return tally


def zone_transitions(zone_name: str, years: range) -> list[datetime]:
    """Return the UTC instants (to the second) at which ``zone_name`` changes offset."""
    if zone_name == "UTC":
        return []
    zone = ZoneInfo(zone_name)
    found = []
    moment = datetime(years.start, 1, 1, tzinfo=timezone.utc)
    end = datetime(years.stop, 1, 1, tzinfo=timezone.utc)
    step = timedelta(hours=1)
    previous = moment.astimezone(zone).utcoffset()
    while moment < end:
        nxt = moment + step
        offset = nxt.astimezone(zone).utcoffset()
        if offset != previous:
            low, high = moment, nxt
            while high - low > timedelta(seconds=1):
                mid = low + (high - low) / 2
                if mid.astimezone(zone).utcoffset() == previous:
                    low = mid
                else:
                    high = mid
            found.append(high)
            previous = offset
        moment = nxt
    return found
