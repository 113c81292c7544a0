"""The blackboard facade with its coordination layer: fences, mirrors, task completion, agents."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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
from gliding_core.blackboard.agents import agent_iri
from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.coordination import CoordinationDB
from gliding_core.blackboard.graph import EmbeddedGraph, GraphBackend
from gliding_core.blackboard.permissions import PermissionMatrix
from gliding_core.blackboard.registries import Coordination
from gliding_core.blackboard.vocabulary import PROLOGUE, area_graph
from gliding_core.config import BlackboardConfig, CoordinationConfig
from gliding_core.errors import PermissionDeniedError
from tests.test_core.test_blackboard_graph import make_backend

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
