"""What health says a database role cannot do of beat's work (``policy.roles``)."""

from __future__ import annotations

import pytest

from celery_cronstore.policy.roles import (
    DOCS,
    HOUSEKEEPING,
    SCHEDULING,
    RoleFacts,
    needed,
    role_notes,
)

HOT = ("cronstore_periodic_task", "cronstore_fire")


@pytest.mark.parametrize(
    ("facts", "kinds", "fragments"),
    [
        (RoleFacts("owner"), [], []),
        (
            RoleFacts("app", not_owned=HOT),
            ["vacuum"],
            [
                "vacuum: role app is not the owner of cronstore_periodic_task, cronstore_fire;"
                " beat cannot VACUUM them (autovacuum or the owner must)",
            ],
        ),
        (
            RoleFacts("app", missing=(("cronstore_fire", "DELETE"),)),
            ["prune"],
            ["prune: role app lacks DELETE on cronstore_fire; beat cannot prune the fire ledger"],
        ),
        (
            RoleFacts(
                "app",
                missing=(("cronstore_audit", "DELETE"), ("cronstore_alert", "DELETE")),
            ),
            ["prune"],
            [
                "DELETE on cronstore_alert, cronstore_audit;",  # in the table's order
                "prune old alert episodes, prune the audit trail",
            ],
        ),
        (
            RoleFacts(
                "ro",
                not_owned=HOT,
                missing=(
                    ("cronstore_fire", "INSERT"),
                    ("cronstore_fire_id_seq", "USAGE"),
                    ("cronstore_fire", "DELETE"),
                ),
            ),
            ["scheduling", "prune", "vacuum"],
            [
                "scheduling: role ro lacks INSERT on cronstore_fire; USAGE on "
                "cronstore_fire_id_seq; a beat with this role cannot claim",
                "nothing fires",
            ],
        ),
    ],
)
def test_role_notes(facts: RoleFacts, kinds: list[str], fragments: list[str]) -> None:
    notes = role_notes(facts)
    assert [n.kind for n in notes] == kinds
    text = "\n".join(n.text for n in notes)
    for fragment in fragments:
        assert fragment in text
    assert all(DOCS in n.text for n in notes)
    assert [n.breaks_scheduling for n in notes] == [k == "scheduling" for k in kinds]


def test_a_privilege_nobody_checks_is_ignored() -> None:
    assert role_notes(RoleFacts("app", missing=(("cronstore_beat", "DELETE"),))) == []


def test_sequences_are_checked_on_postgresql_only() -> None:
    assert ("cronstore_fire_id_seq", "USAGE") in needed(postgres=True)
    assert not [p for p in needed(postgres=False) if p[1] == "USAGE"]
    assert set(needed(postgres=True)) == {*SCHEDULING, *HOUSEKEEPING}
