"""The one exception tree of celery-cronstore.

Every error the package raises on purpose derives from :class:`CronstoreError`.
Errors about bad input are also :class:`ValueError`, so callers that only know the
standard library still catch them.
"""

from __future__ import annotations

__all__ = [
    "CronstoreError",
    "DuplicateTaskError",
    "EditConflictError",
    "SchemaVersionError",
    "StoreError",
    "StoreUnavailableError",
    "TaskNotFoundError",
    "TimerError",
    "TimerSearchError",
    "TimerSyntaxError",
]


class CronstoreError(Exception):
    """Root of every error raised by celery-cronstore."""


class TimerError(CronstoreError):
    """A timer could not be built or evaluated."""


class TimerSyntaxError(TimerError, ValueError):
    """An expression does not parse; the message names the bad token and its position.

    ``position`` is the 0-based offset of ``token`` in ``expression`` (``None`` when the
    problem is not tied to one token, e.g. an empty expression).
    """

    def __init__(
        self,
        message: str,
        *,
        expression: str = "",
        token: str | None = None,
        position: int | None = None,
    ) -> None:
        self.expression = expression
        self.token = token
        self.position = position
        self.reason = message
        text = message
        if token is not None:
            text = f"{message}: {token!r}"
        if position is not None:
            text = f"{text} at position {position}"
        if expression:
            text = f"{text} in {expression!r}"
        super().__init__(text)

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only arguments: teach pickle (used by Celery results) to rebuild us.
        return (
            _rebuild_syntax_error,
            (self.reason, self.expression, self.token, self.position),
        )


def _rebuild_syntax_error(
    message: str, expression: str, token: str | None, position: int | None
) -> TimerSyntaxError:
    return TimerSyntaxError(message, expression=expression, token=token, position=position)


class TimerSearchError(TimerError):
    """A fire-time search exceeded its bound (should not happen for a valid timer)."""


class StoreError(CronstoreError):
    """The schedule store could not do what was asked."""


class TaskNotFoundError(StoreError, KeyError):
    """No periodic task has the given name."""

    def __str__(self) -> str:
        # KeyError quotes its argument; keep the message readable.
        return str(self.args[0]) if self.args else "periodic task not found"


class DuplicateTaskError(StoreError, ValueError):
    """A periodic task with this name already exists."""


class SchemaVersionError(StoreError):
    """The database schema is missing or at a version this release does not know."""


class EditConflictError(StoreError):
    """An edit was refused: the task changed since the version the editor loaded.

    ``name``: the task; ``expected``: the version the edit was based on; ``current``: the
    version stored when the edit was refused (``None``: not known).
    """

    def __init__(self, name: str, expected: int, current: int | None = None) -> None:
        self.name = name
        self.expected = expected
        self.current = current
        now = "" if current is None else f", it is at version {current} now"
        super().__init__(
            f"periodic task {name!r} was changed by someone else since version {expected} "
            f"was loaded{now}: reload it and make the edit again"
        )

    def __reduce__(self) -> tuple[object, ...]:
        # Several constructor arguments: tell pickle how to rebuild us.
        return (EditConflictError, (self.name, self.expected, self.current))


class StoreUnavailableError(StoreError):
    """The store's database could not be reached, or refused or failed a statement.

    Raised for a refused or lost connection, a pool with no connection free in time, a
    driver's operational error (a lock or statement timeout, a read-only or locked
    database) and access refused. ``url`` names the database without its password;
    ``reason`` is the driver's first line; ``unreachable``: no connection could be
    opened, or it was lost.
    """

    def __init__(self, url: str, reason: str, *, unreachable: bool = False) -> None:
        self.url = url
        self.reason = reason
        self.unreachable = unreachable
        what = "unreachable or refused the connection" if unreachable else "unavailable"
        super().__init__(f"the cronstore database {url} is {what}: {reason}")

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_unavailable, (self.url, self.reason, self.unreachable))


def _rebuild_unavailable(url: str, reason: str, unreachable: bool) -> StoreUnavailableError:
    return StoreUnavailableError(url, reason, unreachable=unreachable)
