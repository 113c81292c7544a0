"""The layers of gliding_core: a module imports its own layer or lower ones, and never an adapter.

The order, lowest first, is ``LAYERS``; a module's layer is its first path component under
``gliding_core`` (a folder, or a module at the root). Every import counts: at module level,
inside a function, under ``if TYPE_CHECKING:``, and a string given to ``importlib.import_module``
(a ``TYPE_CHECKING`` import still says that the module knows the layer above). The root package
(``from gliding_core import X``) re-exports every layer, so only the command line imports it.
``test_imports.py`` checks the other half: no import cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import gliding_core

ROOT = Path(gliding_core.__file__).parent
REPOSITORY = ROOT.parent.parent
PACKAGE = "gliding_core"
ADAPTERS = ("gliding_langchain", "gliding_llamaindex")

# Lowest first: a module may import a module of its own layer or of a layer before it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "base",
        ("errors", "checks", "jsonld", "fields", "boundary", "tokens", "bus", "config", "framing"),
    ),
    ("L0", ("store",)),
    ("hyperspace", ("hyperspace",)),
    ("L1", ("attention", "session", "summarize", "topics")),
    ("coherence", ("coherence",)),
    ("L2", ("blackboard",)),
    ("L3", ("projection",)),
    ("view", ("view",)),
    ("facade", ("memory", "storage", "retention")),
    ("tools", ("tools",)),
    ("testing", ("testing",)),
    ("cli", ("cli",)),
]
RANK = {part: rank for rank, (_, parts) in enumerate(LAYERS) for part in parts}
NAME = {part: name for name, parts in LAYERS for part in parts}

# Upward imports known today, each with the reason it is still there. The test of such a module
# is expected to fail (strict: once the import is gone, the entry must go too).
KNOWN: dict[str, str] = {}


def _module(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p, ROOT): p for p in sorted(ROOT.rglob("*.py"))}


def _layer(module: str) -> str | None:
    """The first path component of ``module`` under the package, or ``None`` for the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _imports(source: str, module: str) -> Iterator[tuple[int, str]]:
    """Every ``(line, module)`` that ``source`` imports, wherever the import stands."""
    is_package = module in MODULES and MODULES[module].name == "__init__.py"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing module's package
                drop = node.level - 1 if is_package else node.level
                parent = module.rsplit(".", drop)[0] if drop else module
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:  # ``from package import module`` imports the module
                inner = f"{base}.{alias.name}"
                yield node.lineno, inner if inner in MODULES else base
        elif isinstance(node, ast.Call) and _is_import_call(node.func):
            for argument in node.args[:1]:
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                    yield node.lineno, argument.value


def _is_import_call(function: ast.expr) -> bool:
    name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
    return name in ("import_module", "__import__")


def violations(module: str, source: str) -> list[str]:
    """What ``module`` (with ``source``) imports against the layer order, as ``line -> target``."""
    own = _layer(module)
    found = []
    for line, target in dict.fromkeys(_imports(source, module)):
        top = target.split(".")[0]
        if top in ADAPTERS:
            found.append(f"{module}:{line} -> {target} (an adapter)")
        elif top != PACKAGE:
            continue
        elif target == PACKAGE:
            if own != "cli":
                found.append(f"{module}:{line} -> {target} (the root package: only cli/ may)")
        elif RANK[_layer(target) or ""] > RANK[own or ""]:
            layer = NAME[_layer(target) or ""]
            found.append(f"{module}:{line} -> {target} ({layer}, above {NAME[own or '']})")
    return found


def _cases() -> Iterator[object]:
    for module in MODULES:
        if module == PACKAGE:  # the re-exporting facade imports every layer
            continue
        marks = []
        if module in KNOWN:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN[module]))
        yield pytest.param(module, id=module, marks=marks)


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in MODULES if m != PACKAGE and _layer(m) not in RANK]
    assert not unplaced, f"place these in LAYERS: {unplaced}"


def test_the_root_holds_at_most_15_modules() -> None:
    assert len(list(ROOT.glob("*.py"))) <= 15


@pytest.mark.parametrize("module", list(_cases()))
def test_a_module_imports_no_higher_layer_and_no_adapter(module: str) -> None:
    assert violations(module, MODULES[module].read_text(encoding="utf-8")) == []


def test_no_known_violation_is_stale() -> None:
    assert set(KNOWN) <= set(MODULES)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_adapters_product_imports_no_command_line(adapter: str) -> None:
    """Outside its ``cli/`` folder an adapter imports neither its own nor the engine's CLI."""
    root = REPOSITORY / adapter
    found = []
    for path in sorted(root.rglob("*.py")):
        module = _module(path, root)
        if module.split(".")[1:2] == ["cli"]:
            continue
        for line, target in _imports(path.read_text(encoding="utf-8"), module):
            if target.split(".")[1:2] == ["cli"] and target.split(".")[0] in (PACKAGE, adapter):
                found.append(f"{module}:{line} -> {target}")
    assert found == []


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("gliding_core.store.sqlite", "from gliding_core.memory import Memory\n", "facade"),
        ("gliding_core.store.sqlite", "def f():\n    import gliding_core.view.chatlog\n", "view"),
        (
            "gliding_core.blackboard.board",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from gliding_core.projection import Projector\n",
            "L3",
        ),
        (
            "gliding_core.cli.command",
            "import importlib\nimportlib.import_module('gliding_langchain.cli.agents_bench')\n",
            "an adapter",
        ),
        ("gliding_core.view.team", "from gliding_core import Memory\n", "the root package"),
        ("gliding_core.jsonld", "from gliding_core.store import sqlite\n", "L0"),
        ("gliding_core.store.scope", "from . import sqlite\nfrom ..view import sources\n", "view"),
    ],
)
def test_the_checker_finds_an_upward_import(module: str, source: str, expected: str) -> None:
    found = violations(module, source)
    assert len(found) == 1
    assert f"({expected}" in found[0]


def test_the_checker_allows_the_same_and_lower_layers() -> None:
    source = (
        "from gliding_core.errors import GlidingError\n"
        "from gliding_core.store.sqlite import L0Store\n"
        "from gliding_core.blackboard.coordination import leases\n"
        "from gliding_core.projection.scheduler import Scheduler\n"
    )
    assert violations("gliding_core.view.frame_source", source) == []
    assert violations("gliding_core.cli.command", "from gliding_core import __version__\n") == []
