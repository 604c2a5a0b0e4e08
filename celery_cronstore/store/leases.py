"""Which ledger rows' leases ran out: the conditions beat's writes and its idle look share.

Three kinds of fire wait for beat once a lease lapses, each settled by one part of
:class:`~celery_cronstore.store.Claimer`: :func:`silent` (started, worker stopped
heartbeating: ``store.inflight``), :func:`unstarted` (published, never started:
``store.inflight``) and :func:`unpublished` (claimed or being sent, never marked
published: ``store.takeover``). The PostgreSQL idle look (``store.idle``) asks the same conditions
whether any wait.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from celery_cronstore.states import UNSENT, WORKER_RUNNING, FireState
from celery_cronstore.store.schema import fire

__all__ = ["IN_CHUNK", "NO_HEARTBEATS", "silent", "unpublished", "unstarted"]

_F = fire.c
#: Most ids in one ``IN (...)`` list.
IN_CHUNK = 1000
#: A started fire without a liveness lease (a worker of an older release) is abandoned
#: only after this long.
NO_HEARTBEATS = timedelta(hours=6)


def silent(now: Any) -> sa.ColumnElement[bool]:
    """Started fires whose worker stopped heartbeating by ``now`` (a value or SQL)."""
    return sa.and_(
        _F.state.in_(WORKER_RUNNING),
        sa.or_(
            _F.lease_until < now,
            # Started by a release without heartbeats: give it the old bound.
            sa.and_(_F.lease_until.is_(None), _F.started_at < now - NO_HEARTBEATS),
        ),
    )


def unstarted(now: Any) -> sa.ColumnElement[bool]:
    """Published fires whose start lease ran out by ``now`` without a start."""
    return sa.and_(_F.state == FireState.PUBLISHED, _F.lease_until < now)


def unpublished(now: Any) -> sa.ColumnElement[bool]:
    """Claims whose lease ran out by ``now`` before they were surely published: still
    ``claimed`` (never sent) or ``sending`` (their beat stopped while sending them)."""
    return sa.and_(_F.state.in_(UNSENT), _F.lease_until < now)
