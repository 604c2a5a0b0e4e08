"""After a database outage, beat makes sure the ledger still knows what it sent.

With asynchronous replication, a PostgreSQL failover can lose the last transactions the
old primary committed: the claim of a fire that beat then published (its ledger row), or
its ``sending`` and ``published`` marks. On the promoted standby that fire is then either
due again (no row: the next claim would send it a second time) or ``claimed`` (a take-over
would send it again). Beat remembers what it sent in the last minute
(:class:`~celery_cronstore.beat.send.Sender`) and, before it claims anything after an
outage, hands that list to :func:`restore`, which in one transaction:

- writes the missing rows back, ``sending`` under this beat with the reason (the caller
  then marks them ``published`` as usual), so that a claim of the same fire collides with
  the ledger's unique key and plans past it: the fire is not sent again;
- takes back a row still ``claimed`` by this beat, or by another beat that claimed it
  again (ahead of its time) and has not sent it yet (``sending`` under this beat: the
  other's ``sending`` write, fenced on its claim, finds nothing); a plain fire claimed
  again when due is ``sending`` from its claim on (``Claimer.claim_due(sending=True)``);
- reports a fire that another beat claimed again and already sent: it may have run twice
  (the case no database can prevent without synchronous replication), written into that
  row's reason (which a run's start record keeps: :func:`kept_report`) and logged with
  the task ids, so it is visible rather than silent.

Rows of tasks removed meanwhile are not written back (the task is gone), nor rows older
than the ledger's retention (the pruner may have deleted them). A row written back gets
no start lease: if its start record was lost too, it is never sent again. With synchronous
replication or no failover, every row is where beat left it and this costs one read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from celery_cronstore.records import Claim
from celery_cronstore.states import FireState
from celery_cronstore.store.db import Database
from celery_cronstore.store.leases import IN_CHUNK
from celery_cronstore.store.schema import fire, periodic_task

__all__ = ["RESTORED", "SENT_AGAIN", "Restored", "kept_report", "restore"]

logger = logging.getLogger("celery.beat")

_F = fire.c
_PT = periodic_task.c

#: Why a row is in the ledger again.
RESTORED = (
    "written back by the beat that sent it: the database lost its claim (a failover "
    "with asynchronous replication); not sent again"
)
#: Why a fire another beat claimed again and sent may have run twice.
#: Task ids named in the log line of fires that may have run twice (the rest counted).
LOGGED = 50
SENT_AGAIN_PREFIX = "sent by "
SENT_AGAIN = (
    SENT_AGAIN_PREFIX + "{node} before the database lost its claim (a failover with asynchronous "
    "replication), then claimed and sent again: it may have run twice"
)


@dataclass(frozen=True)
class Restored:
    """What :func:`restore` found and did."""

    #: Claims to mark published now (written back, or taken back as ``sending``).
    to_mark: list[Claim]
    #: How many rows were written back.
    written: int
    #: Task ids another beat sent again after the loss.
    twice: list[str]


def restore(
    db: Database, node: str, claims: list[Claim], keep: timedelta | None = None
) -> Restored:
    """Make the ledger hold every fire of ``claims`` (sent by beat ``node``) as sent by
    it, except those sent again by another beat (reported); see the module docstring.
    ``keep``: the ledger's retention; an older fire's row may have been pruned, and is
    not written back."""
    if not claims:
        return Restored([], 0, [])
    with db.begin() as conn:
        now = db.now(conn)
        if keep is not None:
            claims = [c for c in claims if c.fire_time >= now - keep]
        by_id = {c.task_id: c for c in claims}
        found = _rows(conn, list(by_id))
        missing = [c for c in claims if c.task_id not in found]
        written, clashed = _write_back(conn, missing, node, now) if missing else ([], [])
        # A row another beat inserted meanwhile (its claim of the same fire, committed
        # while this insert waited on the unique key): judged as one found at first.
        found.update(_rows(conn, [c.task_id for c in clashed]))
        taken: list[Claim] = []
        twice: list[str] = []
        for task_id, row in found.items():
            claim = by_id[task_id]
            if row.state == FireState.CLAIMED:
                moved = conn.execute(
                    sa.update(fire)
                    .where(
                        _F.task_id == task_id,
                        _F.state == FireState.CLAIMED,
                        _F.claimed_by == row.claimed_by,
                        _F.attempts == row.attempts,
                    )
                    .values(state=FireState.SENDING, claimed_by=node, attempts=claim.attempt)
                )
                if moved.rowcount == 1:
                    taken.append(claim)
            elif row.claimed_by != node and row.state != FireState.MISSED:
                twice.append(task_id)
                conn.execute(
                    sa.update(fire)
                    .where(_F.task_id == task_id)
                    .values(reason=SENT_AGAIN.format(node=node))
                )
    if written:
        logger.warning(
            "beat: the database lost the claims of %d fire(s) this beat sent (a failover?): "
            "written back, not sent again",
            len(written),
        )
    if twice:
        logger.error(
            "beat: %d fire(s) this beat sent before the database lost their claims were "
            "claimed and sent again by another beat; they may have run twice: %s%s",
            len(twice),
            ", ".join(sorted(twice)[:LOGGED]),
            f" and {len(twice) - LOGGED} more" if len(twice) > LOGGED else "",
        )
    return Restored([*written, *taken], len(written), twice)


def _rows(conn: sa.Connection, task_ids: list[str]) -> dict[str, sa.Row[Any]]:
    """Return the ledger rows of ``task_ids`` (state, claimer, attempt) by task id."""
    found: dict[str, sa.Row[Any]] = {}
    for start in range(0, len(task_ids), IN_CHUNK):
        rows = conn.execute(
            sa.select(_F.task_id, _F.state, _F.claimed_by, _F.attempts).where(
                _F.task_id.in_(task_ids[start : start + IN_CHUNK])
            )
        )
        found.update({row.task_id: row for row in rows})
    return found


def kept_report() -> sa.ColumnElement[Any]:
    """The reason a start record keeps: the report that the fire may run twice (a run's
    start clears any other reason)."""
    return sa.case((_F.reason.like(SENT_AGAIN_PREFIX + "%"), _F.reason), else_=sa.null())


def _write_back(
    conn: sa.Connection, missing: list[Claim], node: str, now: object
) -> tuple[list[Claim], list[Claim]]:
    """Insert the ``sending`` rows of ``missing`` whose task still exists; return the
    claims written and those the ledger's unique key refused (another row holds the
    fire: another beat's claim, or its time recorded ``missed``)."""
    task_ids = sorted({c.periodic_task_id for c in missing})
    alive: set[int] = set()
    for start in range(0, len(task_ids), IN_CHUNK):
        alive.update(
            conn.execute(
                sa.select(_PT.id).where(_PT.id.in_(task_ids[start : start + IN_CHUNK]))
            ).scalars()
        )
    written: list[Claim] = []
    clashed: list[Claim] = []
    for claim in missing:
        if claim.periodic_task_id not in alive:
            continue
        try:
            with conn.begin_nested():
                conn.execute(
                    sa.insert(fire).values(
                        periodic_task_id=claim.periodic_task_id,
                        fire_time=claim.fire_time,
                        fire_count=1,
                        task_id=claim.task_id,
                        state=FireState.SENDING,
                        claimed_by=node,
                        claimed_at=now,
                        attempts=claim.attempt,
                        reason=RESTORED,
                    )
                )
        except IntegrityError:
            clashed.append(claim)
            continue
        written.append(claim)
    return written, clashed
