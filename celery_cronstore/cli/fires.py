"""The commands about fires: when a timer or a task fires next (validate, next), what its
fires did (history), one extra fire now (run-now), and the fires of a past range that
never ran (backfill)."""

from __future__ import annotations

import math
import os
import socket
import sys
import time
from datetime import datetime, timezone, tzinfo
from typing import Any

import click

from celery_cronstore import actions
from celery_cronstore.cli.base import (
    BadInputError,
    Command,
    CommandError,
    emit_json,
    fmt_time,
    get_app,
    get_settings,
    get_store,
    table,
    zone_name,
)
from celery_cronstore.cli.group import cronstore
from celery_cronstore.config import Config
from celery_cronstore.errors import CronstoreError
from celery_cronstore.policy import allowed
from celery_cronstore.policy.backfill import DEFAULT_RATE, RangeError, read_instant
from celery_cronstore.records import Claim
from celery_cronstore.timers import KINDS, parse_timer
from celery_cronstore.timers import __main__ as timer_cli
from celery_cronstore.timers.base import resolve_zone
from celery_cronstore.timers.once import format_instant, parse_instant

__all__ = ["backfill", "history", "next_", "run_now", "validate"]


@cronstore.command(cls=Command)
@click.argument("expression")
@click.option("--kind", type=click.Choice(KINDS), help="Timer kind (detected if omitted).")
@click.option("--tz", help="Time zone the expression is read in (default UTC).")
@click.option("-n", "--count", type=click.IntRange(1, timer_cli.MAX_COUNT), default=5)
@click.option("--after", help="ISO-8601 instant to start from (default now).")
@click.pass_context
def validate(
    ctx: click.Context,
    expression: str,
    kind: str | None,
    tz: str | None,
    count: int,
    after: str | None,
) -> None:
    """Check a timer expression: normalized form, description, next fire times (no database)."""
    timer = parse_timer(expression, kind=kind, tz=tz)
    zone = resolve_zone(tz)
    start = (
        datetime.now(timezone.utc)
        if after is None
        else parse_instant(after.strip(), zone, date_only=True)
    )
    if not get_settings(ctx).as_json:
        argv = ["--kind", timer.kind, "-n", str(count), "--after", format_instant(start)]
        if tz is not None:
            argv += ["--tz", tz]
        sys.stdout.flush()
        status = timer_cli.main([*argv, "--", expression])
        if status:
            raise CommandError("the timer could not be evaluated")
        return
    times: list[datetime] = []
    moment: datetime | None = start
    while moment is not None and len(times) < count:
        moment = timer.next_after(moment)
        if moment is not None:
            times.append(moment)
    emit_json(
        {
            "kind": timer.kind,
            "canonical": str(timer),
            "zone": timer.tz_name,
            "description": timer.describe(),
            "after": start,
            "next": times,
        }
    )


@cronstore.command(name="next", cls=Command)
@click.argument("name")
@click.option("-n", "--count", type=click.IntRange(1, 1000), default=5, show_default=True)
@click.pass_context
def next_(ctx: click.Context, name: str, count: int) -> None:
    """Show the next fire times of a periodic task."""
    store = get_store(ctx)
    settings = get_settings(ctx)
    record = store.get(name)
    times = store.next_runs(name, count)
    if settings.as_json:
        emit_json({"name": name, "enabled": record.enabled, "next": times})
    elif not record.enabled:
        click.echo(f"{name} is disabled: no fire times")
    elif not times:
        click.echo(f"{name} fires no more")
    else:
        for instant in times:
            click.echo(fmt_time(instant, settings.zone))


@cronstore.command(cls=Command)
@click.argument("name")
@click.option("-n", "--count", type=click.IntRange(1, 10_000), default=20, show_default=True)
@click.pass_context
def history(ctx: click.Context, name: str, count: int) -> None:
    """Show the fire ledger of a periodic task, newest first."""
    settings = get_settings(ctx)
    fires = get_store(ctx).history(name, limit=count)
    if settings.as_json:
        emit_json(fires)
        return
    if not fires:
        click.echo(f"(no fires of {name} yet)")
        return
    zone = settings.zone
    rows = [
        (
            fmt_time(f.fire_time, zone),
            f.state,
            f.task_id,
            f.node or f.claimed_by or "-",
            fmt_time(f.finished_at, zone),
            f.reason or "",
        )
        for f in fires
    ]
    shown = zone_name(zone)
    headers = (f"fire time ({shown})", "state", "task id", "node", f"finished ({shown})", "reason")
    table(headers, rows)


@cronstore.command(name="run-now", cls=Command)
@click.argument("name")
@click.pass_context
def run_now(ctx: click.Context, name: str) -> None:
    """Send one extra fire of a periodic task now (recorded in its ledger)."""
    app = get_app(ctx)
    store = get_store(ctx)
    config = Config.from_app(app)
    record = store.get(name)
    if not allowed(record.task, config.task_allowlist):
        raise CommandError(f"task {record.task!r} is not in cronstore_task_allowlist")
    try:
        claim = actions.run_now(app, store, name, node=f"cli@{socket.gethostname()}:{os.getpid()}")
    except CronstoreError as exc:
        raise CommandError(str(exc)) from None
    if get_settings(ctx).as_json:
        emit_json(
            {
                "name": name,
                "task": claim.task,
                "task_id": claim.task_id,
                "fire_time": claim.fire_time,
            }
        )
    else:
        fired = fmt_time(claim.fire_time, get_settings(ctx).zone)
        click.echo(f"sent {name} ({claim.task}) as task id {claim.task_id}, fire time {fired}")


#: The most fires per second ``backfill --rate`` takes.
MAX_RATE = 1000.0


@cronstore.command(cls=Command)
@click.argument("name")
@click.option(
    "--from",
    "start",
    required=True,
    metavar="WHEN",
    help="First instant of the range (ISO-8601; without an offset it is read in the task's zone).",
)
@click.option(
    "--to",
    "end",
    required=True,
    metavar="WHEN",
    help="Last instant of the range, included (ISO-8601, or `now`); not after now.",
)
@click.option("--dry-run", is_flag=True, help="List the fire times it would claim; claim nothing.")
@click.option(
    "--rate",
    type=float,
    default=DEFAULT_RATE,
    show_default=True,
    metavar="N",
    help=f"Publish at most N fires per second (up to {MAX_RATE:g}).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (as the group's --json).")
@click.pass_context
def backfill(
    ctx: click.Context,
    name: str,
    start: str,
    end: str,
    dry_run: bool,
    rate: float,
    as_json: bool,
) -> None:
    """Claim and send the fires of a past range that never ran (none in the ledger, or
    recorded missed), each once, under its own task id."""
    if not (math.isfinite(rate) and 0 < rate <= MAX_RATE):
        raise BadInputError(
            f"--rate must be a number of fires per second above 0, at most {MAX_RATE:g}; "
            f"got {rate:g}"
        )
    app = get_app(ctx)
    store = get_store(ctx)
    settings = get_settings(ctx)
    as_json = as_json or settings.as_json
    zone = store.get(name).tz
    node = f"cli@{socket.gethostname()}:{os.getpid()}"

    def echo(claim: Claim) -> None:
        click.echo(f"sent {fmt_time(claim.fire_time, settings.zone)}  {claim.task_id}")

    try:
        report = actions.backfill(
            app,
            store,
            name,
            read_instant(start, zone, "--from"),
            None if end.strip().lower() == "now" else read_instant(end, zone, "--to"),
            node=node,
            dry_run=dry_run,
            rate=rate,
            pace=_Pacer(),
            on_sent=None if as_json else echo,
        )
    except RangeError as exc:
        raise BadInputError(str(exc)) from None
    except CronstoreError as exc:
        raise CommandError(str(exc)) from None
    if as_json:
        emit_json(report.fire_times if dry_run else _backfill_json(report))
        return
    if dry_run:
        for instant in report.fire_times:
            click.echo(fmt_time(instant, settings.zone))
    click.echo(_backfill_summary(report, settings.zone))


class _Pacer:
    """Wait until each publish's turn: ``offset`` seconds after the first one."""

    def __init__(self) -> None:
        self.first: float | None = None

    def __call__(self, offset: float) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = now - offset
        wait = self.first + offset - now
        if wait > 0:
            time.sleep(wait)


def _backfill_json(report: actions.BackfillReport) -> dict[str, Any]:
    def fires(claims: list[Claim]) -> list[dict[str, Any]]:
        return [{"fire_time": c.fire_time, "task_id": c.task_id} for c in claims]

    return {
        "name": report.name,
        "task": report.task,
        "from": report.start,
        "to": report.end,
        "count": len(report.claimed),
        "sent": fires(report.sent),
        "not_sent": fires(report.not_sent),
        "from_missed": report.from_missed,
        "already_in_ledger": report.taken,
    }


def _backfill_summary(report: actions.BackfillReport, zone: tzinfo | None) -> str:
    span = f"from {fmt_time(report.start, zone)} to {fmt_time(report.end, zone)}"
    held = f"{len(report.taken)} in the range already in the ledger"
    if not report.claimed:
        return f"nothing to backfill for {report.name} {span} ({held})"
    missed = f"{len(report.from_missed)} of them recorded missed"
    if report.dry_run:
        return (
            f"would claim {len(report.claimed)} fire(s) of {report.name} {span} ({missed}; "
            f"{held}); nothing claimed (dry run)"
        )
    text = (
        f"sent {len(report.sent)} fire(s) of {report.name} ({report.task}) {span} "
        f"({missed}; {held})"
    )
    if report.not_sent:
        text += (
            f"; {len(report.not_sent)} claimed but not sent here (the task was disabled, "
            "or a beat took them over: see its history)"
        )
    return text
