"""Tool calls a hostile model makes, shared by the LangChain and LlamaIndex tool tests.

Every tool of both adapters has the same names and arguments. ``CASES`` pairs each tool with
each hostile argument shape (forged identity, extra, missing, wrong types, huge, deep, wide,
NaN, out-of-range integers, non-string keys, lone surrogates); each case builds its arguments
when run, so the 10 MB strings and 100,000-deep values live for one test only. ``snapshot``
reads, as the system, everything a call could change (every quad of the board, the messages,
the leases, the tasks' status, the memories saved in L0), so a test sees that a refused call
changed nothing, and no write was made as anyone, let alone as another agent.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from hypothesis import strategies as st

from gliding_core import HashEmbedder, Memory, Scope
from gliding_core.blackboard.vocabulary import AREAS, graph_area, is_bookkeeping

TASK = "urn:task:hostile"
OTHER_TASK = "urn:task:hostile:other"
ALICE = Scope.user("alice")
MB10 = 10_000_000

# A valid call of each tool (the hostile ones are made from it).
EXAMPLES: dict[str, dict[str, Any]] = {
    "read_node": {"iri": "urn:node:1"},
    "write_node": {"node": {"@id": "urn:node:2", "text": "x"}, "area": "execution"},
    "query_blackboard": {"sparql": "ASK { ?s ?p ?o }"},
    "claim_task": {},
    "complete_task": {},
    "list_ready_tasks": {},
    "take_lease": {"resource": "urn:node:3", "mode": "write"},
    "release_lease": {"resource": "urn:node:3"},
    "post_message": {"topic": "progress", "payload": {"done": 1}},
    "read_messages": {"since": 0},
    "project_frame": {"budget": 400},
    "search_memory": {"query": "tea", "limit": 2},
    "save_memory": {"content": "Alice prefers tea.", "action": "create"},
}
BOARD_TOOLS = [name for name in EXAMPLES if name not in ("search_memory", "save_memory")]

# Each tool's arguments: (kind, required). A kind ending in "?" takes null.
ARGUMENTS: dict[str, dict[str, tuple[str, bool]]] = {
    "read_node": {"iri": ("str", True)},
    "write_node": {
        "node": ("dict", True),
        "area": ("str", True),
        "based_on": ("int?", False),
        "lease_token": ("int?", False),
    },
    "query_blackboard": {"sparql": ("str", True), "areas": ("list?", False)},
    "claim_task": {},
    "complete_task": {},
    "list_ready_tasks": {},
    "take_lease": {"resource": ("str", True), "mode": ("mode", False)},
    "release_lease": {"resource": ("str", True)},
    "post_message": {"topic": ("str", True), "payload": ("dict?", False)},
    "read_messages": {"since": ("int", False), "topic": ("str?", False)},
    "project_frame": {"budget": ("int", False), "query": ("str?", False)},
    "search_memory": {"query": ("str", True), "limit": ("int", False)},
    "save_memory": {"content": ("str?", False), "action": ("action", False), "id": ("str?", False)},
}

# Values of the wrong JSON type for each kind (null is wrong where the kind takes none).
_NOT_STR: dict[str, Any] = {"list": ["urn:a"], "int": 5, "bool": True, "object": {"a": 1}}
_NOT_INT: dict[str, Any] = {"str": "5", "bool": True, "float": 1.5, "list": [1], "object": {}}
_NOT_DICT: dict[str, Any] = {"list": [{"@id": "urn:a"}], "str": '{"@id": "urn:a"}', "int": 1}
WRONG: dict[str, dict[str, Any]] = {
    "str": {**_NOT_STR, "null": None},
    "str?": _NOT_STR,
    "int": {**_NOT_INT, "null": None},
    "int?": _NOT_INT,
    "dict": {**_NOT_DICT, "null": None},
    "dict?": _NOT_DICT,
    "list?": {"str": "plan", "ints": [1, 2], "object": {"a": "plan"}},
    "mode": {"other": "shared", "int": 1, "null": None, "list": ["write"]},
    "action": {"other": "forget", "null": None, "bool": False},
}
_NOT_AGENTS = [area for area in AREAS if area != "agents"]  # the sweeper writes those
FORGED = ("agent", "role", "task", "handle", "name", "scope", "sender", "user_id", "writer")


@cache  # built once: a hundred thousand levels take a while to build and to collect
def deep_dict(levels: int) -> Any:
    """``{"a": {"a": ... "x"}}``, ``levels`` objects deep, built without recursion."""
    value: Any = "x"
    for _ in range(levels):
        value = {"a": value}
    return value


@cache
def deep_list(levels: int) -> Any:
    """``[[[... "x"]]]``, ``levels`` arrays deep, built without recursion."""
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


def deep_json(levels: int) -> str:
    """The JSON text of arguments ``{"a": [[[...]]]}``, ``levels`` arrays deep."""
    return '{"a": ' + "[" * levels + "1" + "]" * levels + "}"


@dataclass(frozen=True)
class Case:
    """One hostile call: the tool, what is wrong, how to build its arguments."""

    tool: str
    shape: str
    build: Callable[[], dict[Any, Any]]
    keywords: bool = True  # the arguments can be passed as Python keywords (string names)

    @property
    def id(self) -> str:
        return f"{self.tool}-{self.shape}"


def _first(tool: str) -> str | None:
    return next(iter(ARGUMENTS[tool]), None)


def _with(tool: str, **values: Any) -> Callable[[], dict[Any, Any]]:
    return lambda: {**EXAMPLES[tool], **values}


def _in_argument(tool: str, make: Callable[[], Any]) -> Callable[[], dict[Any, Any]]:
    """Put a value in the tool's first argument, or in an extra one when it takes none."""
    name = _first(tool) or "extra"
    return lambda: {**EXAMPLES[tool], name: make()}


def _cases(tool: str) -> list[Case]:
    cases = [Case(tool, f"forged-{name}", _with(tool, **{name: "planner"})) for name in FORGED]
    forged_all = {name: "planner" for name in FORGED} | {"role": "plan", "task": OTHER_TASK}
    cases.append(Case(tool, "forged-all", _with(tool, **forged_all)))
    cases.append(Case(tool, "extra", _with(tool, anything=[1, 2])))
    for name, (kind, required) in ARGUMENTS[tool].items():
        if required:
            cases.append(Case(tool, f"missing-{name}", _without(tool, name)))
        for label, value in WRONG[kind].items():
            cases.append(Case(tool, f"wrong-{name}-{label}", _with(tool, **{name: value})))
    cases += [
        Case(tool, "huge-string", _in_argument(tool, lambda: "x" * MB10)),
        Case(tool, "huge-key", lambda: {**EXAMPLES[tool], "k" * MB10: 1}),
        Case(tool, "deep-1200-objects", _in_argument(tool, lambda: deep_dict(1_200))),
        Case(tool, "deep-1200-arrays", _in_argument(tool, lambda: deep_list(1_200))),
        Case(tool, "deep-100000-objects", _in_argument(tool, lambda: deep_dict(100_000))),
        Case(tool, "deep-100000-arrays", _in_argument(tool, lambda: deep_list(100_000))),
        Case(tool, "huge-list", _in_argument(tool, lambda: [0] * 1_000_000)),
        Case(tool, "wide-object", _in_argument(tool, lambda: {str(i): i for i in range(200_000)})),
        Case(tool, "nan", _in_argument(tool, lambda: math.nan)),
        Case(tool, "inf", _in_argument(tool, lambda: [math.inf])),
        Case(tool, "minus-inf", _in_argument(tool, lambda: {"v": -math.inf})),
        Case(tool, "huge-int", _in_argument(tool, lambda: 2**70)),
        Case(tool, "surrogate", _in_argument(tool, lambda: "urn:\ud800")),
        Case(tool, "surrogate-key", _in_argument(tool, lambda: {"\udfff": 1})),
        Case(tool, "nested-int-key", _in_argument(tool, lambda: {1: "x"})),
        Case(tool, "bytes", _in_argument(tool, lambda: b"urn:x")),
        Case(tool, "int-key", _with_key(tool, 1), keywords=False),
        Case(tool, "none-key", _with_key(tool, None), keywords=False),
    ]
    return cases


def _without(tool: str, name: str) -> Callable[[], dict[Any, Any]]:
    return lambda: {k: v for k, v in EXAMPLES[tool].items() if k != name}


def _with_key(tool: str, key: object) -> Callable[[], dict[Any, Any]]:
    return lambda: {**EXAMPLES[tool], key: "x"}


CASES: list[Case] = [case for tool in EXAMPLES for case in _cases(tool)]


def open_memory() -> Memory:
    """A memory whose board has the agents' task, another task and a planner on each."""
    memory = Memory(embedder=HashEmbedder())
    coordination = memory.blackboard.coordination
    assert coordination is not None
    coordination.tasks.register(TASK)
    coordination.tasks.register(OTHER_TASK)
    planner = memory.agent("planner", role="plan", task=TASK)
    planner.write([{"@id": "urn:node:plan", "text": "the plan"}], area="plan")
    memory.agent("other-planner", role="plan", task=OTHER_TASK).write(
        [{"@id": "urn:node:other", "text": "another task's plan"}], area="plan"
    )
    planner.publish("progress", {"planned": True})
    memory.blackboard.flush()  # nothing left for the write-back to change on its own time
    return memory


def snapshot(memory: Memory) -> tuple[Any, ...]:
    """Everything a tool call could change, read as the system (agent records aside)."""
    board = memory.blackboard
    coordination = board.coordination
    assert coordination is not None
    rows = board.query("SELECT ?g ?s ?p ?o WHERE { GRAPH ?g { ?s ?p ?o } }").values()
    quads = [row for row in rows if _snapshot_graph(str(row["g"]))]
    messages = [
        (m.sequence, m.sender, m.topic, m.payload) for m in coordination.messages.read_since(0)
    ]
    leases = [(lease.resource, lease.holder, lease.mode) for lease in coordination.leases.leases()]
    tasks = [coordination.tasks.get(task).status for task in (TASK, OTHER_TASK)]
    saved = [(entry.iri, entry.tags) for entry in memory.store.by_type("AgentMemory")]
    return (sorted(map(str, quads)), messages, leases, tasks, saved)


def _snapshot_graph(graph: str) -> bool:
    """Whether a snapshot reads ``graph``: a data graph, an agent registry's aside.

    Bookkeeping graphs mirror the data graphs, and the write-back marks their records clean on
    its own time; the sweeper marks an agent silent past its heartbeat timeout as Error on its
    own time too, and no tool writes there.
    """
    if is_bookkeeping(graph):
        return False
    found = graph_area(graph)
    return found is None or found[1] != "agents"


def refusal_says_what(text: object, case: Case) -> None:
    """Assert ``text`` is a refusal that names what was wrong."""
    assert isinstance(text, str), f"{case.id}: {type(text).__name__}"
    assert text.startswith("Error:"), f"{case.id}: {text[:300]}"
    assert len(text) < 2_000, f"{case.id}: a refusal of {len(text)} characters"
    shape = case.shape
    if shape.startswith(("forged-", "extra")):
        assert "takes no argument" in text
        assert "bound to the tool" in text
    elif shape.startswith("missing-"):
        assert f"{shape.removeprefix('missing-')} is missing" in text
    elif shape.startswith("wrong-"):
        assert f"bad arguments to {case.tool}" in text
    elif shape.startswith("deep-"):
        assert "levels deep" in text
    elif shape in ("huge-string", "huge-key"):
        assert "characters" in text
    elif shape in ("huge-list", "wide-object"):
        assert "values" in text
    elif shape in ("nan", "inf", "minus-inf"):
        assert "numbers must be finite" in text
    elif shape == "huge-int":
        assert "64 bits" in text
    elif shape.startswith("surrogate"):
        assert "lone surrogate" in text
    elif shape in ("nested-int-key", "int-key", "none-key"):
        assert "no string" in text
    elif shape == "bytes":
        assert "no JSON value" in text


# -- arbitrary calls, for property-based tests ---------------------------------------------------

_ANY_CHARACTER = st.characters(exclude_categories=())  # surrogates and controls too
_NAMES = sorted({name for names in ARGUMENTS.values() for name in names} | set(FORGED))
_KEYS = st.one_of(st.sampled_from(_NAMES), st.text(_ANY_CHARACTER, max_size=6))
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # unbounded: beyond 64 bits too
    st.floats(),  # NaN and infinities too
    st.text(_ANY_CHARACTER, max_size=12),
    st.sampled_from(["urn:node:1", "urn:node:plan", "execution", "plan", "write", "create"]),
)
JSON_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=12,
)


@st.composite
def hostile_calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A tool and arbitrary arguments: random ones, or a valid call's with random ones over it."""
    tool = draw(st.sampled_from(list(EXAMPLES)))
    arguments = draw(st.dictionaries(_KEYS, JSON_VALUES, max_size=4))
    if draw(st.booleans()):
        arguments = {**EXAMPLES[tool], **arguments}
    return tool, arguments


def baseline(memory: Memory) -> dict[str, Any]:
    """What no agent of the tests may change: the plans, and who sent and holds what."""
    board = memory.blackboard
    return {
        "plans": [
            (node.iri, node.content, node.generation)
            for task in (TASK, OTHER_TASK)
            for node in board.by_task(task, areas=("plan",))
        ],
        "other task": [
            (node.iri, node.content) for node in board.by_task(OTHER_TASK, areas=_NOT_AGENTS)
        ],
    }


def identity_held(memory: Memory, agent: str, before: dict[str, Any]) -> None:
    """Assert every message and lease since ``before`` is ``agent``'s, and no plan moved.

    Also that every memory an agent saved carries Alice's scope, the one the tools were built
    with.
    """
    coordination = memory.blackboard.coordination
    assert coordination is not None
    assert baseline(memory) == before
    senders = {m.sender for m in coordination.messages.read_since(1)}
    assert senders <= {agent}, senders
    holders = {lease.holder for lease in coordination.leases.leases()}
    assert holders <= {agent}, holders
    for entry in memory.store.by_type("AgentMemory"):
        assert ALICE.tag in entry.tags, entry.tags
