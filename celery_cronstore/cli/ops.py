"""Commands about time and operations: validate, next, history, run-now, migrate, health."""

from __future__ import annotations

import os
import socket
import sys
from datetime import datetime, timezone

import click

from celery_cronstore.cli.base import (
    EXIT_FAILED,
    BadInputError,
    Command,
    CommandError,
    emit_json,
    fmt_time,
    get_app,
    get_settings,
    get_store,
    table,
)
from celery_cronstore.cli.commands import cronstore
from celery_cronstore.config import Config
from celery_cronstore.policy import allowed
from celery_cronstore.store import Claimer
from celery_cronstore.store.migrate import head_revision
from celery_cronstore.timers import KINDS, parse_timer
from celery_cronstore.timers import __main__ as timer_cli
from celery_cronstore.timers.base import resolve_zone
from celery_cronstore.timers.once import format_instant, parse_instant

__all__ = ["health", "history", "migrate", "next_", "run_now", "validate"]


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
    table(("fire time", "state", "task id", "node", "finished", "reason"), rows)


@cronstore.command(name="run-now", cls=Command)
@click.argument("name")
@click.pass_context
def run_now(ctx: click.Context, name: str) -> None:
    """Send one extra fire of a periodic task now (recorded in its ledger)."""
    app = get_app(ctx)
    store = get_store(ctx)
    config = Config.from_app(app)
    node = f"cli@{socket.gethostname()}:{os.getpid()}"
    claimer = Claimer(store, node, lease=config.lease, allowlist=config.task_allowlist)
    record = store.get(name)
    if not allowed(record.task, config.task_allowlist):
        raise CommandError(f"task {record.task!r} is not in cronstore_task_allowlist")
    claim = claimer.claim_now(name)
    from celery_cronstore.publish import publish

    try:
        publish(app, claim)
    except Exception as exc:
        raise CommandError(
            f"claimed a fire of {name} (task id {claim.task_id}) but could not publish it "
            f"({type(exc).__name__}: {exc}); a running beat re-publishes it once its "
            f"lease of {config.lease:g}s runs out"
        ) from None
    claimer.mark_published([claim])
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


@cronstore.command(cls=Command)
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Create or upgrade the cronstore tables to this release's schema."""
    store = get_store(ctx, check=False)
    store.upgrade()
    store.check_schema()
    if get_settings(ctx).as_json:
        emit_json({"url": store.url, "revision": head_revision()})
    else:
        click.echo(f"{store.url}: schema at revision {head_revision()}")


@cronstore.command(cls=Command)
@click.option(
    "--max-age",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Healthy only if some beat ticked within this many seconds.",
)
@click.option("--host", help="Only beats running on this host (node names start HOST:).")
@click.option(
    "--this-host",
    is_flag=True,
    help="Only beats on the host running this command (a per-pod liveness probe).",
)
@click.pass_context
def health(ctx: click.Context, max_age: float, host: str | None, this_host: bool) -> None:
    """Exit 0 if a beat ticked within --max-age seconds, 1 otherwise (liveness probe)."""
    if host is not None and this_host:
        raise BadInputError("give --host or --this-host, not both")
    if this_host:
        host = socket.gethostname()
    store = get_store(ctx)
    beats = store.beats()
    if host is not None:
        beats = [b for b in beats if b[0].startswith(f"{host}:")]
    now = store.now()
    newest = beats[0] if beats else None
    age = (now - newest[2]).total_seconds() if newest else None
    healthy = age is not None and age <= max_age
    where = f" on host {host}" if host is not None else ""
    if newest is None:
        reason = f"unhealthy: no beat{where} has ever ticked in {store.url}"
    elif healthy:
        reason = f"healthy: beat {newest[0]} ticked {age:.1f}s ago (max {max_age:g}s)"
    else:
        reason = (
            f"unhealthy: newest beat tick was {age:.1f}s ago (max {max_age:g}s), "
            f"by {newest[0]} at {format_instant(newest[2])}"
        )
    if get_settings(ctx).as_json:
        emit_json(
            {
                "healthy": healthy,
                "reason": reason,
                "now": now,
                "max_age": max_age,
                "beats": [{"node": n, "started_at": s, "last_tick": t} for n, s, t in beats],
            }
        )
        if not healthy:
            ctx.exit(EXIT_FAILED)
    elif healthy:
        click.echo(reason)
    else:
        raise CommandError(reason)
