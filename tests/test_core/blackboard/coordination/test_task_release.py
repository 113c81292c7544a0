"""Releasing and collecting tasks frees their working memory on the blackboard, losing nothing.

Real components only: an L0 store in SQLite, the graph embedded (in memory, on disk) or the
suite's SPARQL server, and the coordination database in SQLite.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gliding_core import EventBus, InvalidInputError, L0Store, Memory, MemoryConfig
from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.coordination.agents import agent_iri
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.blackboard.graph import EmbeddedGraph
from gliding_core.config import BlackboardConfig, CoordinationConfig
from gliding_core.errors import ClosedError
from tests.test_core.blackboard.test_blackboard_graph import make_backend

TASK = "urn:task:release"
QUIET = BlackboardConfig(flush_interval_s=0.0)


def coordinated(backend: Any, store: L0Store | None) -> Blackboard:
    bus = EventBus()
    settings = CoordinationConfig(sweep_interval_s=0)
    coordination = Coordination(CoordinationDB(None, config=settings), bus=bus)
    return Blackboard(backend, store=store, bus=bus, config=QUIET, coordination=coordination)


@pytest.fixture(params=["memory", "disk", "server"])
def board(request: pytest.FixtureRequest, tmp_path: Path, store: L0Store) -> Iterator[Blackboard]:
    value = coordinated(make_backend(request.param, tmp_path, request), store)
    yield value
    value.close()


def coordination_of(board: Blackboard) -> Coordination:
    assert board.coordination is not None
    return board.coordination


def worked_task(board: Blackboard, task: str = TASK) -> None:
    """A task run to completion by a planner and a doer, with a lease and a message."""
    coordination = coordination_of(board)
    coordination.tasks.register(task)
    planner = board.agent(f"planner@{task}", role="plan", task=task)
    doer = board.agent(f"doer@{task}", role="do", task=task)
    planner.write([{"@id": f"{task}/plan", "steps": 2}], area="plan")
    planner.publish("plan-ready", {"plan": f"{task}/plan"})
    doer.start_task()
    lease = doer.acquire(f"{task}/result", "write")
    doer.write([{"@id": f"{task}/result", "value": 1}], area="execution", lease_token=lease.token)
    doer.complete_task()


def assert_in_l0_exactly(store: L0Store, nodes: dict[str, dict[str, Any]]) -> None:
    for iri, node in nodes.items():
        entry = store.get(iri)
        assert entry is not None, iri
        assert entry.node == node, iri


def test_release_flushes_then_frees_the_task_s_areas_and_agents(
    board: Blackboard, store: L0Store
) -> None:
    coordination = coordination_of(board)
    worked_task(board)
    # Written after the completion's flush: dirty, and only the release can save it.
    board.write([{"@id": f"{TASK}/late", "value": "late"}], task=TASK, area="execution")
    assert store.get(f"{TASK}/late") is None
    before = {node.iri: node.node for node in board.by_task(TASK)}
    assert {TASK, f"{TASK}/late", agent_iri(f"doer@{TASK}")} <= set(before)
    assert any(node.get("@type") == "CoordinationMessage" for node in before.values())

    assert coordination.tasks.release(TASK) == [TASK]

    assert board.by_task(TASK) == []
    assert_in_l0_exactly(store, before)
    assert coordination.agents.agents(task=TASK) == []
    assert coordination.leases.holders(f"{TASK}/result") == []
    # The message log is durable: it stays readable by cursor after the release.
    messages = coordination.messages.read_since(0, task=TASK)
    assert [m.topic for m in messages] == ["plan-ready"]


def test_releasing_a_subtree_keeps_its_dirty_task_node_in_l0(
    board: Blackboard, store: L0Store
) -> None:
    """A subtask's Task node lives in its root's area, which its completion does not flush."""
    coordination = coordination_of(board)
    coordination.tasks.register(TASK)
    coordination.tasks.start(TASK)
    child = f"{TASK}/child"
    coordination.tasks.register(child, parent=TASK)
    doer = board.agent("child-doer", role="do", task=child)
    doer.start_task()
    doer.write([{"@id": f"{child}/result"}], area="execution")
    doer.complete_task()

    assert coordination.tasks.release(child) == [child]

    entry = store.get(child)
    assert entry is not None
    assert entry.node["status"] == "completed"
    assert board.read(child) is None
    assert board.by_task(child) == []
    assert [n.iri for n in board.by_task(TASK)] == [TASK]  # the root's work stays
    assert coordination.agents.agents(task=child) == []


def test_gc_frees_the_collected_tasks_like_a_release(board: Blackboard, store: L0Store) -> None:
    coordination = coordination_of(board)
    worked_task(board)
    failed = "urn:task:failed"
    coordination.tasks.register(failed)
    board.agent("quitter", role="do", task=failed).write(
        [{"@id": f"{failed}/draft"}], area="execution"
    )
    coordination.tasks.fail(failed)
    kept = "urn:task:running"
    coordination.tasks.register(kept)
    board.agent("worker", role="do", task=kept).write([{"@id": f"{kept}/x"}], area="execution")
    before = {n.iri: n.node for task in (TASK, failed) for n in board.by_task(task)}

    assert coordination.tasks.gc() == sorted([TASK, failed])

    assert board.by_task(TASK) == board.by_task(failed) == []
    assert_in_l0_exactly(store, before)
    assert [a.name for a in coordination.agents.agents()] == ["worker"]
    assert {n.iri for n in board.by_task(kept)} == {kept, f"{kept}/x", agent_iri("worker")}


def test_a_failed_flush_deletes_nothing_and_a_retry_frees_the_task(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "l0.sqlite3"
    store = L0Store(path)
    board = coordinated(EmbeddedGraph(), store)
    coordination = coordination_of(board)
    worked_task(board)
    board.write([{"@id": f"{TASK}/late"}], task=TASK, area="execution")
    # The Task node is clean (in L0 since the completion): the registry's mirror drops it.
    before = {n.iri for n in board.by_task(TASK)} - {TASK}
    store.close()  # the flush of the release fails: L0 is gone

    with caplog.at_level(logging.ERROR):
        coordination.tasks.release(TASK)

    assert "released task(s) 'urn:task:release' failed" in caplog.text
    assert {n.iri for n in board.by_task(TASK)} == before
    assert [a.name for a in coordination.agents.agents(task=TASK)] != []
    with pytest.raises(ClosedError):
        board.release_tasks([TASK])

    with L0Store(path) as reopened:
        assert board.writeback is not None
        board.writeback.store = reopened
        assert board.release_tasks([TASK]) == len(before)
        assert board.by_task(TASK) == []
        assert coordination.agents.agents(task=TASK) == []
        late = reopened.get(f"{TASK}/late")
        assert late is not None
        board.close()


def test_release_tasks_checks_its_input(board: Blackboard) -> None:
    with pytest.raises(InvalidInputError, match="'urn:a b'"):
        board.release_tasks(["urn:a b"])
    with pytest.raises(InvalidInputError, match="list"):
        board.release_tasks(TASK)


def test_a_board_without_l0_frees_the_areas_all_the_same() -> None:
    board = coordinated(EmbeddedGraph(), None)
    worked_task(board)
    coordination_of(board).tasks.release(TASK)
    assert board.by_task(TASK) == []
    assert coordination_of(board).agents.agents() == []
    board.close()


def test_releasing_through_the_memory_frees_its_blackboard(tmp_path: Path) -> None:
    config = MemoryConfig(embedder="hash", blackboard=QUIET)
    with Memory.open(tmp_path / "m", config=config) as memory:
        board = memory.blackboard
        worked_task(board)
        board.write([{"@id": f"{TASK}/late"}], task=TASK, area="execution")
        before = {n.iri: n.node for n in board.by_task(TASK)}
        coordination_of(board).tasks.release(TASK)
        assert board.by_task(TASK) == []
        assert_in_l0_exactly(memory.store, before)


def test_a_task_node_left_by_a_failed_removal_goes_with_the_retry(tmp_path: Path) -> None:
    path = tmp_path / "l0.sqlite3"
    failing = L0Store(path)
    board = coordinated(EmbeddedGraph(), failing)
    tasks = coordination_of(board).tasks
    root, child = "urn:task:root", "urn:task:root/child"
    tasks.register(root)
    tasks.register(child, parent=root)
    tasks.start(child)
    tasks.complete(child)
    node = board.read(child)
    assert node is not None
    assert node.dirty
    failing.close()  # the Task node's write-back fails: the registry leaves it in the graph
    tasks.release(child)
    assert board.read(child) is not None
    with L0Store(path) as working:
        assert board.writeback is not None
        board.writeback.store = working
        board.release_tasks([child])
        assert board.read(child) is None
        assert [n.iri for n in board.by_type("Task", task=root)] == [root]
        assert working.get(child) is not None  # its last state reached L0 first
        tasks.register(child, parent=root)  # registered again: a retry leaves it alone
        board.release_tasks([child])
        assert board.read(child) is not None
        board.close()


def test_a_failed_recovery_flush_leaves_the_directory_free(tmp_path: Path) -> None:
    graph = tmp_path / "graph"
    with Blackboard.open(graph, config=QUIET) as board:  # no L0: the node stays dirty
        board.write([{"@id": "urn:n:dirty"}], task=TASK, area="plan")
    closed = L0Store()
    closed.close()
    with pytest.raises(ClosedError):
        Blackboard.open(graph, store=closed, config=QUIET)
    with L0Store() as store, Blackboard.open(graph, store=store, config=QUIET) as board:
        assert store.get("urn:n:dirty") is not None  # flushed by the second open
        assert not board.read("urn:n:dirty").dirty  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_a_failed_last_flush_keeps_a_memory_board_open_and_frees_a_directory(
    tmp_path: Path, kind: str
) -> None:
    store = L0Store()
    path = None if kind == "memory" else tmp_path / "graph"
    board = Blackboard.open(path, store=store, config=QUIET)
    board.write([{"@id": "urn:n:last"}], task=TASK, area="plan")
    store.close()
    with pytest.raises(ClosedError):
        board.close()
    if kind == "memory":  # its dirty node lives nowhere else: still open, close again later
        assert not board.closed
        assert board.read("urn:n:last") is not None
        assert board.writeback is not None
        with L0Store() as working:
            board.writeback.store = working
            board.close()
            assert working.get("urn:n:last") is not None
    else:  # the dirty mark is on disk: closed, and the next open flushes it
        assert board.closed
        with L0Store() as working, Blackboard.open(path, store=working, config=QUIET):
            assert working.get("urn:n:last") is not None
