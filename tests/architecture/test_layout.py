"""The package's shape: no import circle (type-only imports included), small modules, a
small top level, and no class built from mixins that share private state.

These are the "done when" lines of the architecture step, kept as tests so that the tree
cannot drift back: a new circle, a module past the size bound or a stub-based mixin fails
here with the names to fix.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "celery_cronstore"
#: A module past this many lines is split along its seams (migrations are history).
MAX_LINES = 430
#: The top level keeps what every wing shares (ten modules, `__init__` and the two
#: deprecated homes); the rest lives in beat/, worker/, store/, policy/, timers/ and the windows.
MAX_TOP_LEVEL = 13


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """Yield the package modules ``name`` imports at module level or for type checking.

    Imports inside functions run when called, after every module is loaded: they are the
    documented way to defer an optional dependency, not a circle at import time.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def walk(body: list[ast.stmt]) -> Iterator[ast.stmt]:
        for node in body:
            yield node
            if isinstance(node, ast.If):  # `if TYPE_CHECKING:` and version switches
                yield from walk(node.body)
                yield from walk(node.orelse)
            elif isinstance(node, ast.Try):
                yield from walk(node.body)

    for node in walk(tree.body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    yield full
                elif base in known:
                    yield base


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: set(_imports(name, path, known)) - {name} for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_circle_finder_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_circle_type_only_imports_included() -> None:
    circles = _circles(_graph())
    assert circles == [], f"import circles (break each one): {circles}"


def test_no_module_is_too_long_to_read_in_one_sitting() -> None:
    long = {
        name: lines
        for name, path in _modules().items()
        if ".migrations." not in name
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these along their seams (> {MAX_LINES} lines): {long}"


def test_the_top_level_holds_only_what_every_wing_shares() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, top
    for wing in ("beat", "worker", "store", "policy", "timers"):
        assert (PACKAGE / wing / "__init__.py").is_file(), wing


@pytest.mark.parametrize("name", ["NotImplementedError"])
def test_no_class_reaches_its_siblings_through_stubs(name: str) -> None:
    """A method that only raises ``NotImplementedError`` in a non-abstract helper class is
    how mixins shared private state; the parts now own theirs."""
    offenders = []
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for fn in cls.body:
                if not isinstance(fn, ast.FunctionDef) or not fn.name.startswith("_"):
                    continue
                body = [s for s in fn.body if not isinstance(s, ast.Expr)]
                if len(body) == 1 and isinstance(body[0], ast.Raise) and name in ast.dump(body[0]):
                    offenders.append(f"{module}.{cls.name}.{fn.name}")
    assert offenders == [], offenders


def test_deprecated_homes_still_import_with_a_warning() -> None:
    import importlib
    import sys

    import celery_cronstore

    for old, attr in (
        ("celery_cronstore.scheduler", "Scheduler"),
        ("celery_cronstore.task", "CronTask"),
    ):
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match="deprecated"):
            module = importlib.import_module(old)
        assert getattr(module, attr) is getattr(celery_cronstore, attr)
