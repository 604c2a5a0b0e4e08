"""The commands that pause and resume a periodic task: ``pause`` (with a note, an end and
what resuming does) and ``resume``. The rules are :mod:`celery_cronstore.policy.pause`'s."""

from __future__ import annotations

import click

from celery_cronstore.cli.base import (
    BadInputError,
    Command,
    emit_json,
    fmt_time,
    get_settings,
    get_store,
)
from celery_cronstore.cli.group import cronstore
from celery_cronstore.policy.backfill import RangeError, read_instant
from celery_cronstore.policy.pause import RESUMES, paused_text
from celery_cronstore.records import PeriodicTask

__all__ = ["pause", "resume"]


@cronstore.command(cls=Command)
@click.argument("name")
@click.option("--note", default="", metavar="TEXT", help="Why it is paused (shown everywhere).")
@click.option(
    "--until",
    metavar="WHEN",
    help="Resume it by itself at this instant (ISO-8601; without an offset it is read in the "
    "task's zone). Without it: until `resume`.",
)
@click.option(
    "--resume",
    "then",
    type=click.Choice(RESUMES),
    default="skip",
    show_default=True,
    help="On resume: skip the fires the pause held back, or send the newest of them once.",
)
@click.pass_context
def pause(ctx: click.Context, name: str, note: str, until: str | None, then: str) -> None:
    """Pause a periodic task: nothing is claimed for it until it is resumed (a fire already
    sent still runs)."""
    store = get_store(ctx)
    end = None
    if until is not None and until.strip():
        try:
            end = read_instant(until, store.get(name).tz, "--until")
        except RangeError as exc:
            raise BadInputError(str(exc)) from None
    _report(ctx, "paused", store.pause(name, note=note, until=end, resume=then))


@cronstore.command(cls=Command)
@click.argument("name")
@click.option(
    "--skip",
    "mode",
    flag_value="skip",
    help="Send none of the fires the pause held back (record them skipped).",
)
@click.option(
    "--newest",
    "mode",
    flag_value="newest",
    help="Send the newest of the fires the pause held back, once.",
)
@click.pass_context
def resume(ctx: click.Context, name: str, mode: str | None) -> None:
    """Resume a paused periodic task now (by default as chosen when it was paused)."""
    _report(ctx, "resumed", get_store(ctx).resume(name, mode=mode))


def _report(ctx: click.Context, verb: str, record: PeriodicTask) -> None:
    settings = get_settings(ctx)
    if settings.as_json:
        emit_json(record)
        return
    state = paused_text(record)
    if state is None:
        planned = fmt_time(record.next_run, settings.zone) if record.next_run else "none"
        state = f"next run {planned}"
    click.echo(f"{verb} {record.name}: {state}")
