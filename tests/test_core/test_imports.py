"""The import graph of gliding_core: no cycle between its modules, or between its packages."""

from __future__ import annotations

import ast
from pathlib import Path

import gliding_core

ROOT = Path(gliding_core.__file__).parent


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    """Module -> the gliding_core modules it imports at module level (``__init__`` aside)."""
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if name == "gliding_core":  # the re-exporting facade imports everything
            continue
        targets: set[str] = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.add(node.module)
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
        graph[name] = {t for t in targets if t in modules and t != "gliding_core"}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as a path, or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph folded to top-level parts (``gliding_core.attention``, ``.session`` ...)."""

    def top(name: str) -> str:
        return ".".join(name.split(".")[:2])

    folded: dict[str, set[str]] = {}
    for source, targets in graph.items():
        folded.setdefault(top(source), set()).update(
            top(t) for t in targets if top(t) != top(source)
        )
    return folded


def test_no_module_imports_itself_through_others() -> None:
    graph = _graph()
    assert "gliding_core.view.conversation" in graph
    assert _cycle(graph) is None


def test_no_package_imports_itself_through_others() -> None:
    assert _cycle(_packages(_graph())) is None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
