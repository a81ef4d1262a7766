"""The shape of the package: layers, no import circles, small modules, explicit exports.

An import walk over src/stampede (the `import` statements a module runs, at module
level or inside functions; `if TYPE_CHECKING:` blocks excluded) checks that

- no two modules import each other, directly or round a circle;
- no module imports from a layer above its own (`LAYERS`, bottom first);
- `stampede.errors` imports nothing of stampede;
- no module is longer than `MAX_LINES`;
- every public module (no `_` in its dotted name) declares `__all__`, and every
  name in it exists (anyio's `test_all_attributes` does the same).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import stampede

SRC = Path(stampede.__file__).parent
MAX_LINES = 400

# Bottom first. A module may import its own layer or any layer below it. The first
# pattern that matches a module's dotted name (without the leading "stampede.")
# gives its layer.
LAYERS: list[tuple[str, list[str]]] = [
    ("errors", [r"errors"]),
    (
        "pure",  # no I/O; formats, protocols, judgements, options
        [
            r"typing",
            r"wire(\..*)?",
            r"keys(\..*)?",
            r"verdict",
            r"results",
            r"metrics",
            r"tracing",
            r"versions",
            r"options",
            r"_lua(\..*)?",
            r"_backoff",
            r"_deadline",
            r"_compiled",
            r"_startup",
            r"_commands",
        ],
    ),
    ("topology", [r"topology(\..*)?"]),
    (
        "core",  # groups over a topology: write, read, repair, transactions, co-located helpers
        [
            r"_pipeline",
            r"_payload",
            r"_health",
            r"_kept",
            r"_write",
            r"_future",
            r"_update",
            r"_read",
            r"atomic",
            r"eventlog",
            r"fanout",
            r"_txn(\..*)?",
            r"repair(\..*)?",
            r"scan",
        ],
    ),
    ("api", [r"_client", r"_connect", r"_typed", r"__init__"]),
    (
        "edges",  # the command line, the test harness, entry points
        [
            r"chaos(\..*)?",
            r"demo(\..*)?",
            r"cli(\..*)?",
            r"testing(\..*)?",
            r"_console",
            r"mypy_plugin",
            r"__main__",
        ],
    ),
]


def _layer_of(module: str) -> int:
    name = module.removeprefix("stampede.") if module != "stampede" else "__init__"
    for rank, (_, patterns) in enumerate(LAYERS):
        if any(re.fullmatch(p, name) for p in patterns):
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")


def _modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _target(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path) -> set[str]:
    """The stampede modules `module` imports when it runs (not under TYPE_CHECKING)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.ImportFrom):
            target = _target(module, path, node)
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.add(full if full in MODULES else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    found.discard(module)
    return {m for m in found if m in MODULES}


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            strong(v)
    return found


def _is_package_parent(module: str, target: str) -> bool:
    """A package's facade importing from its own submodules is not a circle's edge."""
    return target.startswith(module + ".")


def test_the_walk_sees_the_imports() -> None:
    """A sanity check of the walk itself: known edges are found."""
    assert "stampede.errors" in GRAPH["stampede.wire._envelope"]
    assert "stampede._pipeline" in GRAPH["stampede._read"]


def test_no_import_circles() -> None:
    assert _cycles() == []


def test_no_upward_imports() -> None:
    upward = [
        f"{module} ({LAYERS[_layer_of(module)][0]}) imports {target} "
        f"({LAYERS[_layer_of(target)][0]})"
        for module, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if _layer_of(target) > _layer_of(module) and not _is_package_parent(module, target)
    ]
    assert upward == []


def test_errors_import_nothing_of_stampede() -> None:
    assert GRAPH["stampede.errors"] == set()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_are_small(module: str) -> None:
    lines = MODULES[module].read_text().count("\n")
    assert lines <= MAX_LINES, f"{module} has {lines} lines; split it (at most {MAX_LINES})"


PUBLIC = sorted(m for m in MODULES if not any(p.startswith("_") for p in m.split(".")))


@pytest.mark.parametrize("module", PUBLIC)
def test_public_modules_declare_all(module: str) -> None:
    """Every public module says what it exports, and exports only what exists."""
    if module.endswith(".__main__") or module == "stampede.mypy_plugin":
        pytest.skip("an entry point, not an API")
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:  # an optional extra's module (the CLI needs click)
        pytest.skip(f"needs an optional dependency: {exc}")
    names = getattr(imported, "__all__", None)
    assert names is not None, f"{module} has no __all__"
    missing = [n for n in names if not hasattr(imported, n)]
    assert missing == [], f"{module}.__all__ names what it does not define: {missing}"


def test_property_tests_have_no_time_limit() -> None:
    """A property test's verdict must not depend on the machine's speed: the suite's
    hypothesis profile sets no deadline per example."""
    from hypothesis import settings

    assert settings().deadline is None


BUILTIN_RAISES = {
    # a caller's mistake raised as a built-in exception is allowed only here, each for
    # its reason; everything else a user can get wrong raises a StampedeError subclass
    # (ConfigurationError is a ValueError, InvalidValueError a TypeError, so `except
    # ValueError` code keeps working)
    ("stampede._payload", "ValueError"): "internal: keys and values come from one dict",
    ("stampede.repair._jobs", "ValueError"): "caught: a malformed job is dead-lettered",
    ("stampede.options", "ValueError"): "pydantic's validator: open() raises ConfigurationError",
    ("stampede._update", "RuntimeError"): "unreachable: the loop returns or raises",
    ("stampede.topology._session", "RuntimeError"): "a context manager used outside `with`",
    ("stampede.wire._txn", "RuntimeError"): "unreachable: every slot has a hash name",
    ("stampede._deadline", "RuntimeError"): "internal: called from a task only",
}


def test_bad_input_raises_stampede_errors() -> None:
    """No module raises `ValueError`, `TypeError`, `KeyError` or `RuntimeError` itself
    outside the reviewed list above: bad input gets a StampedeError naming what was
    wrong (it failed once: eventlog, atomic, fanout, the worker and Envelope raised
    bare ValueError and TypeError)."""
    found: set[tuple[str, str]] = set()
    for module, path in MODULES.items():
        if module.startswith("stampede.testing"):
            continue  # the test harness, not the library
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                name = getattr(node.exc.func, "id", "")
                if name in {"ValueError", "TypeError", "KeyError", "RuntimeError"}:
                    found.add((module, name))
    assert sorted(found - set(BUILTIN_RAISES)) == []
    assert sorted(set(BUILTIN_RAISES) - found) == []  # the list stays current
