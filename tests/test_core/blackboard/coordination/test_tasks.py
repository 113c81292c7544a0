"""Tasks: registration, transitions, ready tasks, DAG layers, cycles, release, GC, the mirror."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gliding_core.blackboard.board import Blackboard
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.coordination.sqlite import CoordinationDB
from gliding_core.blackboard.coordination.tasks import TRANSITIONS, TaskRegistry, TaskStatus
from gliding_core.blackboard.graph import EmbeddedGraph
from gliding_core.bus import EventBus, EventType
from gliding_core.config import BlackboardConfig
from gliding_core.errors import (
    InvalidInputError,
    InvalidTransitionError,
    TaskCycleError,
    TaskNotFoundError,
)

P, R, C, F = TaskStatus.PENDING, TaskStatus.RUNNING, TaskStatus.COMPLETED, TaskStatus.FAILED


class RecordingMirror:
    """A graph stand-in that keeps the last mirrored version of each node."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[str, str, dict[str, Any]]] = {}
        self.calls = 0

    def mirror(self, task_iri: str, area: str, nodes: Sequence[Mapping[str, Any]]) -> None:
        self.calls += 1
        for node in nodes:
            self.nodes[node["@id"]] = (task_iri, area, dict(node))

    def forget(self, iris: Sequence[str]) -> None:
        for iri in iris:
            self.nodes.pop(iri, None)


class FailingMirror(RecordingMirror):
    def mirror(self, task_iri: str, area: str, nodes: Sequence[Mapping[str, Any]]) -> None:
        raise ConnectionError("the graph is down")


@pytest.fixture
def db(tmp_path: Path) -> Iterator[CoordinationDB]:
    with CoordinationDB(tmp_path / "blackboard.sqlite3") as value:
        yield value


@pytest.fixture
def tasks(db: CoordinationDB) -> TaskRegistry:
    return TaskRegistry(db)


def _finish(tasks: TaskRegistry, *iris: str) -> None:
    for iri in iris:
        tasks.start(iri)
        tasks.complete(iri)


# -- registering -------------------------------------------------------------------------------


def test_a_task_is_registered_pending_under_its_parent(tasks: TaskRegistry) -> None:
    root = tasks.register("urn:t:root")
    child = tasks.register("urn:t:a", parent="urn:t:root")
    assert (root.status, root.parent, root.root) == (P, None, "urn:t:root")
    assert (child.parent, child.root, child.revision) == ("urn:t:root", "urn:t:root", 1)
    grandchild = tasks.register("urn:t:a1", parent="urn:t:a")
    assert grandchild.root == "urn:t:root"
    assert [t.iri for t in tasks.children("urn:t:root")] == ["urn:t:a"]
    assert tasks.subtree("urn:t:root") == ["urn:t:root", "urn:t:a", "urn:t:a1"]
    assert "urn:t:a" in tasks
    assert "urn:t:nope" not in tasks


def test_registration_refuses_taken_iris_missing_or_finished_parents(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:a")
    with pytest.raises(InvalidInputError, match="'urn:t:a' is already registered"):
        tasks.register("urn:t:a")
    with pytest.raises(TaskNotFoundError, match="urn:t:ghost"):
        tasks.register("urn:t:b", parent="urn:t:ghost")
    with pytest.raises(TaskNotFoundError, match="urn:t:ghost"):
        tasks.register("urn:t:b", depends_on=["urn:t:ghost"])
    assert "urn:t:b" not in tasks  # nothing half-written
    _finish(tasks, "urn:t:a")
    with pytest.raises(InvalidInputError, match="the parent is completed"):
        tasks.register("urn:t:b", parent="urn:t:a")


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"iri": ""}, "task IRI"),
        ({"iri": "a b"}, "'a b'"),
        ({"parent": 3}, "3"),
        ({"depends_on": "urn:t:x"}, "'urn:t:x'"),
        ({"depends_on": [None]}, "None"),
    ],
)
def test_bad_registrations_are_refused_naming_the_value(
    tasks: TaskRegistry, kwargs: dict[str, Any], named: str
) -> None:
    request = {"iri": "urn:t:a", **kwargs}
    with pytest.raises(InvalidInputError, match=named):
        tasks.register(**request)
    assert tasks.tasks() == []


# -- transitions -------------------------------------------------------------------------------


def test_the_transition_table_is_the_documented_one() -> None:
    assert {s: set(t) for s, t in TRANSITIONS.items()} == {
        P: {R, F},
        R: {C, F, P},
        F: {P},
        C: set(),
    }


@pytest.mark.parametrize("start", list(TaskStatus))
@pytest.mark.parametrize("target", list(TaskStatus))
def test_every_transition_is_allowed_or_refused_as_the_table_says(
    tasks: TaskRegistry, start: TaskStatus, target: TaskStatus
) -> None:
    tasks.register("urn:t:a")
    path = {P: [], R: [R], C: [R, C], F: [F]}[start]
    for step in path:
        tasks.set_status("urn:t:a", step)
    if target in TRANSITIONS[start]:
        changed = tasks.set_status("urn:t:a", target.value)
        assert changed.status is target
        assert changed.revision == len(path) + 2
    else:
        with pytest.raises(InvalidTransitionError) as caught:
            tasks.set_status("urn:t:a", target)
        assert (caught.value.current, caught.value.requested) == (start.value, target.value)
        assert tasks.get("urn:t:a").status is start


def test_a_task_starts_only_when_its_dependencies_are_completed(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:a")
    tasks.register("urn:t:b", depends_on=["urn:t:a"])
    with pytest.raises(InvalidTransitionError, match="waits for 'urn:t:a'"):
        tasks.start("urn:t:b")
    _finish(tasks, "urn:t:a")
    assert tasks.start("urn:t:b").status is R


def test_a_task_completes_only_when_its_children_are_finished(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:p")
    tasks.register("urn:t:c1", parent="urn:t:p")
    tasks.register("urn:t:c2", parent="urn:t:p")
    tasks.start("urn:t:p")
    _finish(tasks, "urn:t:c1")
    with pytest.raises(InvalidTransitionError, match="children 'urn:t:c2' are unfinished"):
        tasks.complete("urn:t:p")
    tasks.fail("urn:t:c2")
    assert tasks.complete("urn:t:p").status is C


def test_status_changes_are_published(db: CoordinationDB) -> None:
    bus = EventBus()
    tasks = TaskRegistry(db, bus=bus)
    tasks.register("urn:t:a")
    tasks.start("urn:t:a")
    tasks.complete("urn:t:a")
    registered = bus.recent(EventType.TASK_REGISTERED)
    assert registered[0].payload == {"iri": "urn:t:a", "parent": None, "depends_on": []}
    changes = bus.recent(EventType.TASK_STATUS_CHANGED)
    assert [(e.payload["previous"], e.payload["status"]) for e in changes] == [
        ("pending", "running"),
        ("running", "completed"),
    ]
    assert changes[-1].task_iri == "urn:t:a"
    assert changes[-1].payload["revision"] == 3


def test_a_bad_status_is_refused_naming_it(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:a")
    with pytest.raises(InvalidInputError, match="'done'"):
        tasks.set_status("urn:t:a", "done")
    with pytest.raises(TaskNotFoundError, match="urn:t:b"):
        tasks.start("urn:t:b")


# -- ready tasks and layers --------------------------------------------------------------------


def test_ready_tasks_are_pending_with_completed_dependencies(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:a")
    tasks.register("urn:t:b", depends_on=["urn:t:a"])
    tasks.register("urn:t:c", depends_on=["urn:t:a", "urn:t:b"])
    tasks.register("urn:t:other")
    assert [t.iri for t in tasks.ready()] == ["urn:t:a", "urn:t:other"]
    _finish(tasks, "urn:t:a")
    assert [t.iri for t in tasks.ready()] == ["urn:t:b", "urn:t:other"]
    tasks.start("urn:t:b")
    assert [t.iri for t in tasks.ready()] == ["urn:t:other"]
    tasks.complete("urn:t:b")
    assert [t.iri for t in tasks.ready()] == ["urn:t:c", "urn:t:other"]


def test_ready_tasks_within_a_subtree(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:p")
    tasks.register("urn:t:p1", parent="urn:t:p")
    tasks.register("urn:t:q")
    assert [t.iri for t in tasks.ready(under="urn:t:p")] == ["urn:t:p", "urn:t:p1"]


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"b": ["a"], "c": ["b"]}, [["a"], ["b"], ["c"]]),  # chain
        ({"b": ["a"], "c": ["a"]}, [["a"], ["b", "c"]]),  # fan-out
        ({"b": ["a"], "c": ["a"], "d": ["b", "c"]}, [["a"], ["b", "c"], ["d"]]),  # diamond
    ],
)
def test_layers_of_dependency_shapes(
    tasks: TaskRegistry, edges: dict[str, list[str]], expected: list[list[str]]
) -> None:
    for name in sorted({n for e in edges.values() for n in e} | set(edges)):
        tasks.register(f"urn:t:{name}", depends_on=[f"urn:t:{d}" for d in edges.get(name, [])])
    for name in ("a", "c"):
        layers = tasks.layers(f"urn:t:{name}")
        assert [[iri.removeprefix("urn:t:") for iri in layer] for layer in layers] == expected


def test_children_come_before_their_parent(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:p")
    tasks.register("urn:t:s1", parent="urn:t:p")
    tasks.register("urn:t:s2", parent="urn:t:p", depends_on=["urn:t:s1"])
    tasks.register("urn:t:s3", parent="urn:t:p")
    assert tasks.layers("urn:t:p") == [["urn:t:s1", "urn:t:s3"], ["urn:t:s2"], ["urn:t:p"]]


# -- cycles ------------------------------------------------------------------------------------


def test_a_dependency_closing_a_cycle_is_refused_naming_the_cycle(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:a")
    tasks.register("urn:t:b", depends_on=["urn:t:a"])
    tasks.register("urn:t:c", depends_on=["urn:t:b"])
    with pytest.raises(TaskCycleError) as caught:
        tasks.add_dependency("urn:t:a", "urn:t:c")
    assert caught.value.cycle == ("urn:t:a", "urn:t:c", "urn:t:b", "urn:t:a")
    assert "urn:t:a -> urn:t:c -> urn:t:b -> urn:t:a" in str(caught.value)
    assert tasks.get("urn:t:a").depends_on == ()  # nothing written
    assert tasks.layers("urn:t:a") == [["urn:t:a"], ["urn:t:b"], ["urn:t:c"]]


def test_two_threads_closing_a_cycle_at_once_cannot_both_succeed(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:a")
    tasks.register("urn:t:b")
    outcomes: list[str] = []

    def link(task: str, dependency: str) -> None:
        try:
            tasks.add_dependency(task, dependency)
            outcomes.append("linked")
        except TaskCycleError:
            outcomes.append("cycle")

    threads = [
        threading.Thread(target=link, args=("urn:t:a", "urn:t:b")),
        threading.Thread(target=link, args=("urn:t:b", "urn:t:a")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(outcomes) == ["cycle", "linked"]
    assert len(tasks.layers("urn:t:a")) == 2


def test_a_task_cannot_depend_on_itself_or_on_its_ancestor(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:p")
    with pytest.raises(TaskCycleError) as caught:
        tasks.add_dependency("urn:t:p", "urn:t:p")
    assert caught.value.cycle == ("urn:t:p", "urn:t:p")
    with pytest.raises(TaskCycleError) as caught:
        tasks.register("urn:t:c", parent="urn:t:p", depends_on=["urn:t:p"])
    assert caught.value.cycle == ("urn:t:c", "urn:t:p", "urn:t:c")
    assert "urn:t:c" not in tasks  # the registration rolled back whole


def test_dependencies_are_added_to_pending_tasks_and_removed(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:a")
    tasks.register("urn:t:b")
    assert tasks.add_dependency("urn:t:b", "urn:t:a").depends_on == ("urn:t:a",)
    assert tasks.add_dependency("urn:t:b", "urn:t:a").revision == 2  # harmless again
    assert tasks.dependents("urn:t:a") == ["urn:t:b"]
    assert tasks.remove_dependency("urn:t:b", "urn:t:a") is True
    assert tasks.remove_dependency("urn:t:b", "urn:t:a") is False
    tasks.start("urn:t:b")
    with pytest.raises(InvalidTransitionError, match="it is running"):
        tasks.add_dependency("urn:t:b", "urn:t:a")


# -- release and GC ----------------------------------------------------------------------------


def test_a_completed_subtree_is_released_with_its_edges(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:p")
    tasks.register("urn:t:c", parent="urn:t:p")
    tasks.register("urn:t:later", depends_on=["urn:t:c"])
    tasks.start("urn:t:p")
    _finish(tasks, "urn:t:c")
    tasks.complete("urn:t:p")
    assert tasks.release("urn:t:p") == ["urn:t:p", "urn:t:c"]
    assert [t.iri for t in tasks.tasks()] == ["urn:t:later"]
    assert tasks.get("urn:t:later").depends_on == ()
    assert [t.iri for t in tasks.ready()] == ["urn:t:later"]


def test_only_a_completed_finished_unneeded_subtree_is_released(tasks: TaskRegistry) -> None:
    tasks.register("urn:t:p")
    with pytest.raises(InvalidTransitionError, match="'urn:t:p' is pending"):
        tasks.release("urn:t:p")
    tasks.register("urn:t:c", parent="urn:t:p")
    tasks.register("urn:t:waiting", depends_on=["urn:t:c"])
    tasks.start("urn:t:p")
    tasks.fail("urn:t:c")
    tasks.complete("urn:t:p")
    with pytest.raises(InvalidTransitionError, match="'urn:t:waiting' still depends"):
        tasks.release("urn:t:p")
    assert len(tasks.tasks()) == 3


def test_gc_collects_finished_trees_and_keeps_what_is_still_needed(
    tmp_path: Path,
) -> None:
    clock = [100.0]
    with CoordinationDB(tmp_path / "c.sqlite3", clock=lambda: clock[0]) as db:
        tasks = TaskRegistry(db)
        tasks.register("urn:t:done")
        tasks.register("urn:t:done/1", parent="urn:t:done")
        tasks.start("urn:t:done")
        _finish(tasks, "urn:t:done/1")
        tasks.complete("urn:t:done")
        tasks.register("urn:t:live")
        tasks.register("urn:t:live/1", parent="urn:t:live")
        tasks.register("urn:t:live/2", parent="urn:t:live")
        _finish(tasks, "urn:t:live/1")
        tasks.fail("urn:t:live/2")
        tasks.register("urn:t:retry-me", depends_on=["urn:t:live/2"])
        clock[0] = 150.0
        assert tasks.gc(older_than_s=60) == []
        assert tasks.gc(older_than_s=50) == ["urn:t:done", "urn:t:done/1", "urn:t:live/1"]
        assert sorted(t.iri for t in tasks.tasks()) == [
            "urn:t:live",
            "urn:t:live/2",
            "urn:t:retry-me",
        ]
        assert tasks.gc() == []


# -- the graph mirror --------------------------------------------------------------------------


def test_tasks_are_mirrored_into_their_root_s_tasks_area(db: CoordinationDB) -> None:
    mirror = RecordingMirror()
    tasks = TaskRegistry(db, mirror=mirror)
    tasks.register("urn:t:p")
    tasks.register("urn:t:a", parent="urn:t:p")
    tasks.register("urn:t:b", parent="urn:t:p", depends_on=["urn:t:a"])
    task_iri, area, node = mirror.nodes["urn:t:b"]
    assert (task_iri, area) == ("urn:t:p", "tasks")
    assert node["@type"] == "Task"
    assert node["status"] == "pending"
    assert node["parent"] == {"@id": "urn:t:p"}
    assert node["dependsOn"] == [{"@id": "urn:t:a"}]
    _finish(tasks, "urn:t:a")
    assert mirror.nodes["urn:t:a"][2]["status"] == "completed"
    tasks.fail("urn:t:b")
    tasks.start("urn:t:p")
    tasks.complete("urn:t:p")
    tasks.release("urn:t:p")
    assert mirror.nodes == {}


def test_a_failing_mirror_does_not_undo_the_change_and_remirror_repairs(
    db: CoordinationDB, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = TaskRegistry(db, mirror=FailingMirror())
    tasks.register("urn:t:a")
    assert "the graph is down" in caplog.text
    assert tasks.get("urn:t:a").status is P
    repaired = RecordingMirror()
    tasks.mirror = repaired
    assert tasks.remirror() == 1
    assert set(repaired.nodes) == {"urn:t:a"}


def test_a_db_that_is_not_a_coordination_db_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="CoordinationStore"):
        TaskRegistry(None)  # type: ignore[arg-type]


# -- names the graph cannot hold ---------------------------------------------------------------


@pytest.fixture
def board(db: CoordinationDB) -> Iterator[Blackboard]:
    """A real blackboard over the test's database, mirroring its tasks and agents."""
    coordination = Coordination(db, owns_db=False)
    value = Blackboard(
        EmbeddedGraph(), config=BlackboardConfig(flush_interval_s=0.0), coordination=coordination
    )
    yield value
    value.close()


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"iri": "foo"}, "task IRI .* got 'foo'"),
        ({"parent": "bar"}, "parent IRI .* got 'bar'"),
        ({"depends_on": ["urn:t:known", "baz"]}, "dependency IRI .* got 'baz'"),
    ],
)
def test_a_mirrored_registry_refuses_a_name_the_graph_cannot_hold(
    board: Blackboard,
    kwargs: dict[str, Any],
    named: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    coordination = board.coordination
    assert coordination is not None
    coordination.tasks.register("urn:t:known")
    with pytest.raises(InvalidInputError, match=named):
        coordination.tasks.register(**{"iri": "urn:t:a", **kwargs})
    assert [t.iri for t in coordination.tasks.tasks()] == ["urn:t:known"]  # nothing written
    assert "mirroring" not in caplog.text
    assert [n.iri for n in board.by_type("Task")] == ["urn:t:known"]


def test_a_subtask_name_the_graph_cannot_hold_is_refused_through_the_handle(
    board: Blackboard,
) -> None:
    coordination = board.coordination
    assert coordination is not None
    coordination.tasks.register("urn:t:root")
    planner = board.agent("planner", role="plan", task="urn:t:root")
    with pytest.raises(InvalidInputError, match="'sub'"):
        planner.register_subtask("sub")
    assert coordination.tasks.subtree("urn:t:root") == ["urn:t:root"]
    assert planner.register_subtask("urn:t:sub").parent == "urn:t:root"


def test_without_a_mirror_any_name_without_spaces_names_a_task(tasks: TaskRegistry) -> None:
    """SQLite alone holds it: the registry is usable without a graph (a documented choice)."""
    assert tasks.register("foo").iri == "foo"
    tasks.register("baz")
    assert tasks.register("bar", parent="foo", depends_on=["baz"]).root == "foo"
