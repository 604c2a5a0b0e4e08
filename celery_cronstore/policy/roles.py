"""What a database role may not do of beat's work: the rule behind health's role lines.

Production databases often give the application a role that owns nothing (a managed
PostgreSQL: no superuser, the tables owned by the migration role, only row privileges
granted). Beat schedules with such a role, but some of its housekeeping needs more:
its own ``VACUUM`` of the hot tables needs their ownership, and pruning the ledger, the
alert episodes and the audit trail needs ``DELETE``. :func:`role_notes` turns what the
store read of the role (:class:`RoleFacts`) into one line per thing it cannot do.

A missing privilege that scheduling itself needs (claim, publish, heartbeat) gets a line
that says so; the exit status of ``cronstore health`` is still the heartbeats' and the
backlog's, which such a beat fails on its own (health may also run with a role of its
own, which only reads).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DOCS",
    "HOUSEKEEPING",
    "SCHEDULING",
    "RoleFacts",
    "RoleNote",
    "needed",
    "role_notes",
]

#: Where the operator reads what to grant, and who does what beat cannot.
DOCS = "docs/production-databases.md#on-managed-roles"

#: (table or sequence, privilege) beat cannot schedule without.
SCHEDULING: tuple[tuple[str, str], ...] = (
    ("cronstore_periodic_task", "SELECT"),
    ("cronstore_periodic_task", "UPDATE"),
    ("cronstore_fire", "SELECT"),
    ("cronstore_fire", "INSERT"),
    ("cronstore_fire", "UPDATE"),
    ("cronstore_beat", "SELECT"),
    ("cronstore_beat", "INSERT"),
    ("cronstore_beat", "UPDATE"),
    ("cronstore_alembic_version", "SELECT"),
    # PostgreSQL only: the ids of the ledger rows a claim inserts.
    ("cronstore_fire_id_seq", "USAGE"),
)

#: (table, privilege) of beat's housekeeping, and what it does with it.
HOUSEKEEPING: dict[tuple[str, str], str] = {
    ("cronstore_fire", "DELETE"): "prune the fire ledger",
    ("cronstore_alert", "DELETE"): "prune old alert episodes",
    ("cronstore_audit", "DELETE"): "prune the audit trail",
}


def needed(postgres: bool) -> list[tuple[str, str]]:
    """Return every (table or sequence, privilege) the role is checked for."""
    pairs = [*SCHEDULING, *HOUSEKEEPING]
    return pairs if postgres else [p for p in pairs if not p[0].endswith("_seq")]


@dataclass(frozen=True)
class RoleFacts:
    """What the store read of the role it connects as."""

    #: The role's name (PostgreSQL ``current_user``, MariaDB ``CURRENT_USER()``).
    role: str
    #: The hot tables the role may not ``VACUUM`` (it does not own them); PostgreSQL only.
    not_owned: tuple[str, ...] = ()
    #: (table or sequence, privilege) of :func:`needed` the role lacks.
    missing: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RoleNote:
    """One thing of beat's work the role cannot do."""

    #: ``vacuum``, ``prune`` or ``scheduling``.
    kind: str
    #: One line for an operator, naming the tables and where the fix is documented.
    text: str

    @property
    def breaks_scheduling(self) -> bool:
        """Whether beat cannot fire at all with this role (not only skip housekeeping)."""
        return self.kind == "scheduling"


def role_notes(facts: RoleFacts) -> list[RoleNote]:
    """Return a note per thing ``facts``'s role cannot do: scheduling first, then
    pruning, then vacuum; empty when it may do all of beat's work."""
    notes: list[RoleNote] = []
    missing = set(facts.missing)
    lacking = [p for p in SCHEDULING if p in missing]
    if lacking:
        notes.append(
            RoleNote(
                "scheduling",
                f"scheduling: role {facts.role} lacks {_pairs(lacking)}; a beat with this "
                f"role cannot claim, publish or write its heartbeat, so nothing fires "
                f"(grant them: see {DOCS})",
            )
        )
    pruning = [p for p in HOUSEKEEPING if p in missing]
    if pruning:
        what = ", ".join(HOUSEKEEPING[p] for p in pruning)
        notes.append(
            RoleNote(
                "prune",
                f"prune: role {facts.role} lacks {_pairs(pruning)}; beat cannot {what} "
                f"(cronstore_history_days), so they grow until a role that may runs "
                f"`cronstore prune`: see {DOCS}",
            )
        )
    if facts.not_owned:
        notes.append(
            RoleNote(
                "vacuum",
                f"vacuum: role {facts.role} is not the owner of "
                f"{', '.join(facts.not_owned)}; beat cannot VACUUM them (autovacuum or "
                f"the owner must): see {DOCS}",
            )
        )
    return notes


def _pairs(pairs: list[tuple[str, str]]) -> str:
    """``DELETE on cronstore_fire, cronstore_alert; USAGE on cronstore_fire_id_seq``."""
    by_privilege: dict[str, list[str]] = {}
    for table, privilege in pairs:
        by_privilege.setdefault(privilege, []).append(table)
    return "; ".join(f"{p} on {', '.join(tables)}" for p, tables in by_privilege.items())
