"""The commands about fires: when a timer or a task fires next (validate, next), what its
fires did (history), and one extra fire now (run-now)."""

from __future__ import annotations

import os
import socket
import sys
from datetime import datetime, timezone

import click

from celery_cronstore import actions
from celery_cronstore.cli.base import (
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
from celery_cronstore.timers import KINDS, parse_timer
from celery_cronstore.timers import __main__ as timer_cli
from celery_cronstore.timers.base import resolve_zone
from celery_cronstore.timers.once import format_instant, parse_instant

__all__ = ["history", "next_", "run_now", "validate"]


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
