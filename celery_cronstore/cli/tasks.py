"""The commands that define periodic tasks: list, show, add, edit, remove, enable, disable,
remove-owned-by (see ``docs/cli.md``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from celery_cronstore import fields
from celery_cronstore.cli.base import (
    BadInputError,
    Command,
    emit_json,
    fmt_time,
    get_settings,
    get_store,
    table,
    to_json,
)
from celery_cronstore.cli.group import cronstore
from celery_cronstore.store import PeriodicTask

__all__ = [
    "add",
    "definition_options",
    "disable",
    "edit",
    "enable",
    "list_",
    "remove",
    "remove_owned_by",
    "show",
]

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


#: What an empty value of an optional field converts to: "set it to None" (``edit
#: --tolerance ''``), unlike an option not given at all (``None``).
CLEAR = object()


class FieldType(_ParamType):
    """The value of one field of :mod:`celery_cronstore.fields`, parsed and checked there
    (so a bad value gets the message every other window gives)."""

    def __init__(self, spec: fields.Field) -> None:
        self.spec = spec
        self.name = spec.metavar

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            if not isinstance(value, str):
                return self.spec.check(value)
            parsed = self.spec.parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return CLEAR if parsed is None else parsed


OWNER = OwnerType()


def definition_options(*, edit: bool) -> list[click.Option]:
    """Return the options ``add`` (``edit``: all optional) builds from the field table.

    Read at call time (the commands call it for every invocation and ``--help``): a field
    added to :mod:`celery_cronstore.fields` is an option here too.
    """
    options: list[click.Option] = []
    for spec in fields.table():
        if spec.name in ("name", "enabled"):
            continue
        options.append(
            click.Option(
                [spec.flag, spec.name],
                type=FieldType(spec),
                metavar=spec.metavar,
                required=spec.required and not edit,
                help=spec.help,
            )
        )
        if spec.name == "options":
            options.append(
                click.Option(["--queue"], help="Queue to send to (the task's options.queue).")
            )
    options.append(
        click.Option(
            ["--force"],
            is_flag=True,
            help="Store it even if beat would refuse it (a task this app does not register, "
            "a one-off instant already past).",
        )
    )
    if edit:
        options.append(
            click.Option(["--enabled/--disabled", "enabled"], default=None, help="Enable/disable.")
        )
    else:
        options.append(click.Option(["--disabled"], is_flag=True, help="Add it disabled."))
    return options


class DefinitionCommand(Command):
    """``add`` or ``edit``: its options come from the field table when it runs."""

    params: list[click.Parameter]

    def __init__(self, *args: Any, edit: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.edit = edit
        fixed: list[click.Parameter] = list(self.params)
        self.fixed = fixed

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        self.params = [*self.fixed, *definition_options(edit=self.edit)]
        params: list[click.Parameter] = super().get_params(ctx)
        return params


def _changes(values: dict[str, Any]) -> dict[str, Any]:
    """Map the field options to :meth:`Store.add`/``update`` keywords (only those given)."""
    skip = {"queue", "disabled", "force"}
    return {
        key: None if value is CLEAR else value
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


@cronstore.command(cls=DefinitionCommand)
@click.argument("name")
@click.pass_context
def add(ctx: click.Context, /, name: str, **values: Any) -> None:
    """Add a periodic task (the timer is validated before anything is written)."""
    store = get_store(ctx)
    queue, disabled = values.pop("queue", None), values.pop("disabled", False)
    changes = _changes(values)
    if queue is not None:
        changes["options"] = {**changes.get("options", {}), "queue": queue}
    with _forceable():
        record = store.add(
            name, enabled=not disabled, source="cli", force=bool(values.get("force")), **changes
        )
    _report(ctx, "added", record)


@cronstore.command(cls=DefinitionCommand, edit=True)
@click.argument("name")
@click.pass_context
def edit(ctx: click.Context, /, name: str, **values: Any) -> None:
    """Change fields of a periodic task (only the options given)."""
    store = get_store(ctx)
    queue = values.pop("queue", None)
    changes = _changes(values)
    if queue is not None:
        base = changes.get("options", store.get(name).options)
        changes["options"] = {**base, "queue": queue}
    if not changes:
        raise BadInputError("nothing to change: give at least one option")
    with _forceable():
        record = store.update(name, force=bool(values.get("force")), **changes)
    _report(ctx, "updated", record)


@contextmanager
def _forceable() -> Iterator[None]:
    """Turn a refusal ``--force`` overrides into bad input that says so."""
    try:
        yield
    except fields.ForceableError as exc:
        raise BadInputError(f"{exc}, or give --force") from None


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
