"""The results: the environment they were measured in, their Markdown tables, their plots."""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import Subject

UTC = timezone.utc


def environment(opts: argparse.Namespace, subjects: Sequence[Subject]) -> dict[str, Any]:
    """Return the date, the machine, the versions of everything measured and the servers'."""
    from importlib.metadata import version

    import redis
    import sqlalchemy as sa

    info: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "celery": version("celery"),
        "kombu": version("kombu"),
        "SQLAlchemy": version("SQLAlchemy"),
        "Django": version("Django"),
        "redis-py": version("redis"),
        "psycopg": version("psycopg"),
    }
    for subject in subjects:
        info[subject.distribution] = version(subject.distribution)
    import celery_cronstore

    # Which celery-cronstore was measured: a checkout on PYTHONPATH, or this tree.
    source = os.path.dirname(os.path.dirname(celery_cronstore.__file__))
    info["celery-cronstore from"] = source
    stamp = os.path.join(source, "COMMIT")  # written beside an exported checkout
    if os.path.exists(stamp):
        with open(stamp, encoding="ascii") as handle:
            info["celery-cronstore commit"] = handle.read().strip()
    engine = sa.create_engine(opts.pg_admin)
    with engine.connect() as conn:
        info["PostgreSQL"] = str(conn.exec_driver_sql("SHOW server_version").scalar_one()).split()[
            0
        ]
    engine.dispose()
    client = redis.Redis.from_url(opts.redis)
    info["Redis"] = client.info("server")["redis_version"]
    client.close()
    return info


def fmt(value: Any, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def tables(data: dict[str, Any], subjects: Sequence[Subject]) -> str:
    """Return one Markdown table per scheduler of ``data["results"]``."""
    from _common import table  # benchmarks/ is on the path: compare.py runs

    headers = (
        "N tasks",
        "fill s",
        "startup s",
        "idle tick median / p95 ms",
        "idle tick CPU ms",
        "RSS MB idle / peak",
        "K due",
        "dispatch s (ticks)",
        "close s",
        "status",
    )
    parts = []
    for subject in subjects:
        rows = []
        for p in data["results"]:
            if p["scheduler"] != subject.key:
                continue
            dispatch = p.get("dispatch_s")
            rows.append(
                [
                    f"{p['n']:,}",
                    fmt(p.get("fill_s"), ".1f"),
                    fmt(p.get("startup_s"), ".3f"),
                    f"{fmt(p.get('idle_median_ms'), '.2f')} / {fmt(p.get('idle_p95_ms'), '.2f')}",
                    fmt(p.get("idle_cpu_median_ms"), ".2f"),
                    f"{fmt(p.get('rss_idle_mb'), '.0f')} / {fmt(p.get('peak_rss_mb'), '.0f')}",
                    fmt(p.get("due"), ",d"),
                    (
                        f"{dispatch:.2f} ({p['dispatch_ticks']:,})"
                        if dispatch is not None
                        else f"{fmt(p.get('sent'), ',d', '?')} sent"
                    ),
                    fmt(p.get("close_s"), ".2f"),
                    p.get("status", "?") + (f": {p['reason']}" if p.get("reason") else ""),
                ]
            )
        if rows:
            parts.append(f"### {subject.label}\n\n{table(headers, rows)}")
    if data.get("live"):
        parts.append(live_table(data, subjects))
    return "\n\n".join(parts)


def last_line(text: Any) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[-1] if lines else ""


def live_table(data: dict[str, Any], subjects: Sequence[Subject]) -> str:
    """Return the Markdown table of the Redis-broker measurements, one row per scheduler."""
    from _common import table  # benchmarks/ is on the path: compare.py runs

    settings = data.get("live_settings", {})
    headers = (
        "scheduler",
        f"dispatch {settings.get('dispatch_tasks', 0):,} s (ticks)",
        "dispatch CPU s",
        f"lateness p50 / p99 / max ms ({settings.get('late_tasks', 0):,} in "
        f"{settings.get('late_window_s', 0):.0f} s)",
        "lateness at the signal p50 / p99 ms",
        f"edit seen p50 / p99 / max ms ({settings.get('edits', 0)} edits)",
        "edit call ms",
        "load",
    )

    def ms3(p: dict[str, Any] | None, prefix: str, count: int = 3) -> str:
        if p is None:
            return "-"
        keys = ("p50", "p99", "max")[:count]
        text = " / ".join(
            fmt(p.get(f"{prefix}_{k}_ms"), ".0f" if prefix != "x" else ".1f") for k in keys
        )
        if p.get("status") not in ("ok", None):
            text += f" ({p['status']}: {last_line(p.get('reason'))})"
        return text

    rows = []
    for subject in subjects:
        points = {p["phase"]: p for p in data["live"] if p["scheduler"] == subject.key}
        if not points:
            continue
        d = points.get("dispatch")
        if d is None:
            dispatch = "-"
        elif d.get("dispatch_s") is not None:
            dispatch = f"{d['dispatch_s']:.2f} ({d.get('dispatch_ticks', 0):,})"
        elif d.get("dispatch_elapsed_s") is not None:
            dispatch = f"> budget: {d.get('sent', 0):,} sent in {d['dispatch_elapsed_s']:.0f} s"
        else:
            dispatch = f"{d.get('status', '?')}: {last_line(d.get('reason'))}"
        loads = [
            v for p in points.values() for v in (p.get("load_before"), p.get("load_after")) if v
        ]
        rows.append(
            [
                subject.label,
                dispatch,
                fmt(None if d is None else d.get("dispatch_cpu_s"), ".2f"),
                ms3(points.get("lateness"), "late"),
                ms3(points.get("lateness"), "late_signal", 2).split(" (")[0],
                ms3(points.get("edit"), "edit"),
                fmt(points.get("edit", {}).get("edit_call_ms"), ".1f"),
                f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-",
            ]
        )
    return f"### Real Redis broker\n\n{table(headers, rows)}"


def plots(data: dict[str, Any], folder: str, subjects: Sequence[Subject]) -> list[str]:
    """Draw the four comparison plots into ``folder``; return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(folder, exist_ok=True)
    env = data["environment"]
    note = (
        f"PostgreSQL {env['PostgreSQL']} / Redis {env['Redis']}, {env['cpus']} CPUs, {env['date']}"
    )

    def series(key: str, field: str) -> tuple[list[int], list[float]]:
        xs, ys = [], []
        for p in data["results"]:
            if p["scheduler"] == key and p.get(field) is not None:
                xs.append(p["n"])
                ys.append(p[field])
        return xs, ys

    def draw(
        name: str,
        title: str,
        ylabel: str,
        field: str,
        scale: Callable[[float], float] = lambda v: v,
        dashed: str | None = None,
        partial: bool = False,
    ) -> str:
        fig, ax = plt.subplots(figsize=(8, 5.6), dpi=110)
        for subject in subjects:
            key, color, marker, label = subject.key, subject.color, subject.marker, subject.label
            stopped = [
                p["n"] for p in data["results"] if p["scheduler"] == key and p.get("status") != "ok"
            ]
            if stopped:
                label += f" (series stopped: N={stopped[0]:,} over budget)"
            xs, ys = series(key, field)
            if xs:
                ax.plot(xs, [scale(y) for y in ys], color=color, marker=marker, label=label)
            if dashed:
                xs, ys = series(key, dashed)
                if xs:
                    ax.plot(xs, [scale(y) for y in ys], color=color, linestyle="--", alpha=0.6)
            for p in data["results"] if partial else ():
                # An unfinished dispatch: a hollow marker at the time spent, a lower bound.
                if p["scheduler"] != key or p.get("dispatch_s") is not None:
                    continue
                if p.get("dispatch_elapsed_s") is None:
                    continue
                ax.plot(
                    [p["n"]],
                    [p["dispatch_elapsed_s"]],
                    marker=marker,
                    color=color,
                    markerfacecolor="white",
                    linestyle="none",
                )
                ax.annotate(
                    f"> {p['dispatch_elapsed_s']:.0f} s\n({p['sent']:,} of {p['due']:,} sent)",
                    (p["n"], p["dispatch_elapsed_s"]),
                    textcoords="offset points",
                    xytext=(8, -4 if key == "django" else -26),
                    fontsize=8,
                    color=color,
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("periodic tasks stored (N)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.4)
        ax.grid(True, which="minor", alpha=0.12)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8.5)
        fig.text(0.99, 0.01, note, ha="right", va="bottom", fontsize=7, color="gray")
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        path = os.path.join(folder, name)
        fig.savefig(path, bbox_inches="tight")  # the legend sits below the axes
        plt.close(fig)
        return path

    paths = [live_plot(data, folder, subjects, note)] if data.get("live") else []
    return [
        *paths,
        draw(
            "compare-tick.png",
            "Idle tick (nothing due): median time of one tick()",
            "ms per tick (log)",
            "idle_median_ms",
        ),
        draw(
            "compare-rss.png",
            "Beat process memory (solid: after startup + idle ticks; dashed: peak)",
            "RSS, MB (log)",
            "rss_idle_mb",
            dashed="peak_rss_mb",
        ),
        draw(
            "compare-dispatch.png",
            "Sending K = min(N, 1000) tasks made due at once",
            "seconds until all K are sent (log)",
            "dispatch_s",
            partial=True,
        ),
        draw(
            "compare-startup.png",
            "Startup: scheduler construction + first tick()",
            "seconds (log)",
            "startup_s",
        ),
    ]


def live_plot(data: dict[str, Any], folder: str, subjects: Sequence[Subject], note: str) -> str:
    """Draw the Redis-broker figures (dispatch, lateness, edit) side by side as bars."""
    import matplotlib.pyplot as plt

    settings = data.get("live_settings", {})
    env = data.get("live_environment", {})
    note = f"PostgreSQL {env.get('PostgreSQL')} / Redis {env.get('Redis')}, {env.get('date')}"

    def seconds(field: str) -> Callable[[dict[str, Any]], float | None]:
        return lambda p: None if p.get(field) is None else p[field] / 1e3

    # (phase, title, bar, tick or None, whether the bar is only a lower bound)
    panels: tuple[Any, ...] = (
        (
            "dispatch",
            f"{settings.get('dispatch_tasks', 0):,} tasks due at once\n(s until all published)",
            lambda p: p.get("dispatch_s") or p.get("dispatch_elapsed_s"),
            None,
            lambda p: p.get("dispatch_s") is None,
        ),
        (
            "lateness",
            f"lateness, {settings.get('late_tasks', 0):,} tasks over "
            f"{settings.get('late_window_s', 0):.0f} s\n(s after the fire time: p50 bar, p99 tick)",
            seconds("late_p50_ms"),
            seconds("late_p99_ms"),
            lambda p: p.get("status") != "ok",
        ),
        (
            "edit",
            "edit seen\n(s from commit to publish: p50 bar, max tick)",
            seconds("edit_p50_ms"),
            seconds("edit_max_ms"),
            lambda p: p.get("status") != "ok",
        ),
    )
    shown = [s for s in subjects if any(p["scheduler"] == s.key for p in data["live"])]
    fig, axes = plt.subplots(1, 3, figsize=(13, 0.55 * len(shown) + 2.2), dpi=110, sharey=True)
    for ax, (phase, title, bar, tick, partial) in zip(axes, panels, strict=True):
        for row, subject in enumerate(shown):
            point = next(
                (p for p in data["live"] if p["scheduler"] == subject.key and p["phase"] == phase),
                None,
            )
            v = None if point is None else bar(point)
            if v is None or point is None:
                continue
            lower = partial(point)
            ax.barh(row, v, color=subject.color, hatch="//" if lower else None, edgecolor="white")
            w = None if tick is None else tick(point)
            if w is not None:
                ax.plot([w], [row], marker="|", color="black", ms=14)
            text = f"> {v:.0f} s" if lower else f"{v:.3g}" + ("" if w is None else f" / {w:.3g}")
            ax.annotate(
                text, (max(v, w or 0), row), xytext=(6, -3), textcoords="offset points", fontsize=8
            )
        ax.set_xscale("log")
        ax.set_title(title, fontsize=9.5)
        ax.grid(True, axis="x", which="major", alpha=0.4)
        ax.margins(x=0.25)
    axes[0].set_yticks(range(len(shown)), [s.label for s in shown])
    axes[0].invert_yaxis()
    fig.text(0.99, 0.01, note, ha="right", va="bottom", fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = os.path.join(folder, "compare-live.png")
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path
