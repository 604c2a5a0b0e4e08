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
    get_app,
    get_settings,
    get_store,
    table,
    to_json,
    zone_name,
)
from celery_cronstore.cli.group import cronstore
from celery_cronstore.config import Config
from celery_cronstore.policy.outcomes import TaskHealth, health
from celery_cronstore.store import PeriodicTask
from celery_cronstore.store.outcomes import look_health
from celery_cronstore.timers import shown_zone

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
                [spec.flag, *spec.aliases, spec.name],
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
    zone = shown_zone(task.timer_kind, task.tz)  # None: no effect on it (an interval)
    if zone is None or zone == "UTC" or task.timer.endswith(f" {zone}"):  # or it names it
        return task.timer
    return f"{task.timer} ({zone})"


def _health(ctx: click.Context, ids: list[int]) -> dict[int, tuple[str | None, TaskHealth]]:
    """Return each task's newest state and health (one statement per 500 tasks)."""
    grace = Config.from_app(get_app(ctx)).misfire_grace
    now, found = look_health(get_store(ctx).db, ids)
    return {i: (f.newest_state, health(f.facts, now, grace=grace)) for i, f in found.items()}


def _health_json(h: TaskHealth) -> dict[str, Any]:
    return {
        "consecutive_failures": h.consecutive_failures,
        "failures_at_least": h.at_least,
        "failing": h.failing,
        "last_success": to_json(h.last_success),
        "late_by": h.late_by,
        "overdue": h.overdue,
    }


def _late_text(h: TaskHealth) -> str:
    if h.late_by is None:
        return "-"
    return f"{h.late_by:.1f}s" + (" (next run not claimed)" if h.overdue else "")


@cronstore.command(name="list", cls=Command)
@click.option("--owner", type=OWNER, help="Only tasks of this owner (TYPE:ID).")
@click.option("--enabled/--disabled", "enabled", default=None, help="Only enabled/disabled.")
@click.option("--task", help="Only tasks sending this Celery task.")
@click.option(
    "--failing/--not-failing",
    "failing",
    default=None,
    help="Only tasks whose newest finished fire ended badly (or only the others).",
)
@click.pass_context
def list_(
    ctx: click.Context,
    owner: tuple[str, str] | None,
    enabled: bool | None,
    task: str | None,
    failing: bool | None,
) -> None:
    """List periodic tasks: name, timer, next run, last run, last state, failures in a
    row, last success, late by."""
    store = get_store(ctx)
    settings = get_settings(ctx)
    tasks = store.list(owner=owner, enabled=enabled, task=task)
    healths = _health(ctx, [t.id for t in tasks])
    if failing is not None:
        tasks = [t for t in tasks if t.id in healths and healths[t.id][1].failing == failing]
    if settings.as_json:
        emit_json(
            [
                {**to_json(t), "last_state": healths[t.id][0], **_health_json(healths[t.id][1])}
                for t in tasks
            ]
        )
        return
    if not tasks:
        click.echo("(no periodic tasks)")
        return
    rows = []
    for t in tasks:
        next_run = fmt_time(t.next_run, settings.zone) if t.enabled else "disabled"
        if t.enabled and t.paused_at is not None:
            next_run = "paused" + (f" to {next_run}" if t.paused_until else "")
        newest, h = healths[t.id]
        state = "error" if t.error else newest or "-"
        last_run = fmt_time(t.last_run, settings.zone)
        success = fmt_time(h.last_success, settings.zone)
        health_cells = (h.failures_text, success, _late_text(h))
        rows.append((t.name, _timer_text(t), next_run, last_run, state, *health_cells))
    zone = zone_name(settings.zone)
    headers = ("name", "timer", f"next run ({zone})", f"last run ({zone})", "last state")
    table((*headers, "failures", f"last success ({zone})", "late by"), rows)


_SHOW_FIELDS = [f.name for f in dataclasses.fields(PeriodicTask) if f.name != "id"]


@cronstore.command(cls=Command)
@click.argument("name")
@click.pass_context
def show(ctx: click.Context, name: str) -> None:
    """Show every field of one periodic task, its last outcome and its health."""
    store = get_store(ctx)
    settings = get_settings(ctx)
    record = store.get(name)
    status = store.status(name)
    h = _health(ctx, [record.id])[record.id][1]
    if settings.as_json:
        emit_json({**to_json(record), "status": to_json(status), "health": _health_json(h)})
        return
    for key in _SHOW_FIELDS:
        value = getattr(record, key)
        if isinstance(value, datetime) or (value is None and key.endswith(("_run", "_fire"))):
            text = fmt_time(value, settings.zone)
        elif isinstance(value, (list, dict)):
            text = json.dumps(value, ensure_ascii=False)
        elif key == "tz" and shown_zone(record.timer_kind, record.tz) is None:
            text = "- (no effect on an interval)"
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
    click.echo(f"{'last success:':<17}{fmt_time(h.last_success, settings.zone)}")
    click.echo(f"{'failures in row:':<17}{h.failures_text}")
    click.echo(f"{'late by:':<17}{_late_text(h)}")


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
