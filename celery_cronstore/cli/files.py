"""``cronstore export`` and ``apply``: the schedule as a file in git.

* ``export [--format json|yaml] [--output FILE]`` writes every task (every field, owner,
  policies, and a read-only ``state``) and every exclusion calendar in the format of
  :mod:`celery_cronstore.adopt.document`, sorted by name with sorted keys: the same store
  gives the same bytes, so a ``git diff`` of two exports shows only real changes.
* ``apply FILE [--dry-run] [--prune] [--force] [--json]`` makes the store what the file
  says, through the same plan as ``import`` (:func:`~celery_cronstore.adopt.plan.
  make_plan`, every task it names managed whatever its source; new ones get source
  ``file``). The file's calendars are written first, in the same transaction
  (:mod:`celery_cronstore.adopt.calendars`). ``export | apply`` changes nothing and
  writes nothing.
* ``check`` (:mod:`celery_cronstore.cli.check`) validates files for ``apply``, without
  starting beat.

Decisions:

* ``apply`` writes a file whole or not at all: if any entry is refused (a bad value, an
  unknown key, a task the app would not send) or conflicts, nothing is written (exit 1)
  and the report names each one. A file is a desired state; half of it applied is a state
  nobody described, and ``--prune`` against it would remove the wrong tasks.
* ``--prune`` removes the stored tasks the file does not name, **except** tasks with an
  owner (they belong to application entities: the application adds and removes them)
  and ``beat_schedule`` tasks (source ``config``: beat stores them from the app's
  setting at start, so removing them here would not last); and, only when the file has a
  ``calendars`` key, the stored calendars it does not list that no task names once it is
  applied (a file without the key leaves calendars alone). The report (and the dry run)
  lists each removal.
* a ``beat_schedule`` task is the app's setting's: ``apply`` may disable it or set its
  owner (beat leaves those alone), but a change of a field beat stores from the entry
  (the task, its arguments, timer, policies) is a conflict naming the entry to edit,
  because beat would undo it at its next start.

Exit status: 0 done (or clean, for ``check``); 1 something was refused or conflicts
(``apply``: nothing written), or ``check`` found problems; 2 bad input: a file that
cannot be read or is not a cronstore file (nothing is written, nothing else checked).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import click

from celery_cronstore import fields
from celery_cronstore.adopt import document
from celery_cronstore.adopt.plan import Change, Plan, make_plan
from celery_cronstore.cli.adopt import report, task_check
from celery_cronstore.cli.base import (
    BadInputError,
    Command,
    get_app,
    get_store,
)
from celery_cronstore.cli.group import cronstore
from celery_cronstore.config import Config
from celery_cronstore.records import PeriodicTask

__all__ = ["CONFIG_SOURCE", "FILE_SOURCE", "apply", "export", "prunable"]

#: The ``source`` of tasks ``apply`` creates.
FILE_SOURCE = "file"
#: The ``source`` of tasks beat stores from ``beat_schedule``.
CONFIG_SOURCE = "config"
#: Read the file from standard input (``export | apply -``).
STDIN = "-"


def prunable(task: PeriodicTask) -> bool:
    """Whether ``apply --prune`` may remove a stored task the file does not name: not one
    with an owner (the application's), not a ``beat_schedule`` one (beat's)."""
    return task.owner_type is None and task.source != CONFIG_SOURCE


# -- export ---------------------------------------------------------------------------------


@cronstore.command(cls=Command)
@click.option(
    "--format",
    "format_",
    type=click.Choice(document.FORMATS),
    help="json or yaml (YAML needs celery-cronstore[yaml]). Default: --output's extension, "
    "else json.",
)
@click.option(
    "--output",
    "-o",
    metavar="FILE",
    help="Write to FILE (replaced whole, never left half written) instead of standard output.",
)
@click.pass_context
def export(ctx: click.Context, format_: str | None, output: str | None) -> None:
    """Write every periodic task (fields, owners, policies, state) and every exclusion
    calendar as JSON or YAML, sorted by name with sorted keys, for `apply` and for git."""
    chosen = format_ or (document.format_of(output, "{") if output else "json")
    store = get_store(ctx)
    tasks = store.list()
    # The whole store: every calendar (not only the ones the tasks name), so that
    # ``apply --prune`` of the file removes no calendar the store has.
    calendars = store.calendars.texts()
    text = document.dump(document.export_document(tasks, calendars.values()), chosen)
    if output is None or output == STDIN:
        click.echo(text, nl=False)
        return
    _write(Path(output), text)
    click.echo(
        f"exported {len(tasks)} task(s) and {len(calendars)} calendar(s) to {output}", err=True
    )


def _write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` at once (a temporary file renamed over it): an
    export that fails half way leaves the previous file as it was."""
    temporary: str | None = None
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        reason = getattr(exc, "strerror", None) or exc
        raise BadInputError(f"cannot write {str(path)!r}: {reason}: give a writable path") from None


# -- apply ----------------------------------------------------------------------------------


def _read(path: str) -> document.Document:
    """Return the tasks and calendars of the file at ``path`` (``-``: standard input);
    exit 2 if it is not a cronstore file."""
    try:
        if path == STDIN:
            text = sys.stdin.read()
            data = document.load_text(text, document.format_of("", text), "standard input")
            return document.parse_document(data, "standard input")
        return document.parse_document(document.load_file(path), path)
    except ValueError as exc:
        raise BadInputError(str(exc)) from None


def _synced_fields() -> frozenset[str]:
    """Return the fields beat stores from a ``beat_schedule`` entry (read now)."""
    timer = {"task", "args", "kwargs", "options", "timer", "kind", "tz"}
    return frozenset(timer | {f.name for f in fields.entry_fields()})


def _for_apply(plan: Plan, current: Mapping[str, PeriodicTask], origin: str) -> Plan:
    """Return ``plan`` with apply's rules: a change beat would undo is a conflict; a
    removal says which file left it out."""
    synced = _synced_fields()
    changes: list[Change] = []
    for change in plan.changes:
        stored = current.get(change.name)
        if (
            change.action == "update"
            and stored is not None
            and stored.source == CONFIG_SOURCE
            and synced & set(change.fields)
        ):
            given = ", ".join(k for k in change.fields if k in synced)
            change = dataclasses.replace(
                change,
                action="conflict",
                fields={},
                incoming=None,
                reason=(
                    f"a beat_schedule task: beat stores its {given} from the app's "
                    "beat_schedule at start and would undo this: change the entry there, "
                    "or leave these fields as exported"
                ),
            )
        elif change.action == "remove":
            change = dataclasses.replace(change, reason=f"not in {origin} (--prune)")
        changes.append(change)
    calendars = tuple(
        dataclasses.replace(c, reason=f"not in {origin}, no task names it (--prune)")
        if c.action == "remove"
        else c
        for c in plan.calendars
    )
    return Plan(tuple(changes), calendars)


@cronstore.command(cls=Command)
@click.argument("file", metavar="FILE")
@click.option("--dry-run", is_flag=True, help="Print what would change; write nothing.")
@click.option(
    "--prune",
    is_flag=True,
    help="Also remove stored tasks the file does not name, except tasks with an owner "
    "and beat_schedule tasks; and, if the file has a calendars key, the calendars it does "
    "not list that no task names.",
)
@click.option("--force", is_flag=True, help="Apply tasks the app does not register too.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def apply(
    ctx: click.Context, file: str, dry_run: bool, prune: bool, force: bool, as_json: bool
) -> None:
    """Make the stored tasks and calendars what FILE (from `export`; - for standard input)
    says: all of it in one transaction, or nothing if any entry is refused.

    Prints one line per change (`no changes` when there is none). Exit status 0 done,
    1 an entry was refused or conflicts (nothing written), 2 FILE cannot be read or is
    not a cronstore file (nothing written).
    """
    app = get_app(ctx)
    read = _read(file)  # a bad file is refused before the store is opened
    store = get_store(ctx)
    current = {task.name: task for task in store.list()}
    plan = make_plan(
        read.tasks,
        current,
        source=FILE_SOURCE,
        default_tz=Config.from_app(app).zone(app),
        check_task=task_check(app, force=force, verb="applies"),
        manage_all=True,
        prune=prune,
        prunable=prunable,
        calendars=read.calendars,
        stored_calendars=store.calendars.texts(),
    )
    plan = _for_apply(plan, current, "standard input" if file == STDIN else file)
    held = None
    if plan.refused and not dry_run:
        held = (
            f"{len(plan.refused)} entry(ies) refused or in conflict, and apply writes a file "
            "whole or not at all: fix them (see above) and apply again"
        )
    done = None if dry_run or held else store.adopt(plan, source=FILE_SOURCE, window="apply")
    report(ctx, plan, done, as_json=as_json, unchanged=False, held=held)
