"""``cronstore calendar``: exclusion calendars (add, list, show, remove). The rules are
:mod:`celery_cronstore.policy.exclusions`'; a task names the calendars it skips with
``add``/``edit --exclude NAME[,NAME...]``."""

from __future__ import annotations

from typing import Any

import click

from celery_cronstore.cli.base import Command, emit_json, get_settings, get_store, table
from celery_cronstore.cli.group import cronstore
from celery_cronstore.policy.exclusions import Calendar

__all__ = ["calendar"]


@cronstore.group(name="calendar")
def calendar() -> None:
    """Exclusion calendars: days, spans, time windows and public holidays tasks skip."""


@calendar.command(name="add", cls=Command)
@click.argument("name")
@click.argument("entries", nargs=-1, metavar="[ENTRY]...")
@click.option(
    "--holidays",
    metavar="CODE",
    help="Also a country's or region's public holidays: US, US-CA, DE-BY (the holidays extra).",
)
@click.option("--description", default="", help="What the calendar is for.")
@click.option("--replace", is_flag=True, help="Replace the calendar of that name if it exists.")
@click.pass_context
def add(
    ctx: click.Context,
    name: str,
    entries: tuple[str, ...],
    holidays: str | None,
    description: str,
    replace: bool,
) -> None:
    """Add an exclusion calendar. Each ENTRY is a day (2026-12-25), a span of days
    (2026-12-24..2026-12-26), both read in each task's zone, or a window between two
    instants (2026-12-07T22:00:00Z..2026-12-08T02:00:00Z)."""
    store = get_store(ctx)
    parsed = store.calendars.add(
        name, entries=list(entries), holidays=holidays, description=description, replace=replace
    )
    _report(ctx, "updated" if replace else "added", parsed)


@calendar.command(name="list", cls=Command)
@click.pass_context
def list_(ctx: click.Context) -> None:
    """List the exclusion calendars."""
    found = get_store(ctx).calendars.all()
    if get_settings(ctx).as_json:
        emit_json([_json(c) for c in found.values()])
        return
    if not found:
        click.echo("(no calendars)")
        return
    rows = [(c.name, _summary(c), c.description or "-") for c in found.values()]
    table(("name", "excludes", "description"), rows)


@calendar.command(name="show", cls=Command)
@click.argument("name")
@click.pass_context
def show(ctx: click.Context, name: str) -> None:
    """Show one exclusion calendar and the tasks that exclude it."""
    store = get_store(ctx)
    found = store.calendars.get(name)
    with store.engine.connect() as conn:
        users = store.calendars.users(conn, name)
    if get_settings(ctx).as_json:
        emit_json({**_json(found), "tasks": users})
        return
    _report(ctx, "calendar", found)
    for first, last in found.days:
        click.echo(f"  {first.isoformat()}" + ("" if last == first else f"..{last.isoformat()}"))
    for start, end in found.windows:
        click.echo(f"  {start.isoformat()}..{end.isoformat()}")
    click.echo(f"excluded by: {', '.join(users) if users else '(no task)'}")


@calendar.command(name="remove", cls=Command)
@click.argument("name")
@click.option("--force", is_flag=True, help="Remove it even if tasks exclude it.")
@click.pass_context
def remove(ctx: click.Context, name: str, force: bool) -> None:
    """Remove an exclusion calendar (refused while tasks exclude it, unless --force)."""
    users = get_store(ctx).calendars.remove(name, force=force)
    if get_settings(ctx).as_json:
        emit_json({"removed": name, "tasks": users})
    else:
        left = f"; {len(users)} task(s) still name it and go in error" if users else ""
        click.echo(f"removed calendar {name}{left}")


def _summary(found: Calendar) -> str:
    parts = []
    if found.days:
        parts.append(f"{len(found.days)} day(s)/span(s)")
    if found.windows:
        parts.append(f"{len(found.windows)} window(s)")
    if found.holidays:
        parts.append(f"holidays {found.holidays}")
    return ", ".join(parts)


def _json(found: Calendar) -> dict[str, Any]:
    return {
        "name": found.name,
        "days": [[a.isoformat(), b.isoformat()] for a, b in found.days],
        "windows": [[a.isoformat(), b.isoformat()] for a, b in found.windows],
        "holidays": found.holidays,
        "description": found.description,
    }


def _report(ctx: click.Context, verb: str, found: Calendar) -> None:
    if get_settings(ctx).as_json and verb != "calendar":
        emit_json(_json(found))
        return
    click.echo(f"{verb} {found.name}: {_summary(found)}")
