"""``cronstore alerts``: the alert episodes open now (``--all``: the newest, resolved too).

What opens and resolves an episode is :mod:`celery_cronstore.policy.alerts`' rule; beat
judges and delivers them (docs/alerts.md). This command only reads them, through the
store.
"""

from __future__ import annotations

import click

from celery_cronstore.cli.base import Command, emit_json, fmt_time, get_settings, get_store, table
from celery_cronstore.cli.group import cronstore
from celery_cronstore.policy.alerts import Episode
from celery_cronstore.store import alerts as store_alerts

__all__ = ["alerts"]


def _delivery(episode: Episode) -> str:
    """Say where the episode's delivery stands."""
    owed = episode.pending
    if owed is None:
        return "sent" if episode.sent_at is not None else "-"
    if episode.next_attempt_at is None:
        return "not sent (no webhook)" if episode.sent_at is None else "-"
    if episode.attempts and episode.last_error:
        return f"{owed} owed: {episode.last_error} ({episode.attempts} attempt(s))"
    return f"{owed} owed"


@cronstore.command(cls=Command)
@click.option("--all", "show_all", is_flag=True, help="Also the resolved ones, newest first.")
@click.option(
    "-n", "--count", type=click.IntRange(1, 10_000), default=50, show_default=True,
    help="Most episodes --all shows.",
)  # fmt: skip
@click.pass_context
def alerts(ctx: click.Context, show_all: bool, count: int) -> None:
    """List the alert episodes open now: failing tasks and silent ones (dead man's switch)."""
    settings = get_settings(ctx)
    db = get_store(ctx).db
    found = store_alerts.episodes(db, limit=count) if show_all else store_alerts.open_episodes(db)
    if settings.as_json:
        emit_json([{**_plain(e), "delivery": _delivery(e)} for e in found])
        return
    if not found:
        click.echo("no alert episode is open" if not show_all else "no alert episode yet")
        return
    zone = settings.zone
    rows = [
        (
            e.name,
            e.kind,
            fmt_time(e.opened_at, zone),
            fmt_time(e.resolved_at, zone) if e.resolved_at else "open",
            str(e.count),
            _delivery(e),
            e.reason or "",
        )
        for e in found
    ]
    table(("task", "kind", "opened", "resolved", "count", "delivery", "reason"), rows)


def _plain(episode: Episode) -> dict[str, object]:
    return {name: getattr(episode, name) for name in episode.__dataclass_fields__}
