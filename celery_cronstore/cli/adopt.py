"""``cronstore import``: every schedule of another scheduler, brought over in one command.

``celery -A app cronstore import --from SOURCE [--url LOCATION] [--dry-run] [--json]``
reads the peer's data (:mod:`celery_cronstore.adopt.sources`), compares it with the store
(:func:`celery_cronstore.adopt.plan.make_plan`) and, unless ``--dry-run``, writes the
creates and updates in one transaction (:meth:`~celery_cronstore.store.Store.adopt`).
It prints one line per task (created, updated, unchanged, conflict, refused) and the
counts; ``--json`` prints the same as JSON. A rerun is idempotent.

Exit status: 0 when every row came over (or was already there), 1 when some rows were
refused or conflict with a stored task (the rest is written; the report names each one),
2 for bad input (an unknown source, a location that cannot be read).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from celery_cronstore.adopt import sources
from celery_cronstore.adopt.plan import Plan, make_plan
from celery_cronstore.adopt.records import ReadContext
from celery_cronstore.catalog import TaskCatalog
from celery_cronstore.cli.base import (
    EXIT_FAILED,
    BadInputError,
    Command,
    get_app,
    get_settings,
    get_store,
)
from celery_cronstore.cli.group import cronstore
from celery_cronstore.config import Config
from celery_cronstore.store.adopt import Adopted
from celery_cronstore.store.peers import peer_warnings

__all__ = ["import_", "report", "task_check"]


def task_check(
    app: Any, *, force: bool, verb: str = "imports"
) -> Callable[[str, list[Any], dict[str, Any]], str | None]:
    """Return the check an incoming task passes: beat would send it (unless ``force``) and
    its args fit the task's signature (the app's :class:`TaskCatalog`, as ``add`` asks).
    ``verb`` says what ``--force`` does in the message (``imports``, ``applies``)."""
    catalog = TaskCatalog(app, config=Config.from_app(app))

    def check(task: str, args: list[Any], kwargs: dict[str, Any]) -> str | None:
        refused = None if force else catalog.registered(task)
        if refused is not None:
            return f"{refused} (--force {verb} it anyway; beat then puts it in error)"
        return catalog.call_problem(task, args, kwargs)

    return check


def report(
    ctx: click.Context,
    plan: Plan,
    done: Adopted | None,
    *,
    as_json: bool,
    warnings: list[str] = [],  # noqa: B006  (read only)
    unchanged: bool = True,
    held: str | None = None,
) -> None:
    """Print ``plan`` (what was written, or with ``done`` None what would be) and exit 1 if
    anything was refused.

    Calendar changes (``apply``) come first, as they are written first, and the last line
    counts them after the tasks. ``unchanged=False`` leaves out the lines of unchanged
    tasks and calendars (``apply``: a file names every task, only changes are news; the
    counts still say how many). ``held`` says why nothing was written although this was
    no dry run (``apply`` writes a file whole or not at all).
    """
    verb = "would " if done is None else ""
    if as_json or get_settings(ctx).as_json:
        data = plan.as_json()
        data["dry_run"] = done is None and held is None
        data["warnings"] = warnings
        if held is not None:
            data["held"] = held
        click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))
    else:
        for calendar in plan.calendars:  # written first: the tasks name them
            if calendar.action != "unchanged" or unchanged:
                click.echo(calendar.line())
        for change in plan.changes:
            if change.action == "unchanged" and not unchanged:
                continue
            click.echo(change.line())
            if change.incoming is not None and change.action in ("create", "update"):
                for note in change.incoming.notes:
                    click.echo(f"          note: {note}")
        for warning in warnings:
            click.echo(f"warning: {warning}")
        counts = ", ".join(f"{n} {action}" for action, n in plan.counts().items() if n)
        if plan.calendars:
            shown = ", ".join(f"{n} {a}" for a, n in plan.calendar_counts().items() if n)
            calendars = f"; {len(plan.calendar_writes)} calendar(s): {shown}"
        else:
            calendars = ""
        writes = len(plan.writes)
        if writes == 0 and not plan.calendar_writes and not plan.refused:
            click.echo("no changes")
        if held is not None:
            click.echo(f"wrote nothing ({counts or 'nothing read'}{calendars}): {held}")
        else:
            click.echo(f"{verb}write {writes} task(s): {counts or 'nothing read'}{calendars}")
    if plan.refused:
        ctx.exit(EXIT_FAILED)


@cronstore.command(name="import", cls=Command)
@click.option(
    "--from",
    "source",
    required=True,
    type=click.Choice(list(sources.SOURCES)),
    help="The scheduler to bring schedules over from.",
)
@click.option(
    "--url",
    "location",
    help="Where its data is: a database URL (django-celery-beat, sqlalchemy-celery-beat), "
    "a Redis URL (redbeat), a module:attribute or a celerybeat-schedule file "
    "(beat-schedule). Without --url: django-celery-beat reads through the Django ORM, "
    "redbeat the app's redbeat_redis_url (else broker_url), beat-schedule the app's "
    "beat_schedule.",
)
@click.option("--key-prefix", help="RedBeat's key prefix (default: the app's, else redbeat:).")
@click.option("--dry-run", is_flag=True, help="Print what would change; write nothing.")
@click.option("--force", is_flag=True, help="Import tasks the app does not register too.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def import_(
    ctx: click.Context,
    source: str,
    location: str | None,
    key_prefix: str | None,
    dry_run: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Bring every periodic task of django-celery-beat, RedBeat, sqlalchemy-celery-beat or
    a beat_schedule over (one transaction; a rerun changes nothing)."""
    app = get_app(ctx)
    store = get_store(ctx)
    config = Config.from_app(app)
    prefix = key_prefix or getattr(app.conf, "redbeat_key_prefix", None)
    context = ReadContext(zone=config.zone(app), app=app, key_prefix=prefix)
    try:
        reads = sources.reader(source)(location, context)
    except (OSError, ImportError, LookupError) as exc:
        raise BadInputError(f"cannot read {source} at {location or 'its default'}: {exc}") from None
    current = {task.name: task for task in store.list()}
    tag = sources.tag(source)
    plan = make_plan(
        reads,
        current,
        source=tag,
        default_tz=context.zone,
        check_task=task_check(app, force=force),
    )
    warnings = peer_warnings(store.db, source, [c.name for c in plan.changes if c.incoming])
    done = None if dry_run else store.adopt(plan, source=tag)
    report(ctx, plan, done, as_json=as_json, warnings=warnings)
