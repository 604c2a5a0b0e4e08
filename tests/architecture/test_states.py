"""The fire-state vocabulary: its values, how a member turns into text, and its one home."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import celery_cronstore
from celery_cronstore import states
from celery_cronstore.states import FireState
from celery_cronstore.store.schema import fire

PACKAGE = Path(celery_cronstore.__file__).parent
DOCS = PACKAGE.parent / "docs"

#: The states the ledger stores (docs: reliability.md, crontask.md, cli.md).
STORED = {
    "claimed",
    "sending",
    "published",
    "started",
    "retrying",
    "succeeded",
    "failed",
    "timed_out",
    "dropped",
    "skipped",
    "missed",
    "expired",
    "abandoned",
    "lost",
    "buffered",
    "replaced",
}

#: String constants equal to a state value that do not mean a fire state, with why.
ALLOWED = {
    ("contrib/django/models.py", "claimed"): "verbose name of the claimed_at column",
    ("contrib/django/models.py", "published"): "verbose name of the published_at column",
    ("contrib/django/models.py", "started"): "verbose name of the started_at column",
    ("contrib/django/history.py", "published"): "template key of the published_at time",
    ("contrib/django/history.py", "started"): "template key of the started_at time",
}


def test_values_are_the_stored_states() -> None:
    assert {s.value for s in FireState} == STORED
    assert len(FireState) == len(STORED)
    assert set(states.FIRE_STATES) == set(FireState)


def test_values_fit_the_state_column() -> None:
    width = fire.c.state.type.length
    assert width is not None
    assert all(len(s.value) <= width for s in FireState)


def test_docs_name_every_state() -> None:
    named = set()
    for page in DOCS.glob("*.md"):
        named.update(re.findall(r"`([a-z_]+)`", page.read_text(encoding="utf-8")))
    assert named >= STORED


@pytest.mark.parametrize("state", list(FireState))
def test_member_turns_into_its_value(state: FireState) -> None:
    assert str(state) == state.value
    assert f"{state}" == state.value
    assert f"{state:>12}" == f"{state.value:>12}"
    assert format(state) == state.value
    # Logging formats its arguments with %.
    assert "%s" % state == state.value  # noqa: UP031
    assert json.dumps(state) == json.dumps(state.value)
    assert json.dumps({"state": state}) == json.dumps({"state": state.value})
    assert state == state.value
    assert hash(state) == hash(state.value)
    assert FireState(state.value) is state


def test_drivers_send_the_value() -> None:
    # PyMySQL escapes a str subclass through str(); psycopg picks its dumper by the MRO.
    pymysql = pytest.importorskip("pymysql")
    pytest.importorskip("psycopg")
    from psycopg.adapt import PyFormat, Transformer

    state = FireState.TIMED_OUT
    assert pymysql.converters.escape_item(state, "utf8mb4") == "'timed_out'"
    dumper = Transformer().get_dumper(state, PyFormat.AUTO)
    assert bytes(dumper.dump(state)) == b"timed_out"


def test_sets_hold_members_only() -> None:
    groups = [
        states.IN_FLIGHT,
        states.STARTABLE,
        states.WORKER_RUNNING,
        states.FINISH_STATES,
        states.REFUSALS,
        states.PROBLEM_STATES,
        states.NOT_RUN,
        states.BEAT_OUTCOMES,
    ]
    for group in groups:
        assert group
        assert all(isinstance(s, FireState) for s in group)


def test_old_names_still_import() -> None:
    from celery_cronstore import policy, records
    from celery_cronstore.store import read

    assert records.FIRE_STATES is states.FIRE_STATES
    assert policy.FINISH_STATES is states.FINISH_STATES
    assert read.PROBLEM_STATES is states.PROBLEM_STATES


def _modules() -> list[Path]:
    return sorted(
        path
        for path in PACKAGE.rglob("*.py")
        if path.name != "states.py" or path.parent != PACKAGE
        if "migrations" not in path.relative_to(PACKAGE).parts
    )


def _docstrings(tree: ast.Module) -> set[int]:
    """Return the ids of every string that is a statement of its own (documentation)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def test_no_state_literal_outside_states_module() -> None:
    found = []
    for path in _modules():
        where = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=where)
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in STORED
                and id(node) not in docs
                and (where, node.value) not in ALLOWED
            ):
                found.append(f"{where}:{node.lineno}: {node.value!r}")
    assert not found, "use celery_cronstore.states.FireState instead of:\n" + "\n".join(found)


def test_allow_list_is_still_needed() -> None:
    # A stale entry would let a real state literal back in unnoticed.
    for where, value in ALLOWED:
        tree = ast.parse((PACKAGE / where).read_text(encoding="utf-8"))
        assert any(
            isinstance(node, ast.Constant) and node.value == value for node in ast.walk(tree)
        ), (where, value)
