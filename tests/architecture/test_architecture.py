"""The layering rules the tree promises (docs/architecture.md), checked on the source.

Only ``store/`` talks to SQLAlchemy's exceptions: it raises the package's own errors
(:class:`~celery_cronstore.errors.StoreUnavailableError` for a database that is away), so
every layer above catches those and never ``sqlalchemy.exc``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "celery_cronstore"

#: Directories (relative to the package) whose modules may use ``sqlalchemy.exc``: the
#: store, and the readers of other schedulers' tables (``cronstore import``), which turn
#: their database errors into ``OSError``/``LookupError`` for the command's report.
OWNERS = ("store/", "adopt/sources/")


def uses_sqlalchemy_exc(tree: ast.AST) -> list[str]:
    """Return how a module reaches ``sqlalchemy.exc`` (imports and ``sa.exc`` attributes)."""
    found: list[str] = []
    aliases: set[str] = set()  # names bound to the sqlalchemy package itself
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "sqlalchemy.exc" or alias.name.startswith("sqlalchemy.exc."):
                    found.append(f"line {node.lineno}: import {alias.name}")
                elif alias.name == "sqlalchemy":
                    aliases.add(alias.asname or "sqlalchemy")
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module == "sqlalchemy.exc" or node.module.startswith("sqlalchemy.exc."):
                found.append(f"line {node.lineno}: from {node.module} import ...")
            elif node.module == "sqlalchemy" and any(a.name == "exc" for a in node.names):
                found.append(f"line {node.lineno}: from sqlalchemy import exc")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "exc"
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            found.append(f"line {node.lineno}: {node.value.id}.exc")
    return found


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_nothing_above_the_store_uses_sqlalchemy_exc() -> None:
    offenders: list[str] = []
    for path in modules():
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(OWNERS):
            continue
        for use in uses_sqlalchemy_exc(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"celery_cronstore/{relative}, {use}")
    assert offenders == [], (
        "catch the store's errors (StoreUnavailableError, StoreError) instead:\n"
        + "\n".join(offenders)
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from sqlalchemy.exc import SQLAlchemyError", 1),
        ("import sqlalchemy.exc", 1),
        ("from sqlalchemy import exc", 1),
        ("import sqlalchemy as sa\ntry:\n    pass\nexcept sa.exc.OperationalError:\n    pass", 1),
        ("import sqlalchemy\nE = sqlalchemy.exc.DBAPIError", 1),
        ("import sqlalchemy as sa\nsa.select(1)", 0),
        ("from sqlalchemy import select\nexc = 1\nexc.real", 0),
        ("from celery_cronstore.errors import StoreUnavailableError", 0),
    ],
)
def test_the_check_sees_every_way_in(source: str, expected: int) -> None:
    assert len(uses_sqlalchemy_exc(ast.parse(source))) == expected
