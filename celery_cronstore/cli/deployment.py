"""The commands a deployment runs: migrate (at each release, before beat starts), health
(a liveness probe: did a beat tick lately, and can it do its work) and prune (the fire
ledger's retention, which beat also applies as it runs)."""

from __future__ import annotations

import socket

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
)
from celery_cronstore.cli.group import cronstore
from celery_cronstore.config import Config
from celery_cronstore.policy import beat_health
from celery_cronstore.policy.retention import parse_age
from celery_cronstore.policy.roles import RoleFacts, RoleNote, role_notes
from celery_cronstore.store.db import Database
from celery_cronstore.store.engine import DATABASE_ERRORS
from celery_cronstore.store.heartbeat import look_backlog
from celery_cronstore.store.listen import database_lines
from celery_cronstore.store.migrate import head_revision
from celery_cronstore.store.retention import PRUNE_BATCH
from celery_cronstore.store.roles import read_role

__all__ = ["HEALTH_TIMEOUT", "health", "migrate", "prune"]

#: Seconds health's look at the store may wait for a lock or a statement.
HEALTH_TIMEOUT = 3.0


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
@click.option(
    "--max-late",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Unhealthy when a due task is unclaimed, or a claim unpublished, this many "
    "seconds after its time.  [default: cronstore_lease]",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=HEALTH_TIMEOUT,
    show_default=True,
    help="Longest health's look at the store waits for a lock or a statement; a look "
    "that runs out of time (a locked table) is unhealthy.",
)
@click.option("--host", help="Only beats running on this host (node names start HOST:).")
@click.option(
    "--this-host",
    is_flag=True,
    help="Only beats on the host running this command (a per-pod liveness probe).",
)
@click.option(
    "--require-firing",
    is_flag=True,
    help="Unhealthy when every alive beat has firing off (CRONSTORE_FIRE=0); without it "
    "such beats are healthy and the line says that firing is off.",
)
@click.pass_context
def health(
    ctx: click.Context,
    max_age: float,
    max_late: float | None,
    timeout: float,
    host: str | None,
    this_host: bool,
    require_firing: bool,
) -> None:
    """Exit 0 if a beat ticked within --max-age seconds, is not stalled, and no due work
    waits longer than --max-late; else 1.

    Stalled: it has had due fires it could neither claim nor publish for longer than
    the lease (``cronstore_lease``). Due work waiting: an enabled task due longer than
    --max-late ago that no beat claimed, or a claim not published that long after its
    fire time (the store as a whole, whatever --host says); a look that cannot get an
    answer within --timeout (a locked table) is unhealthy too, and an unreachable store
    is exit 1 with one line. A liveness probe for beat's container.

    It also names, a line each, what of beat's work the database role it connects as may
    not do (PostgreSQL, MariaDB): VACUUM tables it does not own (vacuum:), prune without
    DELETE (prune:), or schedule at all (scheduling:). These lines leave the exit status
    as it is.

    A beat started with firing off (CRONSTORE_FIRE=0, a staging copy) claims nothing on
    purpose: when every alive beat is such a beat, health says that firing is off and
    exits 0, or 1 with --require-firing.
    """
    if host is not None and this_host:
        raise BadInputError("give --host or --this-host, not both")
    if this_host:
        host = socket.gethostname()
    store = get_store(ctx)
    beats = store.beats()
    if host is not None:
        beats = [b for b in beats if b.node.startswith(f"{host}:")]
    lease = Config.from_app(get_app(ctx)).lease
    limit = lease if max_late is None else max_late
    backlog = look_backlog(store.db, limit=limit, timeout=timeout)
    now = backlog.now
    healthy, reason = beat_health(
        beats,
        now,
        max_age=max_age,
        stall_limit=limit,
        backlog=backlog,
        require_firing=require_firing,
    )
    if not beats:
        where = f" on host {host}" if host is not None else ""
        reason = f"unhealthy: no beat{where} has ever ticked in {store.url}"
    facts = _role(store.db)
    notes = [] if facts is None else role_notes(facts)
    database = database_lines(store.db.engine, Config.from_app(get_app(ctx)))
    if get_settings(ctx).as_json:
        emit_json(
            {
                "healthy": healthy,
                "reason": reason,
                "now": now,
                "max_age": max_age,
                "max_late": limit,
                "backlog": {
                    "overdue": backlog.overdue,
                    "oldest_due": backlog.oldest_due,
                    "unpublished": backlog.unpublished,
                    "oldest_claim": backlog.oldest_claim,
                    "blocked": backlog.blocked,
                },
                "beats": [b._asdict() for b in beats],
                "role": None if facts is None else _role_json(facts, notes),
                "database": database[0] if database else None,
            }
        )
        if not healthy:
            ctx.exit(EXIT_FAILED)
    elif healthy:
        click.echo("\n".join([reason, *(n.text for n in notes), *database]))
    else:  # the verdict first and alone on stdout: a probe's log shows one line
        raise CommandError("\n".join([reason, *(n.text for n in notes)]))


def _role(db: Database) -> RoleFacts | None:
    """Read the role's privileges; ``None`` when there are no roles or the read failed
    (an informational look: it never makes health fail)."""
    try:
        return read_role(db)
    except DATABASE_ERRORS:
        return None


def _role_json(facts: RoleFacts, notes: list[RoleNote]) -> dict[str, object]:
    return {
        "name": facts.role,
        "not_owned": list(facts.not_owned),
        "missing": [list(pair) for pair in facts.missing],
        "breaks_scheduling": any(n.breaks_scheduling for n in notes),
        "warnings": [{"kind": n.kind, "text": n.text} for n in notes],
    }


@cronstore.command(cls=Command)
@click.option(
    "--older-than",
    metavar="AGE",
    help="Prune fires older than AGE (30d, 12h, 90m; a bare number is days)."
    "  [default: cronstore_history_days]",
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=PRUNE_BATCH,
    show_default=True,
    help="Ledger rows per transaction.",
)
@click.pass_context
def prune(ctx: click.Context, older_than: str | None, dry_run: bool, batch: int) -> None:
    """Delete fire history older than --older-than, in small transactions.

    Never deleted: fires in flight, each task's newest fire and the rows the CronTask
    guard still reads. Prints the rows deleted (or, with --dry-run, that would be) per
    state. Beat prunes by itself as it runs; this is for a first clean-up or a shorter
    horizon.
    """
    if older_than is None:
        keep = Config.from_app(get_app(ctx)).history
        if keep is None:
            raise CommandError(
                "cronstore_history_days is 0 (keep history forever): give --older-than to "
                "prune anyway"
            )
    else:
        try:
            keep = parse_age(older_than)
        except ValueError as exc:
            raise BadInputError(f"--older-than: {exc}") from None
    store = get_store(ctx)
    cutoff = store.now() - keep
    counts = store.prune(keep, dry_run=dry_run, batch=batch)
    total = sum(counts.values())
    if get_settings(ctx).as_json:
        emit_json({"dry_run": dry_run, "cutoff": cutoff, "total": total, "states": counts})
        return
    verb = "would delete" if dry_run else "deleted"
    zone = get_settings(ctx).zone
    click.echo(f"{verb} {total} ledger row(s) of fires before {fmt_time(cutoff, zone)}")
    for state, count in sorted(counts.items()):
        click.echo(f"  {state:<10} {count}")
