"""Turning records into HTML: the template environment, time formatting and the chart.

Every stored string reaches a page through Jinja2 with autoescaping on (and through
:func:`scrub` where it may quote a database or broker URL). The chart is SVG built here
from numbers and escaped text only; its colours live in ``static/app.css`` (the
Content-Security-Policy forbids inline styles).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone, tzinfo
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape

from celery_cronstore.errors import TimerError
from celery_cronstore.policy.pause import NOTE_CHARS, RESUMES, paused_text
from celery_cronstore.records import Fire
from celery_cronstore.states import NOT_RUN
from celery_cronstore.timers import parse_timer, shown_zone
from celery_cronstore.timers.base import resolve_zone

__all__ = [
    "describe_timer",
    "environment",
    "fmt_local",
    "fmt_shown",
    "lateness_chart",
    "relative",
    "zone",
    "zone_label",
]


def environment(display_tz: str = "UTC") -> Environment:
    """Return the Jinja2 environment of the dashboard (autoescape on, strict undefined).

    Every instant a page lists is shown in one zone, ``display_tz`` (``shown``; its name
    is ``display_zone``, written in each column's header): a column of next fires in
    each task's own zone would not sort by eye. A timer's zone is shown beside it only
    where it decides the fire times (``zone_label``).
    """
    resolve_zone(display_tz)  # an unknown zone is refused at start, naming it
    env = Environment(
        loader=PackageLoader("celery_cronstore.web", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(local=fmt_local, relative=relative, seconds=fmt_seconds, utc=fmt_utc)
    env.globals.update(
        display_zone=display_tz,
        shown=functools.partial(fmt_shown, tz=display_tz),
        zone_label=zone_label,
        # The pause (issue 25): its one sentence, as every window says it, and its form's rules.
        paused_text=paused_text,
        resumes=RESUMES,
        note_chars=NOTE_CHARS,
    )
    return env


def fmt_shown(instant: datetime | None, tz: str = "UTC") -> Markup:
    """Return :func:`fmt_local` as HTML that may wrap between the date and the time, never
    inside either (``2026-11-28`` must not break at its hyphens in a narrow column)."""
    day, _, rest = fmt_local(instant, tz).partition(" ")
    if not rest:
        return Markup('<span class="when">{}</span>').format(day)
    return Markup('<span class="when"><span>{}</span> <span>{}</span></span>').format(day, rest)


def zone_label(kind: str, tz: str) -> Markup:
    """Return a timer's zone as a page shows it: "—" when it has no effect (an interval);
    a long name may wrap after its slashes (``America/<wbr>Argentina/<wbr>Buenos_Aires``)."""
    zone_name = shown_zone(kind, tz)
    if zone_name is None:
        return Markup("—")
    return Markup("/<wbr>").join(escape(part) for part in zone_name.split("/"))


@functools.lru_cache(maxsize=256)
def zone(name: str) -> tzinfo:
    """Return the zone called ``name`` (UTC if the stored name is unknown)."""
    try:
        return resolve_zone(name)
    except (TimerError, ValueError):
        return timezone.utc


@functools.lru_cache(maxsize=4096)
def describe_timer(kind: str, expression: str, tz: str) -> tuple[str, bool]:
    """Return ``(description, ok)`` of a stored timer; ``ok`` is False when it is broken."""
    try:
        return parse_timer(expression, kind=kind, tz=tz).describe(), True
    except (TimerError, ValueError) as exc:
        return f"does not parse: {exc}", False


def fmt_utc(instant: datetime | None) -> str:
    if instant is None:
        return "-"
    return instant.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_local(instant: datetime | None, tz: str = "UTC") -> str:
    """Return ``2026-05-01 14:00:00 CEST``: ``instant`` as the task's zone shows it."""
    if instant is None:
        return "-"
    local = instant.astimezone(zone(tz))
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname() or tz}"


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) < 1:
        return f"{value * 1000:.0f} ms"
    if abs(value) < 120:
        return f"{value:.1f} s"
    return _span(value)


def _span(seconds: float) -> str:
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def relative(instant: datetime | None, now: datetime) -> str:
    """Return ``in 5 min`` / ``3 h ago`` for ``instant`` seen at ``now``."""
    if instant is None:
        return ""
    delta = (instant - now).total_seconds()
    if abs(delta) < 1:
        return "now"
    return f"in {_span(delta)}" if delta > 0 else f"{_span(delta)} ago"


def lateness_chart(fires: Sequence[Fire], *, width: int = 720, height: int = 220) -> Markup:
    """Return an SVG chart: each fire's lateness (y) over its fire time (x), by outcome.

    Fires that never ran (missed, expired, dropped, skipped) sit as crosses on the bottom
    band; a ``<title>`` on each mark names fire time, state and lateness.
    """
    left, right, top, bottom = 56, 12, 12, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'role="img" aria-label="lateness and outcome of recent fires" '
        'xmlns="http://www.w3.org/2000/svg">',
        f'<rect class="chart-bg" x="{left}" y="{top}" width="{plot_w}" height="{plot_h}"/>',
    ]
    if not fires:
        parts.append(
            f'<text class="chart-label" x="{left + 8}" y="{top + 24}">no fires yet</text></svg>'
        )
        return Markup("".join(parts))
    start, end = fires[0].fire_time, fires[-1].fire_time
    span = max((end - start).total_seconds(), 1.0)
    late = [f.lateness for f in fires if f.lateness is not None and f.state not in NOT_RUN]
    top_value = max([max(late, default=0.0), 1.0])
    band = top + plot_h - 8  # the "did not run" line

    def x_of(moment: datetime) -> float:
        return left + plot_w * (moment - start).total_seconds() / span if len(fires) > 1 else left

    def y_of(value: float) -> float:
        return top + (plot_h - 16) * (1 - max(value, 0.0) / top_value)

    parts += [
        f'<line class="chart-axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>',
        f'<text class="chart-label" x="{left - 6}" y="{top + 10}" text-anchor="end">'
        f"{escape(fmt_seconds(top_value))}</text>",
        f'<text class="chart-label" x="{left - 6}" y="{y_of(0):.1f}" text-anchor="end">0</text>',
        f'<text class="chart-label" x="{left - 6}" y="{band + 4}" text-anchor="end">not run</text>',
        f'<text class="chart-label" x="{left}" y="{height - 14}">{escape(fmt_utc(start))}</text>',
        f'<text class="chart-label" x="{width - right}" y="{height - 14}" text-anchor="end">'
        f"{escape(fmt_utc(end))}</text>",
    ]
    for f in fires:
        x = x_of(f.fire_time)
        state = f.state if f.state.isidentifier() else "other"
        title = f"<title>{escape(fmt_utc(f.fire_time))}: {escape(f.state)}"
        if f.lateness is not None:
            title += f", {escape(fmt_seconds(f.lateness))} late"
        title += "</title>"
        if f.state in NOT_RUN or f.lateness is None:
            parts.append(
                f'<path class="mark st-{state}" d="M{x - 4:.1f},{band - 4} l8,8 m0,-8 l-8,8">'
                f"{title}</path>"
            )
        else:
            parts.append(
                f'<circle class="mark st-{state}" cx="{x:.1f}" cy="{y_of(f.lateness):.1f}" '
                f'r="4">{title}</circle>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def states_in(fires: Iterable[Fire]) -> list[str]:
    """Return the distinct states of ``fires`` in first-seen order (the chart's legend)."""
    seen: dict[str, None] = {}
    for f in fires:
        seen.setdefault(f.state, None)
    return list(seen)


def as_json_text(value: Any) -> str:
    """Return ``value`` as indented JSON for a form field (escaped by the template)."""
    import json

    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
