"""Hostile names, args, owners and descriptions through the store API, on every backend.

Everything is bound as a parameter, so SQL fragments, quotes, driver placeholder syntax
(``%s``, ``:name``), unicode (emoji, right-to-left, combining marks) come back verbatim
and the tables stay intact. What a backend cannot store is refused up front with a
``ValueError`` naming the field: NUL characters (PostgreSQL rejects them in text), lone
surrogates (no driver can encode them) and text longer than its column.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from hostile import HOSTILE

from celery_cronstore.errors import DuplicateTaskError
from celery_cronstore.store import Store

TABLES = (
    "cronstore_periodic_task",
    "cronstore_fire",
    "cronstore_beat",
    "cronstore_alembic_version",
)


def tables_intact(store: Store) -> dict[str, int]:
    with store.engine.connect() as conn:
        return {t: conn.execute(sa.text(f"SELECT COUNT(*) FROM {t}")).scalar_one() for t in TABLES}


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_round_trips_verbatim(store: Store, text: str) -> None:
    owner = (text[:100], text)
    added = store.add(
        text,
        task=text,
        timer="hourly",
        args=[text, {"nested": [text]}, "\x00 inside JSON is escaped"],
        kwargs={text: text},
        options={"queue": text, "headers": {"x-note": text}},
        owner=owner,
        description=text * 3,
    )
    got = store.get(text)
    assert got == added
    assert (got.name, got.task, got.description) == (text, text, text * 3)
    assert got.args == [text, {"nested": [text]}, "\x00 inside JSON is escaped"]
    assert got.kwargs == {text: text}
    assert got.options == {"queue": text, "headers": {"x-note": text}}
    assert got.owner == owner
    assert [t.name for t in store.list(owner=owner)] == [text]
    assert [t.name for t in store.list(task=text)] == [text]
    assert store.update(text, description="changed").description == "changed"
    assert store.remove_owned_by(*owner) == 1
    assert store.list() == []
    assert tables_intact(store)["cronstore_alembic_version"] == 1


def test_names_are_compared_exactly(store: Store) -> None:
    """Case, accents and trailing spaces make different tasks (MariaDB: binary no-pad)."""
    names = ["task", "Task", "TASK", "task ", "tásk", "tas\u0301k"]
    for i, name in enumerate(names):
        store.add(name, task=f"t.{i}", timer="hourly")
    assert sorted(t.name for t in store.list()) == sorted(names)
    for i, name in enumerate(names):
        assert store.get(name).task == f"t.{i}"
    with pytest.raises(DuplicateTaskError):
        store.add("Task", task="t.x", timer="hourly")


def test_sql_fragments_do_not_execute(store: Store) -> None:
    store.add("keep", task="t", timer="hourly")
    for i, text in enumerate(HOSTILE[:4]):
        store.add(f"evil-{i}", task=text, timer="hourly", description=text, owner=("o", text))
        store.list(owner=("o", text))
        store.list(task=text, owner_type=text)
        store.remove_owned_by(text, text)
    counts = tables_intact(store)
    assert counts["cronstore_periodic_task"] == 5
    assert store.get("keep").task == "t"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "nul\x00name"}, "name contains a NUL character"),
        ({"task": "t\x00"}, "task contains a NUL character"),
        ({"description": "a\x00b"}, "description contains a NUL character"),
        ({"owner": ("mail\x00", "1")}, "owner type contains a NUL character"),
        ({"owner": ("mail", "1\x00")}, "owner id contains a NUL character"),
        ({"kwargs": {"k\x00": 1}}, None),  # escaped inside JSON: allowed
        ({"name": "lone \ud800 surrogate"}, "name is not valid Unicode"),
        ({"args": ["\udfff"]}, "args is not valid Unicode"),
        ({"name": "x" * 201}, "name is longer than 200 characters"),
        ({"name": "🚀" * 201}, "name is longer than 200 characters"),
        ({"task": "t" * 201}, "task is longer than 200 characters"),
        ({"owner": ("o" * 101, "1")}, "owner type is longer than 100"),
        ({"owner": ("o", "1" * 201)}, "owner id is longer than 200"),
        ({"description": "d" * 65_536}, "description is 65536 bytes"),
        ({"description": "é" * 40_000}, "description is 80000 bytes"),
        ({"args": ["a" * 70_000]}, "args is 70004 bytes"),
        ({"options": {"queue": "q" * 70_000}}, "options is 70012 bytes"),
        ({"source": "s" * 17}, "source is longer than 16"),
        ({"args": [float("nan")]}, "args must be JSON-serializable"),
        ({"options": {"serializer": "pickle"}}, "serializer 'pickle' is refused"),
        ({"options": {"headers": {"task": "os.system"}}}, "may not set .*task"),
        ({"options": {"headers": {"cronstore_name": "x"}}}, "may not set .*cronstore_name"),
    ],
)
def test_what_a_backend_cannot_store_is_refused_naming_the_field(
    store: Store, fields: dict[str, object], message: str | None
) -> None:
    values: dict[str, object] = {"task": "t", "timer": "hourly", **fields}
    name = values.pop("name", "n")
    if message is None:
        assert store.add(name, **values).name == name  # type: ignore[arg-type]
        return
    with pytest.raises(ValueError, match=message):
        store.add(name, **values)  # type: ignore[arg-type]
    assert store.list() == [], "nothing was written"
    store.add("ok", task="t", timer="hourly")
    changes = {k: v for k, v in fields.items() if k not in ("name", "source")}
    if changes:
        with pytest.raises(ValueError, match=message):
            store.update("ok", **changes)
    assert store.get("ok").description == ""


def test_longest_values_fit_on_every_backend(store: Store) -> None:
    text = "🚀" * 200
    store.add(
        text,
        task=text,
        timer="hourly",
        owner=("o" * 100, "i" * 200),
        description="é" * 32_767,  # 65,534 bytes: just fits a MySQL TEXT
        args=["a" * 65_000],
    )
    got = store.get(text)
    assert (len(got.description), len(got.args[0])) == (32_767, 65_000)
