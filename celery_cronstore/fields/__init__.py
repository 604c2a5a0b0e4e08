"""The editable fields of a periodic task: one table every window reads.

Each :class:`Field` says its Python type, its default, how text from a command line or a
form becomes a value (:meth:`Field.parse`), what a value must be (:meth:`Field.check`,
raising :class:`FieldValueError` that names the problem and the fix), its help text and
the hints a window needs (choices, JSON, a label). :meth:`Store.add
<celery_cronstore.store.Store.add>` validates through it; the command line builds its
``add``/``edit`` options from it, the dashboard and the Django admin their forms, and
``beat_schedule`` entries their ``"cronstore"`` mapping. Windows read :func:`table` when
they are built (never a copy frozen at import), so a field added here shows up in all.

Pure: no Celery, no SQL. The timer's three fields are checked together by
:func:`celery_cronstore.timers.parse_timer` (the store does that); here each is only text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as _attribute
from datetime import datetime
from typing import Any

from celery_cronstore.fields.values import (
    INSTANT_WANTS,
    TEXT_BYTES,
    FieldValueError,
    check_text,
    instant,
    json_ready,
)
from celery_cronstore.policy.alerts import parse_alert_after
from celery_cronstore.policy.exclusions import calendar_names
from celery_cronstore.policy.jitter import jitter_problem
from celery_cronstore.policy.messages import option_problems
from celery_cronstore.records import ABANDON_POLICIES, MISFIRE_POLICIES, OVERLAP_POLICIES
from celery_cronstore.timers import KINDS

__all__ = [
    "FIELDS",
    "TEXT_BYTES",
    "Field",
    "FieldValueError",
    "ForceableError",
    "by_name",
    "check_text",
    "entry_fields",
    "field",
    "table",
]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


class ForceableError(FieldValueError):
    """A refusal that ``force=True`` overrides: beat would not run the task as one expects
    (a task the app does not register or the allowlist leaves out, a one-off instant
    already past), though the store could hold it."""


@dataclass(frozen=True)
class Field:
    """One editable field of a periodic task and how every window treats it."""

    name: str
    #: ``str``, ``int``, ``float``, ``bool``, ``list``, ``dict``, ``datetime`` (an
    #: instant: ISO-8601 text with its offset) or ``tuple`` (the owner).
    type: type
    default: Any
    help: str
    label: str = ""
    #: ``None`` is a value (empty text means it); else ``None`` is refused.
    optional: bool = False
    #: Must be given when a task is added (no default).
    required: bool = False
    #: Must not be blank (text fields).
    nonblank: bool = False
    choices: tuple[str, ...] = ()
    #: Smallest number allowed (numbers).
    minimum: float | None = None
    max_chars: int | None = None
    #: The attribute of :class:`~celery_cronstore.records.PeriodicTask` it shows
    #: (default: ``name``).
    attr: str = ""
    #: Which part of a form it belongs to: ``task``, ``timer``, ``arguments``, ``policies``,
    #: ``owner``.
    group: str = "policies"
    #: Settable in a ``beat_schedule`` entry's ``"cronstore"`` mapping.
    entry: bool = True
    #: How the value must be described in messages ("a non-negative number of seconds").
    wants: str = ""
    #: Other command-line options for it, the names other schedulers use
    #: (``--catchup-window`` for ``start_deadline``).
    aliases: tuple[str, ...] = ()
    #: A further check of a typed value (``None``: fine; else the problem).
    extra: Callable[[Any], str | None] | None = _attribute(default=None, compare=False)

    @property
    def key(self) -> str:
        """Return the record attribute this field reads and writes."""
        return self.attr or self.name

    @property
    def is_json(self) -> bool:
        """Whether its text form is JSON (``args``, ``kwargs``, ``options``)."""
        return self.type in (list, dict)

    @property
    def flag(self) -> str:
        """Return its command-line option (``--misfire-limit``)."""
        return "--" + self.name.replace("_", "-")

    @property
    def metavar(self) -> str:
        """Return how a command line shows its value."""
        if self.choices:
            return "[" + "|".join(self.choices) + "]"
        return {
            list: "JSON ARRAY",
            dict: "JSON OBJECT",
            int: "INTEGER",
            float: "SECONDS",
            tuple: "TYPE:ID",
            datetime: "ISO-8601",
        }.get(self.type, "TEXT")

    @property
    def title(self) -> str:
        """Return its label for forms."""
        return self.label or self.name.replace("_", " ").capitalize()

    def _fail(self, message: str) -> FieldValueError:
        return FieldValueError(self.name, message)

    # -- values ------------------------------------------------------------------------

    def check(self, value: Any) -> Any:
        """Return ``value`` normalized if this field accepts it; else raise
        :class:`FieldValueError` naming the problem and the fix."""
        if value is None:
            if self.optional:
                return None
            if self.choices:  # the same message as any other value outside the choices
                raise self._fail(f"{self.name} must be one of {self.choices}, got None")
            raise self._fail(f"{self.name} is required: {self._describe()}")
        checked = self._typed(value)
        problem = self.extra(checked) if self.extra is not None else None
        if problem:
            raise self._fail(problem)
        return checked

    def _describe(self) -> str:
        if self.choices:
            return f"give one of {', '.join(self.choices)}"
        return f"give {self.wants or 'a ' + self.type.__name__}"

    def _typed(self, value: Any) -> Any:
        kind = self.type
        if self.choices:
            if value not in self.choices:
                raise self._fail(f"{self.name} must be one of {self.choices}, got {value!r}")
            return str(value)
        if kind is str:
            if not isinstance(value, str):
                raise self._fail(f"{self.name} must be a string, got {type(value).__name__}")
            if self.nonblank and not value.strip():
                raise self._fail(
                    f"{self.name} must be a non-empty string: {self._describe()}, got {value!r}"
                )
            return check_text(self.name, value, max_chars=self.max_chars)
        if kind is bool:
            if not isinstance(value, bool):
                raise self._fail(f"{self.name} must be True or False, got {value!r}")
            return value
        if kind in (int, float):
            return self._number(value)
        if kind is list:
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
                raise self._fail(f"{self.name} must be a list, got {type(value).__name__}")
            return json_ready(self.name, list(value))
        if kind is dict:
            if not isinstance(value, Mapping):
                raise self._fail(f"{self.name} must be a mapping, got {type(value).__name__}")
            return json_ready(self.name, dict(value))
        if kind is datetime:
            return instant(self.name, value, self.wants)
        return value

    def _number(self, value: Any) -> int | float:
        whole = self.type is int
        wrong = isinstance(value, bool) or not isinstance(value, (int, float))
        if not wrong and whole and not isinstance(value, int):
            wrong = True
        if not wrong and not whole and not math.isfinite(value):
            wrong = True
        if wrong or (self.minimum is not None and value < self.minimum):
            raise self._fail(f"{self.name} must be {self.wants}, got {value!r}")
        return int(value) if whole else float(value)

    def parse(self, text: str) -> Any:
        """Return the value that ``text`` (a command-line option, a form field) gives.

        Blank text means ``None`` for an optional field and the default otherwise (a
        required field refuses it). Raise :class:`FieldValueError` naming the problem.
        """
        stripped = text.strip()
        if not stripped:
            if self.optional:
                return None
            if self.type is str and not self.choices:
                return self.check(text)
            if self.type is bool:
                return False
            return self.check(self.default)
        if self.type is bool:
            if stripped.lower() not in (*_TRUE, *_FALSE):
                raise self._fail(f"{self.name} must be yes or no, got {text!r}")
            return stripped.lower() in _TRUE
        if self.type in (int, float):
            try:
                # "-1" reads as -1 (not -1.0) so every window quotes the same value
                number: Any = int(stripped) if stripped.lstrip("+-").isdigit() else float(stripped)
            except ValueError:
                raise self._fail(f"{self.name} must be {self.wants}, got {text!r}") from None
            return self.check(number)
        if self.is_json:
            try:
                parsed = json.loads(stripped)
            except ValueError as exc:
                raise self._fail(f"{self.name} is not valid JSON ({exc}): fix {text!r}") from None
            if not isinstance(parsed, self.type):
                wanted = "JSON array" if self.type is list else "JSON object"
                raise self._fail(f"{self.name} must be a {wanted}, got {text!r}")
            return self.check(parsed)
        if self.type is datetime:
            return self.check(stripped)
        if self.type is tuple:
            owner_type, sep, owner_id = stripped.partition(":")
            if not sep or not owner_type or not owner_id:
                raise self._fail(
                    f"{self.name} must be TYPE:ID (e.g. tenant:42), got {text!r}: give both"
                )
            return self.check((owner_type, owner_id))
        return self.check(text.strip() if self.nonblank else text)

    def text(self, value: Any) -> str:
        """Return ``value`` as the text a form shows (the inverse of :meth:`parse`)."""
        if value is None:
            return ""
        if self.is_json:
            return json.dumps(value, ensure_ascii=False, sort_keys=True)
        if self.type is bool:
            return "on" if value else ""
        if self.type is float:
            return f"{value:g}"
        if self.type is tuple:
            return f"{value[0]}:{value[1]}"
        if isinstance(value, datetime):
            return value.isoformat()
        return str(value)


def _options(value: Any) -> str | None:
    problems = option_problems(value)
    return "; ".join(problems) if problems else None


def _owner(value: Any) -> str | None:
    if not isinstance(value, tuple) or len(value) != 2:
        return f"owner must be a (type, id) pair, got {value!r}"
    owner_type, owner_id = value
    if not isinstance(owner_type, str) or not owner_type:
        return f"owner type must be a non-empty string, got {owner_type!r}"
    try:
        check_text("owner type", owner_type, max_chars=100)
        check_text("owner id", str(owner_id), max_chars=200)
    except ValueError as exc:
        return str(exc)
    return None


def _alert_after(value: Any) -> str | None:
    try:
        parse_alert_after(value)
    except ValueError as exc:
        return str(exc)
    return None


def _exclude(value: Any) -> str | None:
    try:
        calendar_names(value)
    except ValueError as exc:
        return str(exc)
    return None


def _jitter(value: Any) -> str | None:
    return jitter_problem(value) if isinstance(value, (int, float)) else None


_SECONDS = "a non-negative number of seconds"
_INSTANT = INSTANT_WANTS

#: The editable fields, in the order forms show them. Read it through :func:`table`.
FIELDS: list[Field] = [
    Field("name", str, None, "Unique name of the periodic task.", required=True,
          nonblank=True, max_chars=200, group="task", entry=False, wants="a name"),
    Field("task", str, None, "Celery task name to send.", label="Celery task",
          required=True, nonblank=True, max_chars=200, group="task", entry=False,
          wants="the Celery task name (e.g. mail.poll)"),
    Field("enabled", bool, True, "Whether beat fires it.", group="task", entry=False),
    Field("description", str, "", "Free text shown by `show`.", group="task"),
    Field("timer", str, None, "Timer expression.", label="Expression", required=True,
          nonblank=True, max_chars=500, group="timer", entry=False,
          wants="a timer (e.g. 'Mon..Fri 09:00', '*/5 * * * *', 'every 1h')"),
    Field("kind", str, None, "Timer kind (detected if omitted).", optional=True,
          choices=KINDS, attr="timer_kind", group="timer", entry=False),
    Field("tz", str, None, "Time zone the timer is read in (default: cronstore_default_tz, "
          "else the app's timezone, else UTC).", label="Zone", optional=True, max_chars=64,
          group="timer", entry=False, wants="an IANA zone name (e.g. Europe/Berlin)"),
    Field("args", list, [], "Positional arguments (JSON array).", group="arguments",
          entry=False),
    Field("kwargs", dict, {}, "Keyword arguments (JSON object).", group="arguments",
          entry=False),
    Field("options", dict, {}, "Celery message options (JSON object: queue, priority, "
          "headers, ...).", group="arguments", entry=False, extra=_options),
    Field("misfire_policy", str, "run_once", "After downtime: run_once sends the newest "
          "missed fire, run_all each (at most misfire_limit), skip none.",
          choices=MISFIRE_POLICIES),
    Field("misfire_limit", int, 100, "Most missed fires run_all sends.", minimum=1,
          wants="a whole number of at least 1"),
    Field("overlap_policy", str, "allow", "While the previous fire still runs: allow sends "
          "the new one too, skip records it skipped, buffer_one holds one back and sends it "
          "when the previous ends, replace ends the previous (revoked) and sends the new.",
          choices=OVERLAP_POLICIES, aliases=("--overlap",)),
    Field("start_deadline", float, None, "Seconds late a fire may start: the catch-up "
          "window (older fires are not sent after downtime).", optional=True, minimum=0,
          wants=_SECONDS, aliases=("--catchup-window",)),
    Field("abandon_policy", str, "leave", "A started fire whose worker went silent: leave "
          "it abandoned (default), or rerun it once under the same task id.",
          choices=ABANDON_POLICIES),
    Field("tolerance", float, None, "CronTask: seconds early a fire may start (default: "
          "cronstore_tolerance).", optional=True, minimum=0, wants=_SECONDS),
    Field("max_retries", int, 0, "CronTask: Celery retries of one fire.", minimum=0,
          wants="a non-negative integer"),
    Field("alert_after", str, None, "Dead man's switch: alert when no fire succeeded for N "
          "periods ('3 periods') or a duration ('6h', '1h30m'); blank: "
          "cronstore_alert_after.", label="Alert after", optional=True, max_chars=32,
          wants="a number of periods ('3 periods') or a duration ('6h')", extra=_alert_after),
    Field("max_runs", int, None, "Stop after this many scheduled fires (its run count; "
          "run-now does not count): then it plans no further fire. Raise it to go on; "
          "blank: no limit.", label="Max runs", optional=True, minimum=1,
          group="timer", wants="a whole number of fires, at least 1"),
    Field("jitter", float, None, "Delay each fire by up to this many seconds, a fixed "
          "pseudo-random amount per task and fire (the same on every replica; never as far "
          "as the next fire). The ledger keeps the nominal fire time; blank: no delay.",
          label="Jitter", optional=True, minimum=0, group="timer",
          wants="a number of seconds from 0 to 604800 (a week)", extra=_jitter),
    Field("start_at", datetime, None, "No fire before this instant (ISO-8601 with its "
          "offset); blank: from now.", label="Start at", optional=True, group="timer",
          wants=_INSTANT),
    Field("end_at", datetime, None, "No fire after this instant: then it plans no further "
          "fire and shows as ended (it stays enabled). Blank: no end.", label="End at",
          optional=True, group="timer", wants=_INSTANT),
    Field("exclude", str, None, "Exclusion calendars whose days and windows it skips, by "
          "name, separated by commas (cronstore calendar add ...); blank: none.",
          label="Exclude", optional=True, max_chars=500, group="timer",
          wants="calendar names separated by commas", extra=_exclude),
    Field("owner", tuple, None, "Owner as TYPE:ID (its removal removes the task).",
          optional=True, group="owner", entry=False, extra=_owner),
]  # fmt: skip


def table() -> list[Field]:
    """Return the editable fields as they are now (read at call time, never cached)."""
    return list(FIELDS)


def by_name() -> dict[str, Field]:
    """Return the editable fields by name."""
    return {f.name: f for f in FIELDS}


def field(name: str) -> Field:
    """Return the field called ``name`` (``KeyError`` if there is none)."""
    return by_name()[name]


def entry_fields() -> list[Field]:
    """Return the fields a ``beat_schedule`` entry's ``"cronstore"`` mapping may set."""
    return [f for f in FIELDS if f.entry]
