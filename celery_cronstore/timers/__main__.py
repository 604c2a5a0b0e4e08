"""Try a timer expression: ``python -m celery_cronstore.timers 'EXPR'``.

Print the detected kind, the canonical form, the description and the next fire
times, each in the timer's zone and in UTC::

    $ cronstore-timer '30 9 * * mon-fri' --tz Europe/Berlin -n 2 --after 2026-03-27T12:00Z
    kind:        cron
    canonical:   30 9 * * mon-fri
    zone:        Europe/Berlin
    description: at 09:30 on Monday-Friday (Europe/Berlin)
    next 2 fire times after 2026-03-27T12:00:00Z:
      2026-03-30 09:30:00 CEST +0200    2026-03-30T07:30:00Z
      2026-03-31 09:30:00 CEST +0200    2026-03-31T07:30:00Z

Bad input prints one line on stderr and exits with status 2. This is the only
module of ``celery_cronstore.timers`` that reads the clock (``--after`` defaults to now).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import NoReturn

from celery_cronstore.errors import TimerError, TimerSyntaxError
from celery_cronstore.timers import TIMER_KINDS, TIMERS, parse_timer
from celery_cronstore.timers.base import resolve_zone
from celery_cronstore.timers.once import format_instant, parse_instant

__all__ = ["main"]

MAX_COUNT = 1000


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, not argparse's usage block: the message says what is wrong.
        self.exit(2, f"{self.prog}: error: {message}\n")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="cronstore-timer",
        description="Show what a celery-cronstore timer expression means and when it fires.",
    )
    examples = ", ".join(f"{kind.name} ({kind.example!r})" for kind in TIMERS.values())
    parser.add_argument("expression", help=f"the expression, of any kind: {examples}")
    parser.add_argument("--kind", choices=TIMER_KINDS, help="timer kind (detected when omitted)")
    parser.add_argument("--tz", help="time zone the expression is read in (default UTC)")
    parser.add_argument(
        "-n", "--count", type=int, default=5, help="how many fire times to show (default 5)"
    )
    parser.add_argument(
        "--after", help="ISO-8601 instant to start from (default now; naive means --tz)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if not 1 <= args.count <= MAX_COUNT:
        parser.error(f"-n must be between 1 and {MAX_COUNT}, got {args.count}")
    try:
        timer = parse_timer(args.expression, kind=args.kind, tz=args.tz)
        zone = resolve_zone(args.tz)
        if args.after is None:
            after = datetime.now(timezone.utc)
        else:
            after = parse_instant(args.after.strip(), zone, date_only=True)
    except TimerSyntaxError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2

    # Show local times in the timer's own zone: a calendar expression may name one
    # ("daily Europe/Dublin") that wins over --tz.
    shown_zone = resolve_zone(timer.tz_name)
    out = sys.stdout
    print(f"kind:        {timer.kind}", file=out)
    print(f"canonical:   {timer}", file=out)
    print(f"zone:        {timer.tz_name}", file=out)
    print(f"description: {timer.describe()}", file=out)
    print(f"next {args.count} fire times after {format_instant(after)}:", file=out)
    moment = after
    try:
        for _ in range(args.count):
            fire = timer.next_after(moment)
            if fire is None:
                print("  (no further fire times)", file=out)
                break
            local = fire.astimezone(shown_zone)
            shown = local.strftime("%Y-%m-%d %H:%M:%S %Z %z")
            print(f"  {shown:<34}{format_instant(fire)}", file=out)
            moment = fire
    except TimerError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
