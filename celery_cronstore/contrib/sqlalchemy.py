"""Tie periodic tasks to SQLAlchemy ORM models: deleting an owner releases its tasks.

    from celery_cronstore.contrib.sqlalchemy import owner_of, tie_owner

    tie_owner(MailChannel, "mail_channel", store)            # once, at start-up
    store.add("poll-42", task="mail.poll", timer="*:0/5", owner=owner_of(channel))
    session.delete(channel); session.commit()                # its tasks are removed

When the tasks are released: the ``after_delete`` mapper event only *records* the deleted
owner on its session; the store is changed after the session's outermost transaction
commits (``after_commit``). A rolled-back delete, or one inside a savepoint that is rolled
back, releases nothing. The store uses its own engine and transaction, so the two commits
are not atomic: if the store is unreachable right after the application's commit, the
failure is logged and the tasks stay behind until :func:`~celery_cronstore.contrib.sweep_orphans`
runs (until then they fire for an owner that no longer exists).

Not seen by this tie (as by any ORM event): bulk ``DELETE`` statements
(``session.execute(delete(Model))``, ``Query.delete()``), ``ON DELETE CASCADE`` done by
the database, and raw SQL. Release those owners with
:func:`~celery_cronstore.contrib.release_owner`, or sweep.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import Mapper, Session, SessionTransaction, object_session

from celery_cronstore.contrib import (
    OnDelete,
    StoreSource,
    check_on_delete,
    release_all,
    release_owner,
    sweep_orphans,
)

__all__ = [
    "OnDelete",
    "owner_of",
    "release_owner",
    "sweep_orphans",
    "tie_owner",
]

#: Where a session keeps the owners deleted in its current transaction.
_INFO_KEY = "celery_cronstore.deleted_owners"


@dataclass(frozen=True)
class _Tie:
    owner_type: str
    store: StoreSource
    on_delete: OnDelete
    id_of: Callable[[Any], Any] | None


@dataclass(frozen=True)
class _Deleted:
    transaction: SessionTransaction
    tie: _Tie
    owner_id: str


_ties: dict[type[Any], _Tie] = {}
_lock = threading.Lock()
_session_events = False


def tie_owner(
    model: type[Any],
    owner_type: str,
    store: StoreSource,
    on_delete: OnDelete = "remove",
    *,
    id_of: Callable[[Any], Any] | None = None,
) -> Callable[[], None]:
    """Release an instance's periodic tasks once its deletion commits; return an untie.

    ``model`` is a mapped class (subclasses are covered too); its instances own tasks as
    ``(owner_type, str(primary key))`` -- build that pair with :func:`owner_of`. A model
    with a composite primary key needs ``id_of(instance)`` returning the owner id.
    ``store`` may be a function returning the store, called at the first release.
    ``on_delete`` is ``"remove"`` (tasks and their ledger are deleted) or ``"disable"``
    (tasks stay, disabled, for inspection). Tying the same class twice is an error.
    """
    action = check_on_delete(on_delete)
    if not isinstance(owner_type, str) or not owner_type:
        raise ValueError(f"owner_type must be a non-empty string, got {owner_type!r}")
    mapper = sa.inspect(model, raiseerr=False)
    if not isinstance(mapper, Mapper):
        raise TypeError(f"{model!r} is not a mapped SQLAlchemy class")
    if id_of is None and len(mapper.primary_key) != 1:
        raise ValueError(
            f"{model.__name__} has a composite primary key; pass id_of=<function of an "
            "instance returning its owner id>"
        )
    tie = _Tie(owner_type, store, action, id_of)
    with _lock:
        if model in _ties:
            raise ValueError(
                f"{model.__name__} is already tied to owner type {_ties[model].owner_type!r}"
            )
        _ties[model] = tie
        _listen_to_sessions()

    def after_delete(_mapper: Mapper[Any], _conn: sa.Connection, target: Any) -> None:
        _record(target, tie)

    event.listen(model, "after_delete", after_delete, propagate=True)

    def untie() -> None:
        with _lock:
            if _ties.get(model) is tie:
                del _ties[model]
        if event.contains(model, "after_delete", after_delete):
            event.remove(model, "after_delete", after_delete)

    return untie


def owner_of(instance: Any, owner_type: str | None = None) -> tuple[str, str]:
    """Return the ``(owner_type, owner_id)`` pair to pass as ``store.add(owner=...)``.

    ``owner_type`` defaults to the one the instance's class was tied with. The instance
    must have its primary key (flush it first if the database assigns it).
    """
    tie = _tie_for(type(instance))
    if owner_type is None:
        if tie is None:
            raise LookupError(f"{type(instance).__name__} is not tied (tie_owner); pass owner_type")
        owner_type = tie.owner_type
    return owner_type, _owner_id(instance, tie.id_of if tie is not None else None)


def _tie_for(cls: type[Any]) -> _Tie | None:
    for klass in cls.__mro__:
        tie = _ties.get(klass)
        if tie is not None:
            return tie
    return None


def _owner_id(instance: Any, id_of: Callable[[Any], Any] | None) -> str:
    if id_of is not None:
        return str(id_of(instance))
    state = sa.inspect(instance)
    identity = state.identity
    if identity is None:
        key = state.mapper.primary_key_from_instance(instance)
        identity = None if any(v is None for v in key) else tuple(key)
    if identity is None:
        raise ValueError(
            f"{type(instance).__name__} instance has no primary key yet; flush it first"
        )
    if len(identity) != 1:
        raise ValueError(f"{type(instance).__name__} has a composite primary key; pass id_of")
    return str(identity[0])


def _record(target: Any, tie: _Tie) -> None:
    session = object_session(target)
    if session is None:  # deleted through a connection-level flush without a session
        return
    transaction = session.get_nested_transaction() or session.get_transaction()
    if transaction is None:
        return
    deleted = _Deleted(transaction, tie, _owner_id(target, tie.id_of))
    session.info.setdefault(_INFO_KEY, []).append(deleted)


def _listen_to_sessions() -> None:
    # Registered once, on the Session class: every session (sessionmaker, scoped,
    # Flask-SQLAlchemy's) reports its commits and rollbacks here.
    global _session_events
    if _session_events:
        return
    event.listen(Session, "after_commit", _after_commit)
    event.listen(Session, "after_soft_rollback", _after_soft_rollback)
    event.listen(Session, "after_transaction_end", _after_transaction_end)
    _session_events = True


def _after_commit(session: Session) -> None:
    # after_commit also fires when a savepoint is released; only the outermost commit
    # makes the deletes durable.
    if session.in_nested_transaction():
        return
    deleted: list[_Deleted] = session.info.pop(_INFO_KEY, [])
    groups: dict[tuple[int, OnDelete], tuple[StoreSource, list[tuple[str, str]]]] = {}
    for item in deleted:
        key = (id(item.tie.store), item.tie.on_delete)
        groups.setdefault(key, (item.tie.store, []))[1].append((item.tie.owner_type, item.owner_id))
    for (_, on_delete), (store, owners) in groups.items():
        release_all(store, dict.fromkeys(owners), on_delete)


def _after_soft_rollback(session: Session, previous: SessionTransaction) -> None:
    # Forget the deletes made in the rolled-back transaction or in savepoints inside it.
    deleted: list[_Deleted] | None = session.info.get(_INFO_KEY)
    if not deleted:
        return
    session.info[_INFO_KEY] = [d for d in deleted if not _within(d.transaction, previous)]


def _within(transaction: SessionTransaction | None, outer: SessionTransaction) -> bool:
    while transaction is not None:
        if transaction is outer:
            return True
        transaction = transaction.parent
    return False


def _after_transaction_end(session: Session, transaction: SessionTransaction) -> None:
    # The outermost transaction ended: a commit has released its owners already, so what
    # is left was never committed (e.g. Session.close() without commit, which rolls back
    # without an after_soft_rollback event).
    if transaction.parent is None:
        session.info.pop(_INFO_KEY, None)
