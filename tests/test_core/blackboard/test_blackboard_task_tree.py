"""A task tree on the blackboard: every task's agents, frames and views see the tree's tasks.

Tasks are mirrored as ``Task`` nodes into the ``tasks`` area of their root task; a read of a
subtask's ``tasks`` area (by type, by area, by IRI, SPARQL, a frame, the scheduler) is a read of
its root's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gliding_core import L0Store
from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.graph import EmbeddedGraph
from gliding_core.blackboard.vocabulary import PROLOGUE
from gliding_core.config import BlackboardConfig
from gliding_core.projection.frames import Frame
from gliding_core.projection.projector import Projector
from gliding_core.projection.scheduler import Scheduler
from gliding_core.tokens import TokenCounter
from tests.test_core.blackboard.test_blackboard_facade import Clock, make_board
from tests.test_core.blackboard.test_blackboard_graph import make_backend

ROOT = "urn:ex:tree:root"
SUB = "urn:ex:tree:sub"
SIBLING = "urn:ex:tree:sibling"
TREE = sorted([ROOT, SUB, SIBLING])
TASKS = PROLOGUE + "SELECT ?t WHERE { ?t a gh:Task } ORDER BY ?t"


@pytest.fixture(params=["memory", "server"])
def board(request: pytest.FixtureRequest, tmp_path: Path, store: L0Store) -> Iterator[Blackboard]:
    value = make_board(make_backend(request.param, tmp_path, request), store, Clock())
    yield value
    value.close()


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def tasks_of(board: Blackboard) -> Coordination:
    assert board.coordination is not None
    return board.coordination


def register_tree(board: Blackboard) -> None:
    tasks = tasks_of(board).tasks
    tasks.register(ROOT)
    tasks.register(SUB, parent=ROOT)
    tasks.register(SIBLING, parent=ROOT)


def test_a_subtask_s_agent_sees_its_tree_s_tasks(board: Blackboard) -> None:
    register_tree(board)
    planner = board.agent("planner", role="plan", task=SUB)
    assert [n.iri for n in planner.by_type("Task")] == TREE
    assert [n.iri for n in planner.by_area("tasks")] == TREE
    assert [row["t"] for row in planner.query(TASKS).values()] == TREE
    assert [row["t"] for row in planner.query(TASKS, areas=["tasks"]).values()] == TREE
    mine = planner.read(SUB)
    assert mine is not None
    assert mine.node["parent"] == {"@id": ROOT}
    assert planner.query(TASKS, areas=["plan"]).values() == []  # the tasks area is asked for


def test_the_root_s_agents_still_see_every_task(board: Blackboard) -> None:
    register_tree(board)
    checker = board.agent("checker", role="check", task=ROOT)
    assert [n.iri for n in checker.by_type("Task")] == TREE
    assert [row["t"] for row in checker.query(TASKS).values()] == TREE
    assert checker.read(SIBLING) is not None


def test_an_unregistered_task_is_its_own_root_until_it_is_registered(board: Blackboard) -> None:
    tasks_of(board).tasks.register(ROOT)
    doer = board.agent("doer", role="do", task=SUB)
    assert doer.by_type("Task") == []  # SUB is unregistered: its own tasks graph is empty
    tasks_of(board).tasks.register(SUB, parent=ROOT)
    assert [n.iri for n in doer.by_type("Task")] == [ROOT, SUB]


def test_without_a_task_registry_a_task_reads_its_own_tasks_area(store: L0Store) -> None:
    with Blackboard(EmbeddedGraph(), store=store, config=BlackboardConfig(flush_interval_s=0)) as b:
        b.write([{"@id": SUB, "@type": "Task", "status": "pending"}], task=SUB, area="tasks")
        b.write([{"@id": ROOT, "@type": "Task"}], task=ROOT, area="tasks")
        doer = b.agent("doer", role="do", task=SUB)
        assert [n.iri for n in doer.by_type("Task")] == [SUB]
        assert [row["t"] for row in doer.query(TASKS).values()] == [SUB]
        assert doer.read(SUB) is not None


def test_a_subtask_s_frame_shows_its_task_and_follows_its_changes(
    board: Blackboard, counter: TokenCounter
) -> None:
    register_tree(board)
    projector = Projector(board, counter)
    try:
        first = projector.project(SUB, "pa_init", budget=2_000)
        assert first.iris == (SUB,)
        assert '"pending"' in first.text
        assert projector.project(SUB, "pa_init", budget=2_000).cached
        tasks_of(board).tasks.start(SUB)  # the mirror changes the root's tasks graph
        second = projector.project(SUB, "pa_init", budget=2_000)
        assert not second.cached
        assert '"running"' in second.text
    finally:
        projector.close()


def test_a_frame_s_area_tasks_is_the_tree_s_tasks_graph(
    board: Blackboard, counter: TokenCounter
) -> None:
    register_tree(board)
    projector = Projector(board, counter)
    projector.register(
        Frame(
            "tree_tasks",
            "every task of the task's tree",
            "GRAPH ?area_tasks { ?node a gh:Task }",
            "?node gh:status ?status .",
            body="?node gh:status ?status .",
            areas=("tasks",),
        )
    )
    try:
        assert sorted(projector.project(SUB, "tree_tasks", budget=2_000).iris) == TREE
    finally:
        projector.close()


def test_the_scheduler_shows_a_subtask_s_agent_its_task(
    board: Blackboard, store: L0Store, counter: TokenCounter
) -> None:
    register_tree(board)
    planner = board.agent("planner", role="plan", task=SUB)
    scheduler = Scheduler(Projector(board, counter), store=store)
    try:
        read = scheduler.read(SUB, "plan", budget=2_000, agent=planner)
        assert (read.level, read.iris) == ("l3", (SUB,))
        assert '"pending"' in read.text
        level, frame, nodes = scheduler.nodes(SUB, "plan", agent=planner)
        assert (level, frame, [n["@id"] for n in nodes]) == ("l3", "pa_init", [SUB])
        assert scheduler.read(SUB, "plan", budget=2_000).iris == (SUB,)  # the system's read
    finally:
        scheduler.projector.close()


def test_a_registered_root_is_looked_up_once(board: Blackboard, counter: TokenCounter) -> None:
    register_tree(board)
    planner = board.agent("planner", role="plan", task=SUB)
    projector = Projector(board, counter)
    statements: list[str] = []
    try:
        assert len(planner.by_type("Task")) == len(TREE)  # the handle's look-up
        projector.project(SUB, "pa_init", budget=2_000)  # the projector's
        tasks_of(board).db._conn.set_trace_callback(statements.append)  # what SQLite runs
        for _ in range(3):
            assert len(planner.by_type("Task")) == len(TREE)
            assert len(planner.query(TASKS).values()) == len(TREE)
            assert len(planner.by_area("tasks")) == len(TREE)
            assert planner.read(SUB) is not None
            projector.cache.clear()
            assert projector.project(SUB, "pa_init", budget=2_000).iris == (SUB,)
    finally:
        tasks_of(board).db._conn.set_trace_callback(None)
        projector.close()
    assert [s for s in statements if "FROM tasks" in s] == []


def test_a_released_task_registered_again_elsewhere_reads_its_new_tree(
    board: Blackboard, counter: TokenCounter
) -> None:
    register_tree(board)
    tasks = tasks_of(board).tasks
    other = "urn:ex:tree:other"
    tasks.register(other)
    agent = board.agent("agent", role="plan", task=SUB)
    projector = Projector(board, counter)
    assert [n.iri for n in agent.by_type("Task")] == TREE  # its root is kept
    assert projector.roots.root(SUB) == ROOT
    tasks.start(SUB)
    tasks.complete(SUB)
    tasks.release(SUB)
    tasks.register(SUB, parent=other)
    assert [n.iri for n in agent.by_type("Task")] == sorted([other, SUB])  # not ROOT's tree
    assert [row["t"] for row in agent.query(TASKS).values()] == sorted([other, SUB])
    assert projector.roots.root(SUB) == other
    projector.close()
