"""Whether a periodic task's args and kwargs fit the Celery task it names.

Celery checks a call against the task function's signature when the message is built
(``Task.typing``): a row whose args do not fit raises ``TypeError`` there, inside beat's
publish. Asking the same question first lets beat put that one row in error with the
reason, and lets the API and CLI refuse it when the task is added or edited.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["call_problem"]


def call_problem(app: Any, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """Return why ``name(*args, **kwargs)`` does not fit the task's signature, or ``None``.

    ``None`` too when ``app`` does not know the task (it may live in another service) or
    the task does not check its arguments (``typing = False``).
    """
    task = app.tasks.get(name) if app is not None else None
    header = getattr(task, "__header__", None)
    if task is None or not getattr(task, "typing", True) or header is None:
        return None
    try:
        header(*args, **dict(kwargs))
    except TypeError as exc:
        return (
            f"args {list(args)!r} and kwargs {dict(kwargs)!r} do not fit task {name!r} ({exc}): "
            "fix them with cronstore edit --args/--kwargs"
        )
    return None
