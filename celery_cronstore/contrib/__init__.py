"""Framework integrations: Django, Flask and SQLAlchemy ORM applications.

Each submodule imports its framework; this package imports none of them, and
``import celery_cronstore`` never imports this package. The helpers here are shared by
the integrations and usable on their own: what to do with an owner's periodic tasks once
the owner is gone (:func:`release_owner`), and how to clean up after a release that
failed or never ran (:func:`sweep_orphans`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:
    from celery_cronstore.store import Store

__all__ = ["OnDelete", "StoreSource", "release_owner", "resolve_store", "sweep_orphans"]

#: What happens to an owner's periodic tasks when the owner is deleted.
OnDelete: TypeAlias = Literal["remove", "disable"]

#: A store, or a function returning one (called when the store is first needed, so that
#: tying an owner at import time opens no connection).
StoreSource: TypeAlias = "Store | Callable[[], Store]"

logger = logging.getLogger("celery_cronstore.contrib")

_ACTIONS = ("remove", "disable")


def check_on_delete(on_delete: str) -> OnDelete:
    """Return ``on_delete`` if it names an action; raise ``ValueError`` naming it if not."""
    if on_delete == "remove":
        return "remove"
    if on_delete == "disable":
        return "disable"
    raise ValueError(f"on_delete must be 'remove' or 'disable', got {on_delete!r}")


def resolve_store(source: StoreSource) -> Store:
    """Return the store itself, or call ``source`` to get it."""
    from celery_cronstore.store import Store

    store = source if isinstance(source, Store) else source()
    if not isinstance(store, Store):
        raise TypeError(f"expected a celery_cronstore.Store, got {store!r}")
    return store


def release_owner(
    store: Store, owner_type: str, owner_id: Any, on_delete: OnDelete = "remove"
) -> int:
    """Remove (or disable) every periodic task of one owner; return how many changed.

    Call it where the owner is deleted when no signal or event does it for you (a view, a
    service function). Safe to call for an owner without tasks (returns 0).
    """
    action = check_on_delete(on_delete)
    if action == "remove":
        count = store.remove_owned_by(owner_type, owner_id)
    else:
        count = store.disable_owned_by(owner_type, owner_id)
    if count:
        logger.info(
            "owner %s:%s deleted: %s %d periodic task(s)",
            owner_type,
            owner_id,
            "removed" if action == "remove" else "disabled",
            count,
        )
    return count


def sweep_orphans(
    store: Store,
    owner_type: str,
    live_ids: Iterable[Any],
    on_delete: OnDelete = "remove",
) -> int:
    """Release the tasks of every ``owner_type`` owner whose id is not in ``live_ids``.

    Owner ties run after the application's commit, so a store that was unreachable at that
    moment leaves tasks behind (the failure is logged). Run this now and then, e.g. with
    ``live_ids=MailChannel.objects.values_list("pk", flat=True)``; ids compare as text, as
    the store keeps them. Return how many tasks were removed or disabled.
    """
    action = check_on_delete(on_delete)
    live = {str(owner_id) for owner_id in live_ids}
    orphans = sorted(
        {
            task.owner[1]
            for task in store.list(owner_type=owner_type)
            if task.owner is not None and task.owner[1] not in live
        }
    )
    return sum(release_owner(store, owner_type, owner_id, action) for owner_id in orphans)


def release_all(
    store_source: StoreSource, owners: Iterable[tuple[str, str]], on_delete: OnDelete
) -> None:
    """Release each owner, logging (not raising) failures: the owners are already deleted.

    Used by the ties, which run after the application's commit; raising there would report
    a failure for a delete that succeeded. :func:`sweep_orphans` repairs what was missed.
    """
    try:
        store = resolve_store(store_source)
    except Exception:
        logger.exception("owner tie: could not open the store; run sweep_orphans() later")
        return
    for owner_type, owner_id in owners:
        try:
            release_owner(store, owner_type, owner_id, on_delete)
        except Exception:
            logger.exception(
                "owner %s:%s deleted, but its periodic tasks could not be %s; "
                "run sweep_orphans() to clean up",
                owner_type,
                owner_id,
                "removed" if on_delete == "remove" else "disabled",
            )
