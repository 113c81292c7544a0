"""Every public method of the handle, the board and the tools refuses a lone surrogate, typed.

A lone surrogate (``"\\ud800"``) is a Python string no UTF-8 store can hold: SQLite, Oxigraph
and JSON text refuse it with a ``UnicodeEncodeError``. Called directly (not through a tool,
whose argument checks refuse it first), ``AgentHandle.acquire``, ``publish``, ``messages``,
``set_status``, ``query`` and ``Blackboard.agent`` and ``query`` raised that bare error from
the backend. Each public method that takes a string gets one here, in each place it takes one,
and must raise ``InvalidInputError`` whose message names the value (escaped, so the message
itself is valid Unicode) and change nothing: the board's quads, the messages, the leases, the
tasks, the agents' records and L0 are read as the system before and after.
"""

from __future__ import annotations

import asyncio
import inspect
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import pyoxigraph as ox
import pytest

from gliding_core import AgentHandle, InvalidInputError, Memory
from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.permissions import Operation
from gliding_core.boundary import translated
from gliding_core.tools import board_tools, memory_tools
from tests.test_core.hostile_calls import ALICE, TASK, open_memory, snapshot

S = "urn:x:\ud800"  # an IRI, a name or a text holding a lone surrogate
TEXT = "text \udfff"
T = "urn:type:Step"

Call = Callable[[Memory, AgentHandle], Any]


def _hold(handle: AgentHandle, resource: str, mode: str = "write") -> None:
    with handle.hold(resource, mode):
        pass


# (method, the call); each call puts a lone surrogate in one string the method takes.
HANDLE: list[tuple[str, Call]] = [
    ("write", lambda m, h: h.write([{"@id": S}], area="plan")),
    ("write", lambda m, h: h.write([{"@id": "urn:n:1", "text": TEXT}], area="plan")),
    ("write", lambda m, h: h.write([{"@id": "urn:n:1", "\ud800": 1}], area="plan")),
    ("write", lambda m, h: h.write([{"@id": "urn:n:1", "ref": {"@id": S}}], area="plan")),
    ("write", lambda m, h: h.write([{"@id": "urn:n:1"}], area=S)),
    ("write", lambda m, h: h.write([{"@id": "urn:n:1"}], area="plan", tags=[S])),
    ("write", lambda m, h: h.write([{"@id": "urn:n:1"}], area="plan", based_on={S: 0})),
    ("write", lambda m, h: h.write([{"@id": "urn:n:1"}], area="plan", write_id=S)),
    ("write", lambda m, h: h.write(['{"@id": "urn:n:1", "text": "\\ud800"}'], area="plan")),
    ("read", lambda m, h: h.read(S)),
    ("authorize", lambda m, h: h.authorize(S, Operation.READ)),
    ("authorize", lambda m, h: h.authorize("plan", S)),  # type: ignore[arg-type]
    ("evict", lambda m, h: h.evict(S)),
    ("by_area", lambda m, h: h.by_area(S)),
    ("by_type", lambda m, h: h.by_type(S)),
    ("delete", lambda m, h: h.delete([S])),
    ("delete", lambda m, h: h.delete(["urn:node:plan"], write_id=S)),
    ("query", lambda m, h: h.query(f'SELECT * WHERE {{ ?s ?p "{TEXT}" }}')),
    ("query", lambda m, h: h.query(f"SELECT * WHERE {{ <{S}> ?p ?o }}")),
    ("query", lambda m, h: h.query("ASK { ?s ?p ?o }", areas=[S])),
    ("query", lambda m, h: h.query("ASK { ?s ?p ?o }", bindings={S: ox.NamedNode("urn:a")})),
    ("heartbeat", lambda m, h: h.heartbeat(status=S)),
    ("heartbeat", lambda m, h: h.heartbeat(operation=TEXT)),
    ("set_status", lambda m, h: h.set_status(S)),
    ("set_status", lambda m, h: h.set_status("working", operation=TEXT)),
    ("acquire", lambda m, h: h.acquire(S)),
    ("acquire", lambda m, h: h.acquire("urn:node:plan", S)),
    ("acquire_async", lambda m, h: asyncio.run(h.acquire_async(S))),
    ("hold", lambda m, h: _hold(h, S)),
    ("hold", lambda m, h: _hold(h, "urn:node:plan", S)),
    ("release", lambda m, h: h.release(S)),
    ("register_subtask", lambda m, h: h.register_subtask(S)),
    ("register_subtask", lambda m, h: h.register_subtask("urn:task:sub", depends_on=[S])),
    ("publish", lambda m, h: h.publish(S)),
    ("publish", lambda m, h: h.publish("progress", {"note": TEXT})),
    ("publish", lambda m, h: h.publish("progress", {"deep": [{"\ud800": 1}]})),
    ("messages", lambda m, h: h.messages(topic=S)),
    ("subscribe", lambda m, h: h.subscribe(lambda message: None, topic=S)),
]

BOARD: list[tuple[str, Call]] = [
    ("write", lambda m, h: m.blackboard.write([{"@id": S}], graph="urn:g:1")),
    ("write", lambda m, h: m.blackboard.write([{"@id": "urn:n:1", "t": TEXT}], graph="urn:g:1")),
    ("write", lambda m, h: m.blackboard.write([{"@id": "urn:n:1"}], graph=S)),
    ("write", lambda m, h: m.blackboard.write([{"@id": "urn:n:1"}], task=S, area="plan")),
    ("write", lambda m, h: m.blackboard.write([{"@id": "urn:n:1"}], task=TASK, area=S)),
    ("write", lambda m, h: m.blackboard.write([{"@id": "urn:n:1"}], graph="urn:g:1", tags=[S])),
    ("write", lambda m, h: m.blackboard.write([{"@id": "urn:n:1"}], graph="urn:g:1", source=S)),
    ("write", lambda m, h: m.blackboard.write([{"@id": "urn:n:1"}], graph="urn:g", write_id=S)),
    ("read", lambda m, h: m.blackboard.read(S)),
    ("read_many", lambda m, h: m.blackboard.read_many([S])),
    ("read_for", lambda m, h: m.blackboard.read_for(h, S)),
    ("by_graph", lambda m, h: m.blackboard.by_graph(S)),
    ("by_task", lambda m, h: m.blackboard.by_task(S)),
    ("by_task", lambda m, h: m.blackboard.by_task(TASK, [S])),
    ("by_type", lambda m, h: m.blackboard.by_type(S)),
    ("by_type", lambda m, h: m.blackboard.by_type(T, task=S)),
    ("by_type", lambda m, h: m.blackboard.by_type(T, task=TASK, areas=[S])),
    ("delete", lambda m, h: m.blackboard.delete([S])),
    ("delete", lambda m, h: m.blackboard.delete(["urn:node:plan"], source=S)),
    ("delete", lambda m, h: m.blackboard.delete(["urn:node:plan"], write_id=S)),
    ("query", lambda m, h: m.blackboard.query(f'SELECT * WHERE {{ ?s ?p "{TEXT}" }}')),
    ("query", lambda m, h: m.blackboard.query("ASK { ?s ?p ?o }", graphs=[S])),
    (
        "query",
        lambda m, h: m.blackboard.query("ASK { ?s ?p ?o }", bindings={S: ox.NamedNode("urn:a")}),
    ),
    ("flush", lambda m, h: m.blackboard.flush(task=S)),
    ("mirror", lambda m, h: m.blackboard.mirror(S, "plan", [{"@id": "urn:n:1"}])),
    ("mirror", lambda m, h: m.blackboard.mirror(TASK, S, [{"@id": "urn:n:1"}])),
    ("mirror", lambda m, h: m.blackboard.mirror(TASK, "plan", [{"@id": S}])),
    ("forget", lambda m, h: m.blackboard.forget([S])),
    ("release_tasks", lambda m, h: m.blackboard.release_tasks([S])),
    ("agent", lambda m, h: m.blackboard.agent(S, role="do", task=TASK)),
    ("agent", lambda m, h: m.blackboard.agent("ana", role=S, task=TASK)),
    ("agent", lambda m, h: m.blackboard.agent("ana", role="do", task=S)),
]

TOOLS: list[tuple[str, Call]] = [
    ("search_memory", lambda m, h: memory_tools.search_memory(m, ALICE, TEXT)),
    ("save_memory", lambda m, h: memory_tools.save_memory(m, ALICE, TEXT)),
    ("save_memory", lambda m, h: memory_tools.save_memory(m, ALICE, "tea", action=S)),  # type: ignore[arg-type]
    (
        "save_memory",
        lambda m, h: memory_tools.save_memory(m, ALICE, "t", action="update", memory_id=S),
    ),
    ("read_node", lambda m, h: board_tools.read_node(h, S)),
    ("write_node", lambda m, h: board_tools.write_node(h, {"@id": S}, area="plan")),
    (
        "write_node",
        lambda m, h: board_tools.write_node(h, {"@id": "urn:n", "t": TEXT}, area="plan"),
    ),
    ("query", lambda m, h: board_tools.query(h, f'ASK {{ ?s ?p "{TEXT}" }}')),
    ("take_lease", lambda m, h: board_tools.take_lease(h, S)),
    ("release_lease", lambda m, h: board_tools.release_lease(h, S)),
    ("post_message", lambda m, h: board_tools.post_message(h, S)),
    ("post_message", lambda m, h: board_tools.post_message(h, "progress", {"n": TEXT})),
    ("read_messages", lambda m, h: board_tools.read_messages(h, topic=S)),
]

# Public methods that take no string, or whose strings are no text a store keeps: a path to
# open may hold a surrogate that stands for an undecodable byte of a POSIX file name.
NO_STRING = {
    "AgentHandle": {
        "readable_areas",
        "task_status",
        "start_task",
        "complete_task",
        "fail_task",
        "area_of",  # a node
        "check_readable",  # a node
    },
    "Blackboard": {"close", "compact", "open"},
}


@pytest.fixture
def board() -> Iterator[tuple[Memory, AgentHandle]]:
    memory = open_memory()
    yield memory, memory.agent("planner", role="plan", task=TASK)
    memory.close()


def state(memory: Memory) -> tuple[Any, ...]:
    """Everything these calls could change, read as the system."""
    coordination = memory.blackboard.coordination
    assert coordination is not None
    agents = sorted((a.name, a.role, a.status, a.operation) for a in coordination.agents.agents())
    return snapshot(memory), agents, memory.store.count()


CASES = [
    (f"{kind}.{name}", call)
    for kind, cases in [("handle", HANDLE), ("board", BOARD), ("tools", TOOLS)]
    for name, call in cases
]


def _ids() -> list[str]:
    seen: dict[str, int] = {}
    ids = []
    for name, _ in CASES:
        seen[name] = seen.get(name, 0) + 1
        ids.append(f"{name}-{seen[name]}")
    return ids


@pytest.mark.parametrize(("method", "call"), CASES, ids=_ids())
def test_a_lone_surrogate_is_refused_typed_naming_it_and_nothing_is_written(
    board: tuple[Memory, AgentHandle], method: str, call: Call
) -> None:
    memory, handle = board
    before = state(memory)
    with pytest.raises(InvalidInputError) as refused:
        call(memory, handle)
    message = str(refused.value)
    message.encode("utf-8")  # the message itself can be logged, stored and sent
    assert "\\ud800" in message or "\\udfff" in message or "lone surrogate" in message, message
    memory.blackboard.flush()
    assert state(memory) == before


@pytest.mark.parametrize(
    ("kind", "cases"), [(AgentHandle, HANDLE), (Blackboard, BOARD)], ids=lambda v: str(v)[:20]
)
def test_every_public_method_that_takes_a_string_is_tried(
    kind: type[Any], cases: list[tuple[str, Call]]
) -> None:
    public = {
        name
        for name, member in inspect.getmembers(kind)
        if not name.startswith("_") and callable(member) and not isinstance(member, type)
    }
    tried = {name for name, _ in cases}
    assert tried | NO_STRING[kind.__name__] == public


@pytest.mark.parametrize(
    ("backend", "fail"),
    [
        ("sqlite", lambda: sqlite3.connect(":memory:").execute("SELECT ?", (S,))),
        ("oxigraph", lambda: ox.Store().query(f'SELECT * WHERE {{ ?s ?p "{TEXT}" }}')),
    ],
)
def test_the_boundary_names_a_lone_surrogate_a_backend_was_given(
    backend: Any, fail: Callable[[], Any]
) -> None:
    """The net under the checks: a backend's encode error is the caller's, typed and named."""
    with pytest.raises(InvalidInputError) as refused, translated(backend, "binding"):
        fail()
    message = str(refused.value)
    message.encode("utf-8")
    assert "binding failed" in message
    assert "\\ud800" in message or "\\udfff" in message
    assert isinstance(refused.value.__cause__, UnicodeEncodeError)
