"""The blackboard facade with its coordination layer: fences, mirrors, task completion, agents."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gliding_core import (
    EventBus,
    FencingTokenError,
    InvalidInputError,
    L0Store,
    LeaseConflictError,
    Memory,
    MemoryConfig,
)
from gliding_core.blackboard.board import AgentHandle, Blackboard
from gliding_core.blackboard.coordination.agents import agent_iri
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.blackboard.graph import EmbeddedGraph, GraphBackend
from gliding_core.blackboard.permissions import PermissionMatrix
from gliding_core.blackboard.vocabulary import PROLOGUE, area_graph
from gliding_core.config import BlackboardConfig, CoordinationConfig
from gliding_core.errors import PermissionDeniedError
from gliding_core.jsonld import preview
from tests.test_core.blackboard.test_blackboard_graph import make_backend

TASK = "iri://task/t1"
QUIET = BlackboardConfig(flush_interval_s=0.0)


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_board(backend: GraphBackend, store: L0Store, clock: Clock) -> Blackboard:
    bus = EventBus()
    settings = CoordinationConfig(lease_ttl_s=10.0, heartbeat_timeout_s=60.0, sweep_interval_s=0)
    coordination = Coordination(CoordinationDB(None, config=settings, clock=clock), bus=bus)
    return Blackboard(backend, store=store, bus=bus, config=QUIET, coordination=coordination)


@pytest.fixture(params=["memory", "disk", "server"])
def board(
    request: pytest.FixtureRequest, tmp_path: Path, store: L0Store, clock: Clock
) -> Iterator[Blackboard]:
    value = make_board(make_backend(request.param, tmp_path, request), store, clock)
    yield value
    value.close()


def test_a_paused_holder_cannot_overwrite_its_successor(board: Blackboard, clock: Clock) -> None:
    first = board.agent("first", role="do", task=TASK)
    second = board.agent("second", role="do", task=TASK)
    node = {"@id": "urn:exec:1", "result": "first"}
    lease = first.acquire("urn:exec:1", "write")
    first.write([node], area="execution", lease_token=lease.token)
    with pytest.raises(LeaseConflictError) as held:
        second.write([{**node, "result": "second"}], area="execution")
    assert held.value.holders == (("first", "write"),)
    with pytest.raises(InvalidInputError, match="token"):
        first.write([node], area="execution")
    clock.now += 11.0  # the first holder pauses past its TTL
    successor = second.acquire("urn:exec:1", "write", timeout_s=0)
    assert successor.token > lease.token
    second.write([{**node, "result": "second"}], area="execution", lease_token=successor.token)
    with pytest.raises(FencingTokenError):
        first.write([{**node, "result": "stale"}], area="execution", lease_token=lease.token)
    written = board.read("urn:exec:1")
    assert written is not None
    assert written.node["result"] == "second"
    assert written.generation == 2


def test_a_write_lease_holder_deletes_with_its_token_and_only_it(board: Blackboard) -> None:
    holder = board.agent("holder", role="do", task=TASK)
    other = board.agent("other", role="do", task=TASK)
    holder.write([{"@id": "urn:exec:1"}], area="execution")
    lease = holder.acquire("urn:exec:1", "write")
    with pytest.raises(LeaseConflictError) as held:
        other.delete(["urn:exec:1"])
    assert held.value.holders == (("holder", "write"),)
    with pytest.raises(InvalidInputError, match="token"):
        holder.delete(["urn:exec:1"])
    assert board.read("urn:exec:1") is not None
    assert holder.delete(["urn:exec:1"], lease_token=lease.token) == 1
    assert board.read("urn:exec:1") is None


def test_a_paused_holder_cannot_delete_its_successor_s_node(
    board: Blackboard, clock: Clock
) -> None:
    first = board.agent("first", role="do", task=TASK)
    second = board.agent("second", role="do", task=TASK)
    first.write([{"@id": "urn:exec:1"}], area="execution")
    lease = first.acquire("urn:exec:1", "write")
    clock.now += 11.0  # the first holder pauses past its TTL
    successor = second.acquire("urn:exec:1", "write", timeout_s=0)
    with pytest.raises(FencingTokenError):
        first.delete(["urn:exec:1"], lease_token=lease.token)
    assert board.read("urn:exec:1") is not None
    assert second.delete(["urn:exec:1"], lease_token=successor.token) == 1
    assert board.read("urn:exec:1") is None


SELECT_ALL = PROLOGUE + "SELECT ?s WHERE { ?s ?p ?o }"
# method -> the parameter that takes a sequence, and a call giving it a value
SEQUENCE_CALLS: dict[str, tuple[str, Callable[[AgentHandle, Any], object]]] = {
    "delete": ("iris", lambda handle, value: handle.delete(value)),
    "query": ("areas", lambda handle, value: handle.query(SELECT_ALL, areas=value)),
}


@pytest.mark.parametrize(
    ("method", "value"),
    [
        ("delete", "urn:exec:1"),
        ("delete", None),
        ("delete", 42),
        ("delete", {"urn:exec:1": 1}),
        ("delete", iter(["urn:exec:1"])),
        ("query", "execution"),
        ("query", 7),
        ("query", b"execution"),
    ],
)
def test_a_string_or_no_sequence_is_refused_naming_it(
    board: Blackboard, method: str, value: object
) -> None:
    doer = board.agent("doer", role="do", task=TASK)
    doer.write([{"@id": "urn:exec:1", "result": 1}], area="execution")
    parameter, call = SEQUENCE_CALLS[method]
    with pytest.raises(InvalidInputError, match=f"^{parameter} must be a list") as refused:
        call(doer, value)
    assert str(refused.value).endswith(f"got {preview(value)}")
    assert board.read("urn:exec:1") is not None


def test_every_sequence_parameter_of_the_handle_refuses_a_string(board: Blackboard) -> None:
    coordination = board.coordination
    assert coordination is not None
    coordination.tasks.register(TASK)
    coordination.tasks.register("urn:task:dep", parent=TASK)
    planner = board.agent("planner", role="plan", task=TASK)
    plan = {"@id": "urn:plan:1", "@type": "Plan"}
    calls = {
        "nodes": lambda: planner.write(json.dumps(plan), area="plan"),
        "tags": lambda: planner.write([plan], area="plan", tags="emphasis"),
        "iris": lambda: planner.delete("urn:plan:1"),
        "areas": lambda: planner.query(SELECT_ALL, areas="plan"),
        "depends_on": lambda: planner.register_subtask("urn:task:x", depends_on="urn:task:dep"),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidInputError, match=f"^{name} must be a list") as refused:
            call()
        assert "got '" in str(refused.value), name
    assert board.read("urn:plan:1") is None
    assert "urn:task:x" not in coordination.tasks
    planner.write((plan,), area="plan", tags={"emphasis"})  # tuples and sets pass
    assert planner.query(SELECT_ALL, areas=("plan",)).values() == [{"s": "urn:plan:1"}]
    assert planner.register_subtask("urn:task:x", depends_on={"urn:task:dep"}).depends_on == (
        "urn:task:dep",
    )
    assert planner.delete({"urn:plan:1"}) == 1


def test_readers_do_not_block_writers(board: Blackboard) -> None:
    reader = board.agent("reader", role="check", task=TASK)
    writer = board.agent("writer", role="do", task=TASK)
    reader.acquire("urn:exec:1", "read")
    writer.write([{"@id": "urn:exec:1"}], area="execution")
    assert reader.read("urn:exec:1") is not None


def test_tasks_and_agents_are_nodes_the_shipped_vocabulary_finds(board: Blackboard) -> None:
    coordination = board.coordination
    assert coordination is not None
    coordination.tasks.register(TASK)
    coordination.tasks.register("iri://task/t1/sub", parent=TASK)
    planner = board.agent("planner", role="plan", task=TASK)
    planner.set_status("Working", operation="planning")
    assert [n.iri for n in board.by_type("Task", task=TASK)] == [TASK, "iri://task/t1/sub"]
    found = planner.query(
        PROLOGUE + "SELECT ?t WHERE { ?t a gh:Task ; gh:status 'pending' ; gh:parent ?p }",
        areas=["tasks"],
    )
    assert found.values() == [{"t": "iri://task/t1/sub"}]
    agents = planner.query(
        PROLOGUE + "SELECT ?n ?s WHERE { ?a a gh:Agent ; gh:name ?n ; gh:status ?s }",
        areas=["agents"],
    )
    assert agents.values() == [{"n": "planner", "s": "Working"}]
    with pytest.raises(PermissionDeniedError, match="coordination layer"):
        planner.write([{"@id": TASK, "@type": "Task", "status": "completed"}], area="tasks")


def test_completing_a_task_flushes_its_areas_to_l0(board: Blackboard, store: L0Store) -> None:
    coordination = board.coordination
    assert coordination is not None
    coordination.tasks.register(TASK)
    doer = board.agent("doer", role="do", task=TASK)
    doer.start_task()
    doer.write([{"@id": "urn:exec:1", "result": 42}], area="execution")
    assert store.get("urn:exec:1") is None
    assert doer.complete_task().status.value == "completed"
    entry = store.get("urn:exec:1")
    assert entry is not None
    assert entry.node == {"@id": "urn:exec:1", "result": 42}
    assert entry.named_graph == area_graph(TASK, "execution")
    task_entry = store.get(TASK)
    assert task_entry is not None
    assert task_entry.node["status"] == "completed"


def test_messages_go_through_the_matrix(board: Blackboard) -> None:
    planner = board.agent("planner", role="plan", task=TASK)
    doer = board.agent("doer", role="do", task=TASK)
    pushed: list[str] = []
    doer.subscribe(lambda m: pushed.append(m.topic), topic="plan-ready")
    sent = planner.publish("plan-ready", {"plan": "urn:plan:1"})
    assert [m.payload for m in doer.messages()] == [{"plan": "urn:plan:1"}]
    assert doer.messages(since=sent.sequence) == []
    assert pushed == ["plan-ready"]
    board.permissions = PermissionMatrix({"do": {"execution": ["create"]}})
    with pytest.raises(PermissionDeniedError, match="messages"):
        doer.publish("progress", {})
    with pytest.raises(PermissionDeniedError, match="messages"):
        doer.messages()


def test_the_sweeper_marks_a_silent_agent_and_frees_its_leases(
    board: Blackboard, clock: Clock
) -> None:
    coordination = board.coordination
    assert coordination is not None
    lost = board.agent("lost", role="do", task=TASK)
    lost.acquire("urn:exec:1", "exclusive")
    clock.now += 61.0
    assert [a.name for a in coordination.agents.sweep()] == ["lost"]
    assert coordination.leases.holders("urn:exec:1") == []
    node = board.read(agent_iri("lost"))
    assert node is not None
    assert node.node["status"] == "Error"
    other = board.agent("other", role="do", task=TASK)
    other.write([{"@id": "urn:exec:1"}], area="execution")


def test_a_handle_without_coordination_says_so(store: L0Store) -> None:
    board = Blackboard(EmbeddedGraph(), store=store, config=QUIET)
    doer = board.agent("d", role="do", task=TASK)
    with pytest.raises(InvalidInputError, match="coordination"):
        doer.acquire("urn:x")
    with pytest.raises(InvalidInputError, match="lease table"):
        doer.write([{"@id": "urn:x"}], area="execution", lease_token=1)


def test_the_memory_gives_agents_the_whole_blackboard(tmp_path: Path) -> None:
    config = MemoryConfig(embedder="hash", blackboard=QUIET)
    with Memory.open(tmp_path / "m", config=config) as memory:
        memory.blackboard.coordination.tasks.register(TASK)  # type: ignore[union-attr]
        doer = memory.agent("doer", role="do", task=TASK)
        doer.start_task()
        with doer.hold("urn:exec:1") as lease:
            doer.write([{"@id": "urn:exec:1"}], area="execution", lease_token=lease.token)
    assert (tmp_path / "m" / "blackboard.sqlite3").is_file()
    with Memory.open(tmp_path / "m", config=config) as memory:
        coordination = memory.blackboard.coordination
        assert coordination is not None
        assert coordination.tasks.get(TASK).status.value == "running"
        assert memory.store.get("urn:exec:1") is not None
