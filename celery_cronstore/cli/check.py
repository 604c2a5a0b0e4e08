"""``cronstore check``: what beat would refuse, found in CI without starting beat.

``check [--beat-schedule/--no-beat-schedule] [--file FILE ...] [--rows/--no-rows]``
validates the app's ``beat_schedule`` entries, files for ``apply`` (read as complete
definitions, calendars included, against an empty store) and the stored rows (timer,
registered task, args that fit), and prints one line per problem (``where: name:
problem``) and a summary.

Exit status: 0 clean; 1 problems found (or ``--rows`` and the store unreachable); 2 a
``--file`` that cannot be read or is not a cronstore file (the other checks still run).
By default the rows are checked only when the store is reachable; a SQLite file that
does not exist is not opened (so not created).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import sqlalchemy as sa

from celery_cronstore import fields
from celery_cronstore.adopt import document
from celery_cronstore.adopt.calendars import CalendarChange
from celery_cronstore.adopt.plan import make_plan
from celery_cronstore.beat.schedule_sync import entry_policies, timer_from_entry
from celery_cronstore.catalog import TaskCatalog
from celery_cronstore.cli.adopt import task_check
from celery_cronstore.cli.base import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    Command,
    emit_json,
    get_app,
    get_settings,
    get_store,
)
from celery_cronstore.cli.files import CONFIG_SOURCE, FILE_SOURCE
from celery_cronstore.cli.group import cronstore
from celery_cronstore.config import Config
from celery_cronstore.errors import CronstoreError
from celery_cronstore.records import PeriodicTask
from celery_cronstore.timers import parse_timer

__all__ = ["check"]


@dataclass(frozen=True)
class Problem:
    """One thing beat would refuse: where it is, whose it is, and what is wrong."""

    where: str
    name: str
    problem: str

    def line(self) -> str:
        return f"{self.where}: {self.name}: {self.problem}"


def _field_problems(values: Mapping[str, Any]) -> Iterator[str]:
    """Yield what the field table refuses in ``values`` (field name -> value)."""
    table = fields.by_name()
    for key, value in values.items():
        try:
            table[key].check(value)
        except ValueError as exc:
            yield str(exc)


def _entry_problems(name: Any, entry: Any, zone: str, catalog: TaskCatalog) -> Iterator[str]:
    """Yield why beat would not store or send one ``beat_schedule`` entry."""
    if not isinstance(name, str) or not name.strip():
        yield f"the entry name must be non-empty text, got {name!r}"
        return
    yield from _field_problems({"name": name})
    if not isinstance(entry, Mapping):
        yield f"must be a mapping with 'task' and 'schedule', got {type(entry).__name__}"
        return
    for key in ("task", "schedule"):
        if key not in entry:
            yield f"has no {key!r}: give it one"
    if "schedule" in entry:
        try:
            timer_from_entry(name, entry["schedule"], zone)
        except (ValueError, CronstoreError) as exc:
            yield str(exc).removeprefix(f"beat_schedule entry {name!r}: ")
    values: dict[str, Any] = {
        "task": entry.get("task"),
        "args": entry.get("args") or [],
        "kwargs": entry.get("kwargs") or {},
        "options": entry.get("options") or {},
    }
    if "task" not in entry:
        del values["task"]
    policies = entry.get("cronstore") or {}
    if not isinstance(policies, Mapping):
        yield f"'cronstore' must be a mapping of policies, got {type(policies).__name__}"
        policies = {}
    known = entry_policies()
    unknown = sorted(str(k) for k in policies if k not in known)
    if unknown:
        yield f"unknown 'cronstore' key(s) {', '.join(unknown)} (known: {', '.join(known)})"
    problems = list(_field_problems({**values, **{k: policies[k] for k in known if k in policies}}))
    yield from problems
    if problems or not isinstance(values.get("task"), str):
        return
    refused = catalog.registered(values["task"])
    if refused is not None:
        yield refused
    call = catalog.call_problem(values["task"], values["args"], values["kwargs"])
    if call is not None:  # the fix is in the entry, not a stored row
        yield call.replace("fix them with cronstore edit --args/--kwargs", "fix the entry's")


def _beat_schedule(app: Any, catalog: TaskCatalog) -> tuple[list[Problem], list[str]]:
    """Return the problems of the app's ``beat_schedule`` and the entry names."""
    schedule = app.conf.beat_schedule or {}
    if not isinstance(schedule, Mapping):
        return [Problem("beat_schedule", "-", "must be a mapping of entries")], []
    zone = str(app.conf.timezone or "UTC")  # as beat reads it (schedule_sync)
    problems = [
        Problem("beat_schedule", str(name), text)
        for name, entry in schedule.items()
        for text in _entry_problems(name, entry, zone, catalog)
    ]
    return problems, [str(name) for name in schedule]


def _file(path: str, app: Any, zone: str) -> tuple[list[Problem], str]:
    """Return the problems ``apply`` would refuse in the file at ``path``, and what it holds.

    Checked as complete definitions (as ``export`` writes them): against an empty store,
    so an entry leaving out a required field (``task``, ``timer``), or naming a calendar
    the file does not carry, is a problem; its calendars are checked as ``apply`` checks
    them (a bad one, and every task naming it, is a problem).
    """
    read = document.parse_document(document.load_file(path), path)
    plan = make_plan(
        read.tasks,
        {},
        source=FILE_SOURCE,
        default_tz=zone,
        check_task=task_check(app, force=False, verb="applies"),
        manage_all=True,
        calendars=read.calendars,
        stored_calendars={},
    )
    problems = [
        Problem(f"file {path}", c.label if isinstance(c, CalendarChange) else c.name, c.reason)
        for c in plan.refused
    ]
    held = f"{len(read.tasks)} task(s)"
    if read.calendars is not None:
        held += f", {len(read.calendars)} calendar(s)"
    return problems, held


def _row_problems(task: PeriodicTask, catalog: TaskCatalog) -> Iterator[str]:
    """Yield why beat cannot fire a stored row as it is."""
    try:
        parse_timer(task.timer, kind=task.timer_kind, tz=task.tz)
    except (ValueError, CronstoreError) as exc:
        yield f"timer {task.timer!r} does not parse ({exc}): fix it with cronstore edit --timer"
    refused = catalog.registered(task.task)
    if refused is not None:
        yield refused
    call = catalog.call_problem(task.task, task.args, task.kwargs)
    if call is not None:
        yield call


def _no_sqlite_file(url: str) -> str | None:
    """Return why a SQLite store is not there (its file does not exist), else ``None``;
    opening it would create an empty file."""
    parsed = sa.engine.make_url(url)
    path = parsed.database
    if parsed.get_backend_name() != "sqlite" or not path or path == ":memory:":
        return None
    if path.startswith("file:") or Path(path).exists():
        return None
    return f"the SQLite file {path} does not exist"


def _stored(
    ctx: click.Context, app: Any, rows: bool | None
) -> tuple[list[PeriodicTask] | None, str | None]:
    """Return the stored tasks, or ``None`` and why the rows are not checked."""
    if rows is False:
        return None, "--no-rows"
    if rows is None:
        missing = _no_sqlite_file(Config.from_app(app).url)
        if missing is not None:
            return None, missing
        try:
            return get_store(ctx).list(), None
        except (CronstoreError, OSError, ImportError) as exc:
            text = str(exc).strip().splitlines()
            return None, f"the store is not reachable ({text[0] if text else type(exc).__name__})"
    return get_store(ctx).list(), None  # --rows: an unreachable store is an error (exit 1)


@cronstore.command(cls=Command)
@click.option(
    "--beat-schedule/--no-beat-schedule",
    default=True,
    help="Check the app's beat_schedule entries (default: yes).",
)
@click.option(
    "--file",
    "files",
    multiple=True,
    metavar="FILE",
    help="Check FILE as `apply` would read it (complete definitions); repeatable.",
)
@click.option(
    "--rows/--no-rows",
    default=None,
    help="Check the stored rows (default: when the store is reachable; --rows fails if it is not).",
)
@click.pass_context
def check(ctx: click.Context, beat_schedule: bool, files: Sequence[str], rows: bool | None) -> None:
    """Check, without starting beat, what beat would refuse: beat_schedule entries, files
    for `apply`, stored rows (timer, task registered, args fit).

    Prints one line per problem (`WHERE: NAME: PROBLEM`) and a summary. Exit status 0
    clean, 1 problems found, 2 bad input (a FILE that cannot be read or is not a cronstore
    file).
    """
    app = get_app(ctx)
    config = Config.from_app(app)
    catalog = TaskCatalog(app, config=config)
    problems: list[Problem] = []
    checked: list[str] = []
    bad_input = False
    names: list[str] = []
    if beat_schedule:
        found, names = _beat_schedule(app, catalog)
        problems += found
        checked.append(f"{len(names)} beat_schedule entry(ies)")
    for path in files:
        try:
            found, count = _file(path, app, config.zone(app))
        except ValueError as exc:
            bad_input = True
            problems.append(Problem(f"file {path}", "-", str(exc)))
            continue
        problems += found
        checked.append(f"{path} ({count})")
    stored, skipped = _stored(ctx, app, rows)
    if stored is not None:
        by_name = {task.name: task for task in stored}
        for task in stored:
            row = list(_row_problems(task, catalog))
            if not row and task.error:
                row = [f"beat put it in error: {task.error}"]
            problems += [Problem("row", task.name, text) for text in row]
        problems += _shadowed(names, by_name)
        checked.append(f"{len(stored)} stored row(s)")
    _print_check(ctx, problems, checked, skipped)
    if bad_input:
        ctx.exit(EXIT_BAD_INPUT)
    if problems:
        ctx.exit(EXIT_FAILED)


def _shadowed(names: Sequence[str], stored: Mapping[str, PeriodicTask]) -> list[Problem]:
    """Return the ``beat_schedule`` entries a stored task of another source shadows."""
    return [
        Problem(
            "beat_schedule",
            name,
            f"a stored task of source {stored[name].source!r} has this name: beat leaves it "
            "alone and this entry never runs: rename one of them",
        )
        for name in names
        if name in stored and stored[name].source != CONFIG_SOURCE
    ]


def _print_check(
    ctx: click.Context, problems: list[Problem], checked: list[str], skipped: str | None
) -> None:
    if get_settings(ctx).as_json:
        emit_json(
            {
                "ok": not problems,
                "checked": checked,
                "rows_skipped": skipped,
                "problems": [dataclasses.asdict(p) for p in problems],
            }
        )
        return
    for problem in problems:
        click.echo(problem.line())
    if skipped is not None and skipped != "--no-rows":
        click.echo(f"rows not checked: {skipped} (--no-rows skips them quietly)")
    what = ", ".join(checked) or "nothing"
    verdict = f"{len(problems)} problem(s)" if problems else "no problems"
    click.echo(f"checked {what}: {verdict}")
