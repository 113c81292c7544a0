"""No module of gliding_core keeps per-memory state: the memory, or what it owns, holds it.

A module-level registry keyed by memories (sessions, boards ...) hides who owns a thing and
how long it lives: the memory cannot close it, and two memories of one process share the module.
``Memory`` owns its scheduler and stale-turn tracker, a ``Session`` its conversation ledger.

The scan reads the top level of every module (and of every class at the top level) and flags
what can hold state from one call to the next:
- a weak container (``WeakKeyDictionary``, ``WeakValueDictionary``, ``WeakSet``), the registry
  pattern itself;
- an empty mutable container (``{}``, ``[]``, ``set()``, ``dict()``, ``OrderedDict()``,
  ``defaultdict(...)``, ``deque()``...), made to be filled at run time;
- an instance of a class of the module whose ``__init__`` makes such a container (a cache);
- a name a function rebinds with ``global`` (a lazily made singleton);
- an annotation naming a per-memory type (``dict[Session, ...]``), and a memoised function
  (``lru_cache``) taking one: its cache is keyed by it.
A flagged name passes only when ``PROCESS_WIDE`` says why it is the same for every memory of
the process; the last two kinds always fail.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import gliding_core

ROOT = Path(gliding_core.__file__).parent

# What each memory has its own of: a container keyed by one (or holding one) is per-memory state.
PER_MEMORY = frozenset(
    {
        "AgentHandle",
        "Blackboard",
        "Conversation",
        "Coordination",
        "CoordinationDB",
        "DenseIndex",
        "EventBus",
        "HybridSearch",
        "L0Store",
        "Memory",
        "Projector",
        "Scheduler",
        "Session",
        "SessionServices",
        "StaleTurns",
        "ViewCache",
    }
)
WEAK = frozenset({"WeakKeyDictionary", "WeakValueDictionary", "WeakSet"})
EMPTY_CALLS = frozenset(
    {"dict", "list", "set", "OrderedDict", "defaultdict", "deque", "Counter", "ChainMap"}
)
MEMOISE = frozenset({"lru_cache", "cache"})

# Module-level state that is the same for every memory of the process, with the reason.
PROCESS_WIDE: dict[str, str] = {
    "gliding_core.boundary._resolved": (
        "each backend's exception classes, resolved once by name: facts about installed packages"
    ),
    "gliding_core.projection.budget._COUNTS": (
        "token counts keyed by the encoding and the text: a text counts the same for any memory"
    ),
    "gliding_core.projection.compaction._COMPACTED": (
        "compacted JSON-LD keyed by a node's expanded JSON: the context is fixed, so the result"
        " depends on nothing else"
    ),
    "gliding_core.hyperspace.vectors._found": (
        "the process's BLAS libraries, found again when modules were imported since: facts"
        " about the process, limited for every memory alike"
    ),
    "gliding_core.projection.artifacts._ranking": (
        "one in-memory FTS5 table, empty between rankings (each runs in a rolled-back"
        " transaction under a lock): it keeps nothing of any memory"
    ),
}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _name(node: ast.expr) -> str:
    """The last name of a called or annotated expression (``weakref.WeakSet`` -> ``WeakSet``)."""
    if isinstance(node, ast.Call):
        return _name(node.func)
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _names_in(node: ast.AST | None) -> set[str]:
    """Every name an annotation mentions, string annotations parsed."""
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _names_in(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return set()
    found = set()
    for inner in ast.walk(node):
        if isinstance(inner, (ast.Name, ast.Attribute)):
            found.add(_name(inner))
        elif inner is not node and isinstance(inner, ast.Constant):
            found |= _names_in(inner)
    return found


def _is_empty_container(value: ast.expr) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set)):
        return not (value.keys if isinstance(value, ast.Dict) else value.elts)
    if isinstance(value, ast.Call) and _name(value) in EMPTY_CALLS:
        return not value.args or _name(value) == "defaultdict"
    return False


def _is_container(value: ast.expr | None) -> bool:
    return value is not None and (_is_empty_container(value) or _name(value) in WEAK)


def _holds_containers(tree: ast.Module) -> set[str]:
    """The classes of a module whose ``__init__`` assigns a container to ``self``."""
    found = set()
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for inner in node.body:
            if isinstance(inner, ast.FunctionDef) and inner.name == "__init__":
                for statement in ast.walk(inner):
                    value = getattr(statement, "value", None)
                    if isinstance(statement, (ast.Assign, ast.AnnAssign)) and _is_container(value):
                        found.add(node.name)
    return found


def _assignments(
    body: list[ast.stmt], *, in_class: bool
) -> Iterator[tuple[str, ast.expr, ast.expr | None]]:
    """``(name, value, annotation)`` of each assignment of a value to a name in ``body``.

    In a class body an annotated name is an instance field (a dataclass's, a model's) unless
    its annotation says ``ClassVar``; a declaration without a value holds nothing.
    """
    for node in body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    yield target.id, node.value, None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.value is None or (in_class and "ClassVar" not in _names_in(node.annotation)):
                continue
            yield node.target.id, node.value, node.annotation


def _memoised(node: ast.stmt) -> ast.FunctionDef | None:
    if isinstance(node, ast.FunctionDef) and any(_name(d) in MEMOISE for d in node.decorator_list):
        return node
    return None


def module_state(module: str, source: str) -> list[str]:
    """What ``module`` keeps at its top level that may be per-memory state (see the docstring)."""
    tree = ast.parse(source)
    caches = _holds_containers(tree)
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    found: list[str] = []
    scopes: list[tuple[str, list[ast.stmt]]] = [("", tree.body)]
    scopes += [(f"{n.name}.", n.body) for n in tree.body if isinstance(n, ast.ClassDef)]
    for prefix, body in scopes:
        for name, value, annotation in _assignments(body, in_class=bool(prefix)):
            where = f"{module}.{prefix}{name}"
            if _names_in(annotation) & PER_MEMORY:
                found.append(f"{where}: annotated with a per-memory type (always refused)")
            elif _name(value) in WEAK:
                found.append(f"{where}: a weak container, a registry of objects")
            elif _is_empty_container(value):
                found.append(f"{where}: an empty container, filled at run time")
            elif isinstance(value, ast.Call) and _name(value) in caches:
                found.append(f"{where}: an instance of {_name(value)}, which holds containers")
            elif isinstance(value, ast.Call) and _name(value.func) in MEMOISE and value.args:
                wrapped = functions.get(_name(value.args[0]))
                if wrapped is not None and _per_memory_parameters(wrapped):
                    found.append(f"{where}: memoises {wrapped.name}, keyed by a per-memory type")
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found += [f"{module}.{name}: rebound by a function (global)" for name in node.names]
    for node in tree.body:
        function = _memoised(node)
        if function is not None and _per_memory_parameters(function):
            found.append(f"{module}.{function.name}: memoised, keyed by a per-memory type")
    return list(dict.fromkeys(found))


def _per_memory_parameters(function: ast.FunctionDef) -> bool:
    arguments = function.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return any(_names_in(a.annotation) & PER_MEMORY for a in every)


def _refused(found: list[str]) -> list[str]:
    """The findings no reason excuses: not process-wide, or of a kind never allowed."""
    return [
        line
        for line in found
        if line.split(":")[0] not in PROCESS_WIDE
        or "per-memory type" in line
        or "weak container" in line
    ]


MODULES = {_module(p): p for p in sorted(ROOT.rglob("*.py"))}


@pytest.mark.parametrize("module", list(MODULES))
def test_a_module_keeps_no_per_memory_state(module: str) -> None:
    found = module_state(module, MODULES[module].read_text(encoding="utf-8"))
    assert _refused(found) == []


def test_every_process_wide_entry_names_state_that_is_there() -> None:
    """An excuse for state that is gone must go too (so the list says what is kept)."""
    found = {
        line.split(":")[0]
        for module, path in MODULES.items()
        for line in module_state(module, path.read_text(encoding="utf-8"))
    }
    assert set(PROCESS_WIDE) <= found


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "import weakref\n_TRACKERS: weakref.WeakKeyDictionary[Any, X] = "
            "weakref.WeakKeyDictionary()\n",
            "weak container",
        ),
        ("from weakref import WeakValueDictionary\nS = WeakValueDictionary()\n", "weak container"),
        ("_LEDGERS: dict[Session, int] = {}\n", "per-memory type"),
        ("_BY_MEMORY: 'dict[str, Memory]' = {'a': m}\n", "per-memory type"),
        ("_SEEN = set()\n", "empty container"),
        ("from collections import defaultdict\n_BY = defaultdict(list)\n", "empty container"),
        (
            "class _Memo:\n    def __init__(self):\n        self.kept = {}\n_MEMO = _Memo()\n",
            "holds containers",
        ),
        ("_one = None\ndef get():\n    global _one\n    _one = 1\n", "global"),
        (
            "import functools\n@functools.lru_cache(maxsize=8)\n"
            "def reader(memory: Memory) -> int:\n    return 1\n",
            "per-memory type",
        ),
        ("class Board:\n    _instances = {}\n", "empty container"),
        ("class Board:\n    _open: ClassVar[list[Blackboard]] = [b]\n", "per-memory type"),
    ],
)
def test_the_scan_finds_module_state(source: str, expected: str) -> None:
    found = _refused(module_state("gliding_core.example", source))
    assert len(found) == 1
    assert expected in found[0]


def test_the_scan_leaves_constant_tables_and_memoised_pure_functions() -> None:
    source = (
        "import functools\n"
        "AREA_OF = {'plan': 'plan', 'do': 'execution'}\n"
        "ROLES = ('plan', 'do')\n"
        "LIMIT: int = 3\n"
        "@functools.lru_cache(maxsize=64)\n"
        "def graph(task: str, area: str) -> str:\n    return task + area\n"
        "class Sentinel:\n    pass\n"
        "ABSENT = Sentinel()\n"
        "class Team:\n    memory: Memory\n    handles: dict[str, AgentHandle] = field()\n"
    )
    assert module_state("gliding_core.example", source) == []
