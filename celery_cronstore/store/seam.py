"""What the store asks about Celery tasks, without knowing Celery: the task seam.

The store and the claimer never import Celery. Whatever they need to know about a task
name (may beat send it, does it run the guard, may a lost fire be published again, do
these arguments fit) they ask one object of this shape:
:class:`celery_cronstore.catalog.TaskCatalog` for a Celery app, :class:`NullSeam` for none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

__all__ = ["CallSeam", "NullSeam", "TaskSeam"]


class TaskSeam(Protocol):
    """Answer the store's four questions about a Celery task name."""

    def registered(self, name: str) -> str | None:
        """Return why a fire of task ``name`` must not be sent (``None``: it may)."""

    def guarded(self, name: str) -> bool:
        """Return whether the ledger will record the start of a fire of task ``name``.

        A CronTask's guard records it; so does a plain task's worker when its app reaches
        the store (``cronstore_watch_plain_tasks``). Beat gives such a fire a start
        lease when it marks it published: if it never starts, it is redelivered or
        recorded lost (:func:`celery_cronstore.policy.decide_redelivery`). The one place
        the claimer asks this.
        """

    def redeliverable(self, name: str) -> bool:
        """Return whether a fire of ``name`` that never started may be published again."""

    def call_problem(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """Return why ``name(*args, **kwargs)`` does not fit the task (``None``: it does)."""


class NullSeam:
    """The seam of a store without a Celery app: every name may be sent, nothing is known."""

    def registered(self, name: str) -> str | None:
        """Return ``None``: without an app no name is refused."""
        return None

    def guarded(self, name: str) -> bool:
        """Return ``False``: without an app no task is known to be a CronTask."""
        return False

    def redeliverable(self, name: str) -> bool:
        """Return ``True``: without an app nothing says a second publish could run it twice.

        The claimer's default before the seam (``redeliverable=None``: every task), kept;
        only fires with a start lease or a rerun abandon policy are ever asked about, and
        without an app (``guarded`` is ``False``) no fire gets a start lease.
        """
        return True

    def call_problem(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """Return ``None``: without an app no signature is known."""
        return None


class CallSeam(NullSeam):
    """A :class:`NullSeam` that checks calls with a ``call_check`` function (the old API)."""

    def __init__(self, call_check: Callable[[str, list[Any], dict[str, Any]], str | None]):
        self.call_check = call_check

    def call_problem(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """Return what ``call_check`` says about the call."""
        return self.call_check(name, list(args), dict(kwargs))
