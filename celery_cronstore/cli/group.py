"""The ``celery -A app cronstore`` group: its options, shared by every command.

The commands register themselves on :data:`cronstore` when their modules are imported
(``tasks``, ``fires``, ``deployment``, ``web``; ``celery_cronstore.cli`` imports them all).
"""

from __future__ import annotations

import click

from celery_cronstore.cli.base import get_settings
from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers.base import resolve_zone

__all__ = ["cronstore"]


@click.group(name="cronstore")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option(
    "--tz",
    "--display-tz",
    "display_tz",
    metavar="ZONE",
    help="Show times in this zone (default: UTC, ISO-8601 with Z).",
)
@click.pass_context
def cronstore(ctx: click.Context, as_json: bool, display_tz: str | None) -> None:
    """Manage the periodic tasks celery-cronstore keeps in SQL."""
    settings = get_settings(ctx)
    settings.as_json = as_json
    if display_tz is not None:
        try:
            settings.zone = resolve_zone(display_tz)
        except TimerSyntaxError as exc:
            raise click.BadParameter(str(exc), ctx, param_hint="'--tz'") from None
