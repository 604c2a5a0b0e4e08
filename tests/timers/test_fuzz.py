"""Fuzzing ``parse_timer`` over every kind and hostile time zones.

Whatever the text (random, mutated from valid seeds of each grammar, up to the 500
characters the column holds) and whatever the ``tz`` string, parsing raises
:class:`TimerSyntaxError` or returns a timer whose canonical form parses back to an equal
timer and whose ``next_after`` is ``None`` or strictly later, in UTC. Each parse plus a
few ``next_after`` calls ends within a generous bound: a hang, not slowness, fails it.
``fuzz/timers.py`` runs the same check under atheris (coverage-guided) for longer.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from celery_cronstore.errors import TimerSearchError, TimerSyntaxError
from celery_cronstore.timers import TIMER_KINDS, parse_timer

UTC = timezone.utc
#: Seconds one parse plus the next_after calls may take before it counts as a hang.
BOUND = 2.0
INSTANTS = [
    datetime(2026, 3, 29, 0, 30, tzinfo=UTC),  # Europe's spring gap is at 01:00 UTC
    datetime(2026, 10, 25, 0, 59, 59, 999999, tzinfo=UTC),  # autumn fold
    datetime(2038, 1, 19, 3, 14, 8, tzinfo=UTC),
    datetime(9998, 12, 31, 23, 0, tzinfo=UTC),  # near the end of datetime
]
SEEDS = [
    # calendar (systemd)
    "Mon..Fri *-*-* 09:30",
    "*:0/5",
    "hourly",
    "Sat,Sun 2026-*-1..7 10:00 Europe/Berlin",
    "*-02-29 12:00:00",
    "*-*~03 04:00",
    "*-*-* 00/2:00:00.250 UTC",
    "quarterly",
    "Mon *-*-1..7 03:00 America/Santiago",
    "2026-01-05 09:00:00",
    # cron
    "*/5 * * * *",
    "30 9 * * mon-fri",
    "0 0 L * *",
    "0 9 * * 1#2",
    "0 9 * * * 30",
    "@yearly",
    # interval
    "every 1h30m",
    "every 5 minutes from 2026-01-05T09:00",
    "every 2d from 2026-01-05",
    # once
    "2026-12-01T09:00:00+01:00",
    "2026-12-01T09:00:00.5Z",
]
ALPHABET = "0123456789 */-,.~:#?LWHR@abcdefhijlmnorstuwxyzMFST+Z\t\né🚀\x00"
ZONES = [
    None,
    "UTC",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Etc/GMT+14",
    "",
    " ",
    "Mars/Olympus",
    "../../../etc/passwd",
    "/etc/localtime",
    "Europe/Berlin\x00",
    "Europe/../Europe/Berlin",
    "zone.tab",
    "tzdata.zi",
    "Europe",
    "UTC+05:00",
    "x" * 300,
    "'; DROP TABLE cronstore_periodic_task; --",
]


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace", "repeat", "splice"]))
        if op == "insert":
            text = text[:at] + draw(st.sampled_from(ALPHABET)) + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + 1 :]
        elif op == "replace":
            text = text[:at] + draw(st.sampled_from(ALPHABET)) + text[at + 1 :]
        elif op == "repeat":
            chunk = draw(st.sampled_from(["9" * 40, "99999", "-", "/0", "..", ",", "~", "*/"]))
            text = text[:at] + chunk * draw(st.integers(1, 30)) + text[at:]
        else:
            text = text[:at] + draw(st.sampled_from(SEEDS)) + text[at:]
    return text[:500]


kinds = st.sampled_from([None, *TIMER_KINDS])
zones = st.one_of(st.sampled_from(ZONES), st.text(max_size=40))


def check(expression: str, kind: str | None, tz: str | None) -> None:
    """Parse; on success check the round trip and ``next_after``; bound the time taken."""
    started = time.perf_counter()
    error: TimerSyntaxError | None = None
    try:
        timer = parse_timer(expression, kind=kind, tz=tz)
    except TimerSyntaxError as exc:
        error = exc
    if error is not None:
        assert error.reason
        assert error.position is None or 0 <= error.position <= len(expression)
    else:
        assert parse_timer(str(timer), kind=timer.kind, tz=timer.tz_name) == timer
        for instant in INSTANTS:
            try:
                following = timer.next_after(instant)
            except TimerSearchError:
                continue  # the calendar search gives up where systemd does: bounded, named
            if following is not None:
                assert following > instant
                assert following.utcoffset() == timedelta(0)
        timer.describe()
    assert time.perf_counter() - started < BOUND, f"{expression!r} took too long"


FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.text(max_size=80), kinds, zones)
@example("*-*-* *:*:*", "calendar", "Europe/Berlin\x00")
@example("every 1s", "interval", "../../../etc/passwd")
@example("9" * 500, None, None)
# atheris found it: systemd-analyze gives up on it too ("Resource deadlock avoided").
@example("*-02/8-12 00:00:00", "calendar", "Europe/Berlin")
def test_random_text_raises_only_syntax_errors(
    expression: str, kind: str | None, tz: str | None
) -> None:
    check(expression, kind, tz)


@FUZZ
@given(mutated(), kinds, zones)
def test_mutated_expressions_raise_only_syntax_errors(
    expression: str, kind: str | None, tz: str | None
) -> None:
    check(expression, kind, tz)


@FUZZ
@given(st.lists(st.sampled_from(SEEDS + list(ALPHABET)), max_size=60).map("".join))
def test_long_token_soup_is_bounded(expression: str) -> None:
    check(expression[:500], None, "Europe/Berlin")
