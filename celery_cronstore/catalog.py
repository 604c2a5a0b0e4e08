"""The one seam between cronstore and a Celery app: what the app knows about a task name.

:class:`TaskCatalog` answers, for the store and every window (API, command line,
dashboard, Django admin, ``beat_schedule``), the questions that need the app: may beat
send this task (the allowlist, ``cronstore_require_registered``), will the ledger see its
fires start (a CronTask, or a plain task with ``cronstore_watch_plain_tasks``), may a fire
that never started be published again, and do these arguments fit its signature.
It has the shape of :class:`celery_cronstore.store.seam.TaskSeam`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from celery_cronstore.config import Config
from celery_cronstore.policy.messages import allowed

__all__ = ["TaskCatalog", "call_problem"]


def call_problem(app: Any, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """Return why ``name(*args, **kwargs)`` does not fit the task's signature, or ``None``.

    Celery checks a call against the task function's signature when the message is built
    (``Task.typing``): a row whose args do not fit raises ``TypeError`` there, inside
    beat's publish. ``None`` too when ``app`` does not know the task (it may live in
    another service) or the task does not check its arguments (``typing = False``).
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


class TaskCatalog:
    """What a Celery app knows about task names (see the module docstring).

    ``where`` names the app in messages (default ``app '<main>'``; beat says
    ``beat's app``). ``config`` defaults to the app's own (:meth:`Config.from_app`).
    """

    def __init__(self, app: Any, *, config: Config | None = None, where: str | None = None):
        self.app = app
        self.config = config if config is not None else Config.from_app(app)
        self.where = where or f"app {app.main!r}"

    def __repr__(self) -> str:
        return f"<TaskCatalog of {self.where}>"

    def _task(self, name: str) -> Any:
        return self.app.tasks.get(name)

    def registered(self, name: str) -> str | None:
        """Return why beat must not send task ``name`` (``None``: it may).

        Refused: a name outside ``cronstore_task_allowlist`` (when set), and a name the
        app does not register while ``cronstore_require_registered`` is on. With neither
        rule an unknown name is fine: it is sent by name to another service's workers.
        """
        if not allowed(name, self.config.task_allowlist):
            return f"task {name!r} is not in cronstore_task_allowlist"
        if not self.config.require_registered or name in self.app.tasks:
            return None
        return (
            f"task {name!r} is not registered in {self.where}: import its module "
            "(Celery's imports/include settings or autodiscover_tasks) or fix the name, "
            "or set cronstore_require_registered = False to send tasks by name"
        )

    def guarded(self, name: str) -> bool:
        """Return whether the ledger will record the start of a fire of task ``name``.

        A CronTask's guard records it (``cronstore_guarded``); a plain task's worker does
        when ``cronstore_watch_plain_tasks`` is on. A task the app does not know is sent by
        name to another service: nothing says its workers reach the store.
        """
        task = self._task(name)
        if task is None:
            return False
        return bool(getattr(task, "cronstore_guarded", False) or self.config.watch_plain_tasks)

    def redeliverable(self, name: str) -> bool:
        """Return whether a fire of ``name`` that never started may be published again:
        a CronTask (its guard runs a fire once) or a task acknowledged late."""
        task = self._task(name)
        return bool(getattr(task, "cronstore_guarded", False) or getattr(task, "acks_late", False))

    def call_problem(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """Return why ``name(*args, **kwargs)`` does not fit the task (``None``: it does)."""
        return call_problem(self.app, name, args, kwargs)
