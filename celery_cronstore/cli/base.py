"""What every ``celery cronstore`` command shares: the app and store, errors, output.

Errors never reach the user as a traceback: :class:`Command` turns every exception into
one ``Error: ...`` line (with every password scrubbed) and an exit status:

* 1: the operation failed (no such task, duplicate name, schema out of date, database or
  broker unreachable, unhealthy);
* 2: bad input (a timer that does not parse, a bad value or option, bad JSON).
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any

import click
from celery.bin.base import CeleryCommand, CLIContext

from celery_cronstore.errors import (
    CronstoreError,
    DuplicateTaskError,
    SchemaVersionError,
    TaskNotFoundError,
    TimerSyntaxError,
)
from celery_cronstore.policy.exclusions import ExclusionError
from celery_cronstore.secrets import app_passwords, scrub
from celery_cronstore.store import Store
from celery_cronstore.timers.once import format_instant

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "BadInputError",
    "Command",
    "CommandError",
    "Settings",
    "app_argument",
    "command_error",
    "emit_json",
    "fmt_time",
    "get_app",
    "get_settings",
    "get_store",
    "os_user",
    "scrub",
    "table",
    "to_json",
    "zone_name",
]

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


class CommandError(click.ClickException):
    """The operation failed: one line on stderr, exit status 1 (never a traceback)."""

    exit_code = EXIT_FAILED


class BadInputError(CommandError):
    """The input was bad: one line on stderr, exit status 2."""

    exit_code = EXIT_BAD_INPUT


def command_error(message: str, exit_code: int = EXIT_FAILED) -> CommandError:
    """Return the error to raise for ``message`` with exit status ``exit_code`` (1 or 2)."""
    return BadInputError(message) if exit_code == EXIT_BAD_INPUT else CommandError(message)


@dataclass
class Settings:
    """The group's options plus the lazily opened store of one invocation."""

    as_json: bool = False
    zone: tzinfo | None = None
    store: Store | None = None
    secrets: list[str] = field(default_factory=list)


def get_settings(ctx: click.Context) -> Settings:
    settings = ctx.meta.get("cronstore")
    if not isinstance(settings, Settings):
        settings = ctx.meta["cronstore"] = Settings()
    return settings


def get_app(ctx: click.Context) -> Any:
    """Return the Celery app ``celery -A`` resolved (or the test's ``CLIContext``)."""
    obj = ctx.find_object(CLIContext)
    if obj is None:
        raise CommandError("no Celery app: run this as `celery -A <module> cronstore ...`")
    return obj.app


def app_argument(ctx: click.Context) -> str | None:
    """Return what ``celery -A`` was given (the module to name in hints), if known.

    The app's own name (``Celery("...")``) is often not importable: ``celery -A <it>``
    would fail, so hints name what the operator typed.
    """
    value = ctx.find_root().params.get("app")
    return value if isinstance(value, str) and value else None


def os_user() -> str:
    """Return who runs this command (``getpass.getuser()``; ``uid <n>`` when the user has
    no name, as in a container started with an arbitrary uid)."""
    try:
        return getpass.getuser() or f"uid {os.getuid()}"
    except (OSError, KeyError, ImportError):
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"


def get_store(ctx: click.Context, *, check: bool = True) -> Store:
    """Open the app's store once per invocation (checking its schema unless told not to)."""
    settings = get_settings(ctx)
    if settings.store is None:
        app = get_app(ctx)
        settings.secrets = app_passwords(app)
        store = Store.from_app(app, app_name=app_argument(ctx))
        # Every write of a command is recorded as the OS user's, from the "cli" window.
        settings.store = store.acting(os_user(), "cli")
        ctx.call_on_close(settings.store.close)
        if check:
            settings.store.check_schema()
    return settings.store


def _describe(exc: BaseException) -> tuple[str, int]:
    """Return the message and exit status for an exception a command raised."""
    if isinstance(exc, TimerSyntaxError):
        return f"bad timer: {exc}", EXIT_BAD_INPUT
    if isinstance(exc, ExclusionError):  # a bad calendar entry or name
        return str(exc), EXIT_BAD_INPUT
    if isinstance(exc, (TaskNotFoundError, DuplicateTaskError)):
        return str(exc), EXIT_FAILED
    if isinstance(exc, SchemaVersionError):
        return str(exc), EXIT_FAILED
    if isinstance(exc, CronstoreError):  # StoreUnavailableError: the database is away
        return str(exc), EXIT_FAILED
    if isinstance(exc, ValueError):
        return str(exc), EXIT_BAD_INPUT
    module = type(exc).__module__.split(".")[0]
    if module == "sqlalchemy":  # one the store leaves as is (a permission refused, ...)
        orig = getattr(exc, "orig", None)
        text = str(orig if orig is not None else exc).strip().splitlines()
        return f"database error: {text[0] if text else type(exc).__name__}", EXIT_FAILED
    if module in ("kombu", "amqp", "redis", "socket") or isinstance(exc, OSError):
        return f"broker or network error: {exc}", EXIT_FAILED
    return f"unexpected {type(exc).__name__}: {exc}", EXIT_FAILED


def _refuse_undecodable(ctx: click.Context) -> None:
    """Refuse an argument that was not UTF-8 on the command line (Python hands such bytes
    over as lone surrogates, which no database or terminal takes)."""
    for name, value in ctx.params.items():
        if not isinstance(value, str):
            continue
        for position, char in enumerate(value):
            if "\ud800" <= char <= "\udfff":
                shown = f"0x{ord(char) - 0xDC00:02x}" if char >= "\udc80" else repr(char)
                flag = (
                    name.upper()
                    if any(
                        isinstance(p, click.Argument) and p.name == name for p in ctx.command.params
                    )
                    else "--" + name.replace("_", "-")
                )
                raise BadInputError(
                    f"{flag} is not valid UTF-8 (byte {shown} at position {position}): "
                    "give it as UTF-8 text"
                )


class Command(CeleryCommand):  # type: ignore[misc]  # Celery ships no types
    """A cronstore command: gets the app from ``-A``; turns errors into one clean line."""

    def invoke(self, ctx: click.Context) -> Any:
        _refuse_undecodable(ctx)
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.Abort):
            raise
        except CommandError as exc:
            clean = scrub(exc.message, get_settings(ctx).secrets)
            raise command_error(clean, exc.exit_code) from None
        except click.ClickException:
            raise
        except Exception as exc:
            message, code = _describe(exc)
            raise command_error(scrub(message, get_settings(ctx).secrets), code) from None


# -- output ---------------------------------------------------------------------------------


def fmt_time(instant: datetime | None, zone: tzinfo | None = None) -> str:
    """Return ``instant`` as UTC ISO-8601 (``...Z``), or ISO-8601 in ``zone``; ``-`` if none."""
    if instant is None:
        return "-"
    if zone is None:
        return format_instant(instant)
    local = instant.astimezone(zone)
    return local.isoformat(timespec="seconds" if local.microsecond == 0 else "microseconds")


def zone_name(zone: tzinfo | None) -> str:
    """Return the name of the display zone ``zone`` (``None``: UTC), for column headers."""
    return "UTC" if zone is None else str(getattr(zone, "key", None) or zone)


def to_json(value: Any) -> Any:
    """Return ``value`` (records, datetimes, containers) as plain JSON-ready data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return format_instant(value)
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def emit_json(value: Any) -> None:
    click.echo(json.dumps(to_json(value), indent=2, ensure_ascii=False))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print ``rows`` as left-aligned columns under upper-case ``headers``."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=False)]
    for row in (tuple(h.upper() for h in headers), *rows):
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=False)]
        click.echo("  ".join(cells).rstrip())
