"""``celery -A app cronstore audit``: who changed which task, from which window, when."""

from __future__ import annotations

import click

from celery_cronstore.cli.base import Command, emit_json, fmt_time, get_settings, get_store, table
from celery_cronstore.cli.group import cronstore
from celery_cronstore.store.audit import MAX_LIMIT

__all__ = ["audit"]


@cronstore.command(cls=Command)
@click.option("--task", "task", metavar="NAME", help="Only the entries of this task.")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_LIMIT),
    default=50,
    show_default=True,
    help=f"How many entries, newest first (at most {MAX_LIMIT:,}).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def audit(ctx: click.Context, task: str | None, limit: int, as_json: bool) -> None:
    """Show the audit trail: every add, edit, enable, disable, run now and remove, with
    who made it (user, or "token"/"api"), from which window (cli, web, admin, api,
    import, apply) and when. Kept as long as the fire history (cronstore_history_days)."""
    settings = get_settings(ctx)
    found = get_store(ctx).audit_trail(task=task, limit=limit)
    if as_json or settings.as_json:
        emit_json(found)
        return
    if not found:
        click.echo("no audit entries" + (f" for {task}" if task else ""))
        return
    rows = [
        (
            fmt_time(e.at, settings.zone),
            e.actor,
            e.window,
            e.action,
            e.task_name,
            (e.detail or "").replace("\n", " "),
        )
        for e in found
    ]
    table(("at", "actor", "window", "action", "task", "detail"), rows)
