"""What bringing schedules in would change: one pure comparison for import and apply.

:func:`make_plan` takes what a source read (:class:`~celery_cronstore.adopt.records.Read`)
and the tasks stored now, validates each incoming task the way every other window does
(the field table of :mod:`celery_cronstore.fields`, :func:`~celery_cronstore.timers.
parse_timer`, and the app's task catalog when there is one), and returns a :class:`Plan`:
one :class:`Change` per name, in the order read. The store carries a plan out in one
transaction (:meth:`celery_cronstore.store.Store.adopt`); a dry run prints it.

Rules, the same for every source:

* a name not stored is **created**; a stored one of the same source (or any source, for
  ``apply``, which manages every task it names) is **updated** field by field (an import
  leaves alone what is scheduling state, not definition: ``enabled`` after the first
  import, an interval's origin, see :func:`_keep_scheduling_state`), or
  **unchanged**: a rerun changes nothing and fires nothing twice. A rerun whose source
  ran the task since (the old scheduler was still running) moves its ``last_fire``
  forward to that run, so that the fire is not sent here again;
* a stored task of another source is a **conflict**, left alone (``cronstore import``
  never overwrites a task it did not bring in);
* a row the source could not map, or whose values fail validation, is **refused**, with
  the reason; the rest still comes over; a name read twice is refused the second time;
* with ``prune``, stored tasks the source no longer names (among those ``prunable`` says
  may go) are **removed**;
* for ``apply`` and ``check`` (given the stored calendars), a file's exclusion calendars
  are planned too (:mod:`celery_cronstore.adopt.calendars`, :attr:`Plan.calendars`): a
  task naming a calendar the file refuses is **refused** with it, and a task whose new
  ``exclude`` names a calendar neither the file nor the store has is **refused**.

Only the fields an incoming task gives are compared: a field left out keeps its stored
value (or, for a new task, its default). What a stored task already is is never a reason
to refuse it: its timer is parsed again, and its task and arguments checked, only when
they change (a rerun, or ``export | apply``, of a row beat put in error changes nothing;
``cronstore check`` is what reports such rows).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from celery_cronstore import fields
from celery_cronstore.adopt import calendars as calendar_plan
from celery_cronstore.adopt.calendars import CalendarChange, FileCalendar
from celery_cronstore.adopt.records import (
    Incoming,
    Read,
    Refused,
    change_json,
    change_line,
    count_actions,
)
from celery_cronstore.errors import CronstoreError
from celery_cronstore.policy.exclusions import CalendarText
from celery_cronstore.records import PeriodicTask
from celery_cronstore.timers import parse_timer

__all__ = ["ACTIONS", "LAST_FIRE", "Change", "Plan", "make_plan"]

#: Every action a change can have, in the order a report lists their counts.
ACTIONS = ("create", "update", "unchanged", "remove", "conflict", "refuse")

#: ``(task name, args, kwargs) -> why beat would not send it, or None``.
TaskCheck = Callable[[str, list[Any], dict[str, Any]], "str | None"]

_TIMER = ("timer", "kind", "tz")

#: The pseudo-field of a change that moves a task's last fire forward (not a field of
#: :mod:`celery_cronstore.fields`: only an import writes it).
LAST_FIRE = "last_fire"


@dataclass(frozen=True)
class Change:
    """What happens to one name."""

    action: str
    name: str
    origin: str = ""
    #: Field -> (stored value, new value); for a create, every field given (old ``None``).
    fields: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    reason: str = ""
    #: The checked incoming task (create and update), values normalized.
    incoming: Incoming | None = None

    @property
    def writes(self) -> bool:
        """Whether carrying it out writes the store."""
        return self.action in ("create", "update", "remove")

    def line(self) -> str:
        """Return the one line a report prints for it."""
        timer = self.fields.get("timer", (None, ""))[1]
        return change_line(self.action, self.name, self.fields, self.reason, str(timer))

    def as_json(self) -> dict[str, Any]:
        """Return it as plain JSON data (``--json``)."""
        out = change_json(self.action, self.name, self.origin, self.fields, self.reason)
        if self.incoming is not None and self.incoming.notes:
            out["notes"] = list(self.incoming.notes)
        return out


@dataclass(frozen=True)
class Plan:
    """Every change, in the order read (removals last), and the calendars' changes (a
    file's, written before the tasks that name them)."""

    changes: tuple[Change, ...]
    calendars: tuple[CalendarChange, ...] = ()

    def counts(self) -> dict[str, int]:
        """Return how many task changes have each action (every action, zeros included)."""
        return count_actions((c.action for c in self.changes), ACTIONS)

    def calendar_counts(self) -> dict[str, int]:
        """Return how many calendar changes have each action (zeros included)."""
        return calendar_plan.counts(self.calendars)

    @property
    def writes(self) -> list[Change]:
        """Return the task changes that write the store."""
        return [c for c in self.changes if c.writes]

    @property
    def calendar_writes(self) -> list[CalendarChange]:
        """Return the calendar changes that write the store."""
        return [c for c in self.calendars if c.writes]

    @property
    def refused(self) -> list[Change | CalendarChange]:
        """Return the changes that did not go through (refusals and conflicts), the
        calendars' first."""
        refused: list[Change | CalendarChange] = [c for c in self.calendars if c.action == "refuse"]
        return refused + [c for c in self.changes if c.action in ("refuse", "conflict")]

    def as_json(self) -> dict[str, Any]:
        """Return the whole plan as plain JSON data."""
        return {
            "counts": self.counts(),
            "changes": [c.as_json() for c in self.changes],
            "calendars": {
                "counts": self.calendar_counts(),
                "changes": [c.as_json() for c in self.calendars],
            },
        }


def make_plan(
    reads: Sequence[Read],
    current: Mapping[str, PeriodicTask],
    *,
    source: str,
    default_tz: str,
    check_task: TaskCheck | None = None,
    manage_all: bool = False,
    prune: bool = False,
    prunable: Callable[[PeriodicTask], bool] | None = None,
    calendars: Sequence[FileCalendar] | None = None,
    stored_calendars: Mapping[str, CalendarText] | None = None,
) -> Plan:
    """Compare what a source read with the stored tasks; return the :class:`Plan`.

    ``source`` is the ``source`` tag imported tasks carry; only stored tasks with that tag
    are updated unless ``manage_all`` (``apply``). ``check_task`` says why beat would not
    send a task (not registered, args that do not fit). With ``prune``, stored tasks not
    read are removed if ``prunable`` says so (default: those with the ``source`` tag).

    With ``stored_calendars`` (the calendars stored now, by name) a file's ``calendars``
    (``None``: it has no such key) are planned as well, and each task's ``exclude`` is
    checked against them (:func:`~celery_cronstore.adopt.calendars.exclude_problem`);
    with ``prune`` and a ``calendars`` key, stored calendars the file does not list and no
    task names afterwards are removed. Without it (``import``) calendars are not planned.
    """
    changes: list[Change] = []
    named: set[str] = set()
    for read in reads:
        if read.name in named:
            changes.append(
                Change("refuse", read.name, read.origin, reason="read twice: the first one is kept")
            )
            continue
        named.add(read.name)
        if isinstance(read, Refused):
            changes.append(Change("refuse", read.name, read.origin, reason=read.reason))
            continue
        changes.append(
            _one(read, current.get(read.name), source, default_tz, check_task, manage_all)
        )
    if prune:
        keep = prunable or (lambda task: task.source == source)
        for name, task in current.items():
            if name not in named and keep(task):
                changes.append(Change("remove", name, reason="not in the source"))
    if stored_calendars is None:
        return Plan(tuple(changes))
    changes = _check_excludes(changes, current, calendars or (), stored_calendars)
    after = _named_after(changes, current)
    planned = calendar_plan.plan_calendars(calendars, stored_calendars, prune=prune, named=after)
    return Plan(tuple(changes), planned)


def _named_after(changes: Sequence[Change], current: Mapping[str, PeriodicTask]) -> set[str]:
    """Return the calendars the tasks name once ``changes`` are carried out."""
    excludes = {name: task.exclude for name, task in current.items()}
    for change in changes:
        if change.action == "remove":
            excludes.pop(change.name, None)
        elif change.action in ("create", "update") and change.incoming is not None:
            excludes[change.name] = change.incoming.values.get("exclude", excludes.get(change.name))
    return {name for text in excludes.values() for name in calendar_plan.names_in(text)}


def _check_excludes(
    changes: Sequence[Change],
    current: Mapping[str, PeriodicTask],
    calendars: Sequence[FileCalendar],
    stored: Mapping[str, CalendarText],
) -> list[Change]:
    """Return ``changes`` with the tasks refused whose ``exclude`` names a calendar the
    file refuses, or (a new ``exclude``) one that neither the file nor the store has."""
    good = {c.name for c in calendars if c.text is not None}
    refused = {c.name for c in calendars if c.text is None} - good
    known = good | set(stored)
    out: list[Change] = []
    for change in changes:
        incoming = change.incoming
        if incoming is None or change.action not in ("create", "update", "unchanged"):
            out.append(change)
            continue
        stored_task = current.get(change.name)
        if "exclude" in incoming.values:
            exclude = incoming.values["exclude"]
        else:
            exclude = stored_task.exclude if stored_task is not None else None
        # What a stored task already names is not refused for being what it is.
        new = change.action == "create" or "exclude" in change.fields
        problem = calendar_plan.exclude_problem(exclude, refused, known if new else None)
        if problem is not None:
            change = Change("refuse", change.name, change.origin, reason=problem)
        out.append(change)
    return out


def _one(
    read: Incoming,
    stored: PeriodicTask | None,
    source: str,
    default_tz: str,
    check_task: TaskCheck | None,
    manage_all: bool,
) -> Change:
    if stored is not None and not manage_all and stored.source != source:
        return Change(
            "conflict",
            read.name,
            read.origin,
            reason=(
                f"a task of that name exists already (source {stored.source!r}) and is left "
                "alone: rename one of them, or remove the stored one and import again"
            ),
        )
    try:
        values = _checked(read, stored, default_tz, check_task)
    except (ValueError, CronstoreError) as exc:
        return Change("refuse", read.name, read.origin, reason=str(exc))
    checked = Incoming(
        read.name,
        read.origin,
        values,
        last_run_at=read.last_run_at,
        total_run_count=read.total_run_count,
        start_at=read.start_at,
        notes=read.notes,
    )
    if stored is None:
        created = {k: (None, v) for k, v in values.items()}
        return Change("create", read.name, read.origin, created, incoming=checked)
    differ = {k: (old, v) for k, v in values.items() if (old := _stored(stored, k)) != v}
    if not manage_all:
        _keep_scheduling_state(stored, values, differ)
    ran = read.last_run_at
    if ran is not None and (stored.last_fire is None or ran > stored.last_fire):
        # The old scheduler ran it since it was imported (it was still running): carry
        # its last run over, so that this fire is not sent again here.
        differ[LAST_FIRE] = (stored.last_fire, ran)
    if differ:
        return Change("update", read.name, read.origin, differ, incoming=checked)
    return Change("unchanged", read.name, read.origin, incoming=checked)


def _keep_scheduling_state(
    stored: PeriodicTask, values: Mapping[str, Any], differ: dict[str, Any]
) -> None:
    """Drop from an import's update what the old scheduler's state, not its definition,
    changed since the first import.

    * ``enabled`` is taken once, at the first import: disabling the task in the old
      scheduler afterwards is how it is handed over (:mod:`celery_cronstore.store.peers`),
      and must not switch it off here (django-celery-beat also clears ``last_run_at``
      then). From then on it is switched on and off here.
    * an interval's origin follows the old scheduler's last run: the same period with
      another origin is the same task, still on the grid it came over with.
    """
    differ.pop("enabled", None)
    period = str(values.get("timer", "")).split(" from ")[0]
    same_grid = stored.timer_kind == "interval" == values.get("kind")
    if "timer" in differ and same_grid and stored.timer.split(" from ")[0] == period:
        for key in ("timer", "kind", "tz"):
            differ.pop(key, None)


def _checked(
    read: Incoming,
    stored: PeriodicTask | None,
    default_tz: str,
    check_task: TaskCheck | None,
) -> dict[str, Any]:
    """Return ``read``'s values checked and normalized (raise ``ValueError`` naming why)."""
    table = fields.by_name()
    unknown = sorted(set(read.values) - set(table))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}: known are {', '.join(table)}")
    values: dict[str, Any] = {}
    for key, value in read.values.items():
        if key in _TIMER:
            continue
        if key == "owner" and isinstance(value, list):
            value = tuple(value)
        checked = table[key].check(value)
        if key == "owner" and checked is not None:  # ids are stored as text
            checked = (checked[0], str(checked[1]))
        values[key] = checked
    for key in ("task",):
        if key not in values and stored is None:
            raise ValueError(f"{key} is required: {table[key].wants}")
    if stored is not None and _same_timer(read.values, stored):
        # As stored: not parsed again (a stored timer beat cannot read is not a reason to
        # refuse a rerun that does not touch it; ``cronstore check`` reports it).
        values.update(timer=stored.timer, kind=stored.timer_kind, tz=stored.tz)
    elif "timer" in read.values or stored is None:
        text = read.values.get("timer")
        if text is None:
            raise ValueError("timer is required: give a timer expression")
        timer = parse_timer(
            table["timer"].check(text),
            kind=read.values.get("kind"),
            tz=read.values.get("tz") or (stored.tz if stored is not None else default_tz),
        )
        values.update(timer=str(timer), kind=timer.kind, tz=timer.tz_name)
    if check_task is not None and ({"task", "args", "kwargs"} & set(values) or stored is None):
        task = values.get("task", stored.task if stored is not None else "")
        args = list(values.get("args", stored.args if stored is not None else []))
        kwargs = dict(values.get("kwargs", stored.kwargs if stored is not None else {}))
        if stored is not None and (task, args, kwargs) == (stored.task, stored.args, stored.kwargs):
            # What is stored already is not refused for being what it is: a rerun (or an
            # ``export | apply``) of a task beat put in error changes nothing. ``cronstore
            # check`` reports such rows.
            return values
        problem = check_task(task, args, kwargs)
        if problem is not None:
            raise ValueError(problem)
    return values


def _same_timer(given: Mapping[str, Any], stored: PeriodicTask) -> bool:
    """Whether ``given`` names the stored timer exactly (its text, and kind and zone if given)."""
    return (
        given.get("timer") == stored.timer
        and given.get("kind") in (None, stored.timer_kind)
        and given.get("tz") in (None, stored.tz)
    )


def _stored(task: PeriodicTask, name: str) -> Any:
    if name == "owner":
        return task.owner
    return getattr(task, fields.field(name).key)
