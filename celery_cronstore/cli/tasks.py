"""The commands that define periodic tasks: list, show, add, edit, remove, enable, disable,
remove-owned-by (see ``docs/cli.md``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click

from celery_cronstore.cli.base import (
    BadInputError,
    Command,
    emit_json,
    fmt_time,
    get_app,
    get_settings,
    get_store,
    table,
    to_json,
)
from celery_cronstore.cli.group import cronstore
from celery_cronstore.config import Config
from celery_cronstore.records import ABANDON_POLICIES, MISFIRE_POLICIES, OVERLAP_POLICIES
from celery_cronstore.store import PeriodicTask, Store
from celery_cronstore.timers import KINDS, parse_timer

__all__ = ["add", "disable", "edit", "enable", "list_", "remove", "remove_owned_by", "show"]

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:
    _ParamType = click.ParamType[Any]
else:  # click < 8.2 has no generic ParamType at run time
    _ParamType = click.ParamType


# -- parameter types ------------------------------------------------------------------------


class OwnerType(_ParamType):
    """``TYPE:ID`` -> ``(type, id)``."""

    name = "TYPE:ID"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        owner_type, sep, owner_id = str(value).partition(":")
        if not sep or not owner_type or not owner_id:
            self.fail(f"expected TYPE:ID (e.g. tenant:42), got {value!r}", param, ctx)
        return (owner_type, owner_id)


class JsonType(_ParamType):
    """A JSON document of one top-level type (``list`` or ``dict``)."""

    def __init__(self, want: type) -> None:
        self.want = want
        self.name = "JSON array" if want is list else "JSON object"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, self.want):
            return value
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            self.fail(f"not valid JSON ({exc}): {value!r}", param, ctx)
        if not isinstance(parsed, self.want):
            self.fail(f"must be a {self.name}, got {value!r}", param, ctx)
        return parsed


OWNER = OwnerType()
JSON_LIST = JsonType(list)
JSON_DICT = JsonType(dict)


def _definition_options(*, edit: bool) -> Callable[[F], F]:
    """The options ``add`` and ``edit`` share (all optional for ``edit``)."""
    options = [
        click.option("--task", "task", required=not edit, help="Celery task name to send."),
        click.option("--timer", required=not edit, help="Timer expression."),
        click.option("--kind", type=click.Choice(KINDS), help="Timer kind (detected if omitted)."),
        click.option(
            "--tz",
            help="Time zone the timer is read in (default: cronstore_default_tz, else the "
            "app's timezone, else UTC).",
        ),
        click.option("--args", "args_", type=JSON_LIST, help="Positional arguments (JSON array)."),
        click.option("--kwargs", "kwargs_", type=JSON_DICT, help="Keyword arguments (JSON)."),
        click.option("--queue", help="Queue to send to (the task's options.queue)."),
        click.option("--owner", type=OWNER, help="Owner as TYPE:ID."),
        click.option("--description", help="Free text shown by `show`."),
        click.option("--misfire-policy", type=click.Choice(MISFIRE_POLICIES)),
        click.option(
            "--start-deadline", type=click.FloatRange(min=0), help="Seconds late a fire may start."
        ),
        click.option("--overlap-policy", type=click.Choice(OVERLAP_POLICIES)),
        click.option(
            "--abandon-policy",
            type=click.Choice(ABANDON_POLICIES),
            help="A started fire whose worker went silent: leave it abandoned (default), or "
            "rerun it once under the same task id.",
        ),
        click.option(
            "--force",
            is_flag=True,
            help="Store it even if beat would refuse it (a task this app does not register, "
            "a one-off instant already past).",
        ),
    ]
    if edit:
        options.append(
            click.option("--enabled/--disabled", "enabled", default=None, help="Enable/disable.")
        )
    else:
        options.append(click.option("--disabled", is_flag=True, help="Add it disabled."))

    def decorate(fn: F) -> F:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


def _changes(values: dict[str, Any]) -> dict[str, Any]:
    """Map the shared options to :meth:`Store.add`/``update`` keywords (only those given)."""
    renamed = {"args_": "args", "kwargs_": "kwargs"}
    skip = {"queue", "disabled", "force"}
    return {
        renamed.get(key, key): value
        for key, value in values.items()
        if value is not None and key not in skip
    }


def _timer_text(task: PeriodicTask) -> str:
    if task.tz == "UTC" or task.timer.endswith(f" {task.tz}"):  # a zone the timer names
        return task.timer
    return f"{task.timer} ({task.tz})"


@cronstore.command(name="list", cls=Command)
@click.option("--owner", type=OWNER, help="Only tasks of this owner (TYPE:ID).")
@click.option("--enabled/--disabled", "enabled", default=None, help="Only enabled/disabled.")
@click.option("--task", help="Only tasks sending this Celery task.")
@click.pass_context
def list_(
    ctx: click.Context, owner: tuple[str, str] | None, enabled: bool | None, task: str | None
) -> None:
    """List periodic tasks: name, timer, next run, last run, last state."""
    store = get_store(ctx)
    settings = get_settings(ctx)
    tasks = store.list(owner=owner, enabled=enabled, task=task)
    states = {}
    for record in tasks:
        newest = store.history(record.name, limit=1)
        states[record.name] = newest[0].state if newest else None
    if settings.as_json:
        emit_json([{**to_json(t), "last_state": states[t.name]} for t in tasks])
        return
    if not tasks:
        click.echo("(no periodic tasks)")
        return
    rows = []
    for t in tasks:
        next_run = fmt_time(t.next_run, settings.zone) if t.enabled else "disabled"
        state = "error" if t.error else states[t.name] or "-"
        rows.append((t.name, _timer_text(t), next_run, fmt_time(t.last_run, settings.zone), state))
    table(("name", "timer", "next run", "last run", "last state"), rows)


_SHOW_FIELDS = [f.name for f in dataclasses.fields(PeriodicTask) if f.name != "id"]


@cronstore.command(cls=Command)
@click.argument("name")
@click.pass_context
def show(ctx: click.Context, name: str) -> None:
    """Show every field of one periodic task and its last outcome."""
    store = get_store(ctx)
    settings = get_settings(ctx)
    record = store.get(name)
    status = store.status(name)
    if settings.as_json:
        emit_json({**to_json(record), "status": to_json(status)})
        return
    for key in _SHOW_FIELDS:
        value = getattr(record, key)
        if isinstance(value, datetime) or (value is None and key.endswith(("_run", "_fire"))):
            text = fmt_time(value, settings.zone)
        elif isinstance(value, (list, dict)):
            text = json.dumps(value, ensure_ascii=False)
        else:
            text = "-" if value is None or value == "" else str(value)
        click.echo(f"{key + ':':<17}{text}")
    click.echo(f"{'last state:':<17}{status.state or '-'}")
    if status.fire_time is not None:
        click.echo(f"{'last fire time:':<17}{fmt_time(status.fire_time, settings.zone)}")
        click.echo(f"{'last outcome at:':<17}{fmt_time(status.at, settings.zone)}")
        click.echo(f"{'last node:':<17}{status.node or '-'}")
        if status.reason:
            click.echo(f"{'last reason:':<17}{status.reason}")


@cronstore.command(cls=Command)
@click.argument("name")
@_definition_options(edit=False)
@click.pass_context
def add(ctx: click.Context, /, name: str, queue: str | None, disabled: bool, **values: Any) -> None:
    """Add a periodic task (the timer is validated before anything is written)."""
    store = get_store(ctx)
    changes = _changes(values)
    if not values.get("force"):
        _refuse_surprises(ctx, store, changes)
    if queue is not None:
        changes["options"] = {"queue": queue}
    record = store.add(name, enabled=not disabled, source="cli", **changes)
    _report(ctx, "added", record)


@cronstore.command(cls=Command)
@click.argument("name")
@_definition_options(edit=True)
@click.pass_context
def edit(ctx: click.Context, /, name: str, queue: str | None, **values: Any) -> None:
    """Change fields of a periodic task (only the options given)."""
    store = get_store(ctx)
    changes = _changes(values)
    if not values.get("force"):
        _refuse_surprises(ctx, store, changes)
    if queue is not None:
        changes["options"] = {**store.get(name).options, "queue": queue}
    if not changes:
        raise BadInputError("nothing to change: give at least one option")
    _report(ctx, "updated", store.update(name, **changes))


def _refuse_surprises(ctx: click.Context, store: Store, changes: dict[str, Any]) -> None:
    """Refuse what the store would take but beat would not run as the user expects."""
    app = get_app(ctx)
    task = changes.get("task")
    if task is not None and Config.from_app(app).require_registered and task not in app.tasks:
        raise BadInputError(
            f"task {task!r} is not registered in app {app.main!r}: beat would put the row in "
            "error. Import the task's module in the app (or fix the name), or give --force"
        )
    if changes.get("timer") is None:
        return
    timer = parse_timer(
        changes["timer"], kind=changes.get("kind"), tz=changes.get("tz") or store.default_tz
    )
    if timer.kind == "once" and timer.next_after(store.now()) is None:
        raise BadInputError(
            f"the one-off instant {timer} is already past: it would fire at once, late. "
            "Give a future instant, or --force"
        )


def _report(ctx: click.Context, verb: str, record: PeriodicTask) -> None:
    settings = get_settings(ctx)
    if settings.as_json:
        emit_json(record)
        return
    state = f"next run {fmt_time(record.next_run, settings.zone)}" if record.enabled else "disabled"
    click.echo(f"{verb} {record.name}: {record.task} on {_timer_text(record)}, {state}")


@cronstore.command(cls=Command)
@click.argument("name")
@click.pass_context
def remove(ctx: click.Context, name: str) -> None:
    """Remove a periodic task and its fire ledger."""
    get_store(ctx).remove(name)
    if get_settings(ctx).as_json:
        emit_json({"removed": name})
    else:
        click.echo(f"removed {name}")


@cronstore.command(cls=Command)
@click.argument("name")
@click.pass_context
def enable(ctx: click.Context, name: str) -> None:
    """Enable a periodic task (it fires from its next grid point after now)."""
    _report(ctx, "enabled", get_store(ctx).enable(name))


@cronstore.command(cls=Command)
@click.argument("name")
@click.pass_context
def disable(ctx: click.Context, name: str) -> None:
    """Disable a periodic task (no fire is claimed for it afterwards)."""
    _report(ctx, "disabled", get_store(ctx).disable(name))


@cronstore.command(name="remove-owned-by", cls=Command)
@click.argument("owner_type", metavar="TYPE")
@click.argument("owner_id", metavar="ID")
@click.pass_context
def remove_owned_by(ctx: click.Context, owner_type: str, owner_id: str) -> None:
    """Remove every periodic task of one owner."""
    count = get_store(ctx).remove_owned_by(owner_type, owner_id)
    if get_settings(ctx).as_json:
        emit_json({"owner_type": owner_type, "owner_id": owner_id, "removed": count})
    else:
        click.echo(f"removed {count} periodic task(s) owned by {owner_type}:{owner_id}")
