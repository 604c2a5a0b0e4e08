"""Coverage-guided fuzzing of ``parse_timer`` with atheris.

    pip install atheris          # or: pip install -e '.[test]' (Linux, CPython 3.11)
    python fuzz/timers.py -max_total_time=300 -timeout=5 [corpus_dir]

Each input is split into a kind selector, a zone and an expression. The target parses it;
anything but a timer or :class:`TimerSyntaxError` is a finding, and so is a timer whose
canonical form does not parse back to an equal timer or whose ``next_after`` is not
strictly later (or ``None``; :class:`TimerSearchError` is allowed: the calendar search
gives up where systemd does). ``-timeout`` turns a hang into a finding too. The same check
runs under Hypothesis in ``tests/timers/test_fuzz.py``.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone

import atheris

with atheris.instrument_imports():
    from celery_cronstore.errors import TimerSearchError, TimerSyntaxError
    from celery_cronstore.timers import KINDS, parse_timer

_KINDS = (None, *KINDS)
_ZONES = (None, "UTC", "Europe/Berlin", "Australia/Lord_Howe", "America/Santiago")
_INSTANTS = (
    datetime(2026, 3, 29, 0, 30, tzinfo=timezone.utc),
    datetime(2026, 10, 25, 0, 59, 59, tzinfo=timezone.utc),
    datetime(9998, 12, 31, 23, 0, tzinfo=timezone.utc),
)


def test_one_input(data: bytes) -> None:
    """Parse one fuzzer input; raise on anything the timer contract does not allow."""
    fdp = atheris.FuzzedDataProvider(data)
    kind = _KINDS[fdp.ConsumeIntInRange(0, len(_KINDS) - 1)]
    if fdp.ConsumeBool():
        tz = _ZONES[fdp.ConsumeIntInRange(0, len(_ZONES) - 1)]
    else:
        tz = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 40))
    expression = fdp.ConsumeUnicodeNoSurrogates(500)
    try:
        timer = parse_timer(expression, kind=kind, tz=tz)
    except TimerSyntaxError:
        return
    again = parse_timer(str(timer), kind=timer.kind, tz=timer.tz_name)
    if again != timer:
        raise AssertionError(f"{expression!r} -> {str(timer)!r} parses back to {str(again)!r}")
    for instant in _INSTANTS:
        try:
            following = timer.next_after(instant)
        except TimerSearchError:
            # The calendar search gives up where systemd does (e.g. "*-02/8-12" in
            # Europe/Berlin from inside the autumn fold): a named, bounded error.
            continue
        if following is not None and not following > instant:
            raise AssertionError(f"{expression!r}: next_after({instant}) = {following}")


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
