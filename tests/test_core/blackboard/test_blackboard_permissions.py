"""Permissions on an agent's handle: the matrix as data, and every refusal enforced."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gliding_core import InvalidInputError, L0Store
from gliding_core.blackboard.board import AgentHandle, Blackboard
from gliding_core.blackboard.coordination.registries import Coordination
from gliding_core.blackboard.coordination.tasks import TaskRegistry
from gliding_core.blackboard.graph import GraphBackend
from gliding_core.blackboard.permissions import DEFAULT_MATRIX, Operation, PermissionMatrix
from gliding_core.blackboard.vocabulary import AREAS, area_graph
from gliding_core.config import BlackboardConfig, CoordinationConfig
from gliding_core.errors import PermissionDeniedError
from tests.test_core.blackboard.test_blackboard_graph import make_backend

TASK = "iri://task/t1"
OTHER = "iri://task/t2"

# The default matrix, written out: (role, area) -> what the role may do there.
EXPECTED = {
    ("plan", "plan"): "crud",
    ("plan", "knowledge"): "r",
    ("do", "execution"): "crud",
    ("do", "knowledge"): "r",
    ("check", "review"): "crud",
    ("check", "execution"): "r",
    ("act", "decision"): "crud",
    ("act", "review"): "r",
    **{(role, "tasks"): "ru" for role in ("do", "check", "act")},
    ("plan", "tasks"): "cru",
    **{(role, "agents"): "r" for role in ("plan", "do", "check", "act")},
    **{(role, "messages"): "cr" for role in ("plan", "do", "check", "act")},
}
LETTERS = {"c": Operation.CREATE, "r": Operation.READ, "u": Operation.UPDATE, "d": Operation.DELETE}


@pytest.fixture(params=["memory", "disk", "server"])
def board(request: pytest.FixtureRequest, tmp_path: Path, store: L0Store) -> Iterator[Blackboard]:
    backend: GraphBackend = make_backend(request.param, tmp_path, request)
    value = Blackboard(backend, store=store, config=BlackboardConfig(flush_interval_s=0.0))
    yield value
    value.close()


def agents(board: Blackboard) -> dict[str, AgentHandle]:
    return {role: board.agent(f"{role}-agent", role=role, task=TASK) for role in DEFAULT_MATRIX}


def test_the_default_matrix_is_the_reference_one_plus_coordination() -> None:
    matrix = PermissionMatrix()
    for role in ["plan", "do", "check", "act"]:
        for area in AREAS:
            for letter, operation in LETTERS.items():
                expected = letter in EXPECTED.get((role, area), "")
                assert matrix.allows(role, area, operation) is expected, (role, area, operation)


def test_roles_are_checked_and_system_is_not_one(board: Blackboard) -> None:
    assert board.agent("a", role="PA", task=TASK).role == "plan"
    for role in ["system", "SYSTEM", "boss", ""]:
        with pytest.raises(InvalidInputError):
            board.agent("a", role=role, task=TASK)
    with pytest.raises(InvalidInputError):
        PermissionMatrix({"system": {"plan": ["read"]}})
    with pytest.raises(InvalidInputError, match="'write'"):
        PermissionMatrix({"plan": {"plan": ["write"]}})


def test_agents_write_their_own_area_and_are_refused_elsewhere(board: Blackboard) -> None:
    team = agents(board)
    team["plan"].write([{"@id": "urn:plan:1", "@type": "Plan"}], area="plan")
    team["do"].write([{"@id": "urn:exec:1", "@type": "Result"}], area="execution")
    for role, area in [
        ("do", "plan"),
        ("plan", "execution"),
        ("check", "decision"),
        ("act", "review"),
    ]:
        with pytest.raises(PermissionDeniedError) as refused:
            team[role].write([{"@id": f"urn:{role}:x"}], area=area)
        assert (refused.value.role, refused.value.operation) == (role, "create")
        assert refused.value.graph == area_graph(TASK, area)
        assert role in str(refused.value)
        assert area in str(refused.value)
        assert board.read(f"urn:{role}:x") is None


def test_update_and_delete_need_their_own_rights(board: Blackboard) -> None:
    matrix = PermissionMatrix({"check": {"review": ["create", "read"]}})
    board.permissions = matrix
    checker = board.agent("c", role="check", task=TASK)
    checker.write([{"@id": "urn:review:1", "verdict": "ok"}], area="review")
    with pytest.raises(PermissionDeniedError, match="update"):
        checker.write([{"@id": "urn:review:1", "verdict": "changed"}], area="review")
    with pytest.raises(PermissionDeniedError, match="delete"):
        checker.delete(["urn:review:1"])
    node = board.read("urn:review:1")
    assert node is not None
    assert node.node["verdict"] == "ok"


def test_reads_are_enforced_too(board: Blackboard) -> None:
    team = agents(board)
    team["plan"].write([{"@id": "urn:plan:1", "@type": "Plan"}], area="plan")
    team["check"].write([{"@id": "urn:review:1", "@type": "Review"}], area="review")
    assert team["act"].read("urn:review:1") is not None
    for role, iri in [("do", "urn:plan:1"), ("act", "urn:plan:1"), ("plan", "urn:review:1")]:
        with pytest.raises(PermissionDeniedError, match="read"):
            team[role].read(iri)
    with pytest.raises(PermissionDeniedError):
        team["do"].by_area("plan")
    assert [n.iri for n in team["act"].by_type("Review")] == ["urn:review:1"]
    assert team["do"].by_type("Plan") == []


def test_an_agent_sees_nothing_of_another_task(board: Blackboard) -> None:
    board.write([{"@id": "urn:plan:other", "@type": "Plan"}], task=OTHER, area="plan")
    planner = board.agent("p", role="plan", task=TASK)
    with pytest.raises(PermissionDeniedError, match="not in an area of task"):
        planner.read("urn:plan:other")
    assert planner.by_type("Plan") == []
    assert planner.query("SELECT ?s WHERE { ?s ?p ?o }").rows == ()


def test_an_agents_sparql_sees_only_the_graphs_it_may_read(board: Blackboard) -> None:
    board.write([{"@id": "urn:plan:1", "@type": "Plan"}], task=TASK, area="plan")
    board.write([{"@id": "urn:exec:1", "@type": "Result"}], task=TASK, area="execution")
    board.write([{"@id": "urn:review:1", "@type": "Review"}], task=TASK, area="review")
    checker = board.agent("c", role="check", task=TASK)
    plan_graph = area_graph(TASK, "plan")
    for text in [
        "SELECT DISTINCT ?s WHERE { ?s ?p ?o }",
        "SELECT DISTINCT ?s WHERE { GRAPH ?g { ?s ?p ?o } }",
        f"SELECT DISTINCT ?s WHERE {{ VALUES ?g {{ <{plan_graph}> }} GRAPH ?g {{ ?s ?p ?o }} }}",
    ]:
        seen = {row["s"] for row in checker.query(text).values()}
        assert seen <= {"urn:exec:1", "urn:review:1"}, text
    # A dataset clause is refused (the board sets the dataset); so is GRAPH naming a graph
    # the role may not read.
    for text in [
        f"SELECT DISTINCT ?s FROM <{plan_graph}> WHERE {{ ?s ?p ?o }}",
        f"SELECT DISTINCT ?s FROM NAMED <{plan_graph}> WHERE {{ GRAPH ?g {{ ?s ?p ?o }} }}",
    ]:
        with pytest.raises(InvalidInputError, match="FROM"):
            checker.query(text)
    for text in [
        f"SELECT DISTINCT ?s WHERE {{ GRAPH <{plan_graph}> {{ ?s ?p ?o }} }}",
        "SELECT DISTINCT ?s WHERE { GRAPH <urn:gliding-horse:meta> { ?s ?p ?o } }",
    ]:
        with pytest.raises(PermissionDeniedError, match="may not read graph"):
            checker.query(text)
    assert checker.query("ASK { <urn:exec:1> ?p ?o }", areas=["execution"]).boolean is True
    assert checker.query("ASK { <urn:review:1> ?p ?o }", areas=["execution"]).boolean is False
    with pytest.raises(PermissionDeniedError, match="plan"):
        checker.query("ASK { ?s ?p ?o }", areas=["plan"])


@pytest.mark.parametrize(
    "update",
    [
        "INSERT DATA { <urn:x> <urn:p> 1 }",
        "PREFIX ex: <urn:ex:> DELETE WHERE { ?s ?p ?o }",
        "# a comment\nCLEAR ALL",
        "BASE <urn:b> WITH <urn:g> DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }",
        "DROP GRAPH <urn:g>",
        "LOAD <http://example.org/data.ttl>",
    ],
)
def test_sparql_update_never_comes_from_an_agent(board: Blackboard, update: str) -> None:
    board.write([{"@id": "urn:plan:1", "@type": "Plan"}], task=TASK, area="plan")
    planner = board.agent("p", role="plan", task=TASK)
    with pytest.raises(PermissionDeniedError) as refused:
        planner.query(update)
    assert refused.value.operation == "sparql-update"
    assert board.read("urn:plan:1") is not None
    assert planner.query("ASK { <urn:plan:1> ?p ?o }").boolean is True


def test_an_agent_cannot_reach_a_remote_service(board: Blackboard) -> None:
    planner = board.agent("p", role="plan", task=TASK)
    for text in [
        "SELECT * WHERE { SERVICE <http://127.0.0.1:9/sparql> { ?s ?p ?o } }",
        "SELECT * WHERE { service silent <http://127.0.0.1:9/sparql> { ?s ?p ?o } }",
    ]:
        with pytest.raises(InvalidInputError, match="SERVICE"):
            planner.query(text)
    # The word inside a string or an IRI is not the keyword.
    assert planner.query('ASK { ?s <urn:service> "service" }').boolean is False


def test_a_role_that_may_read_nothing_cannot_query(board: Blackboard) -> None:
    board.permissions = PermissionMatrix({"do": {"execution": ["create"]}})
    doer = board.agent("d", role="do", task=TASK)
    with pytest.raises(PermissionDeniedError, match="no area"):
        doer.query("ASK { ?s ?p ?o }")


def test_a_configured_matrix_replaces_the_default(store: L0Store) -> None:
    from gliding_core.blackboard.graph import EmbeddedGraph

    config = BlackboardConfig(permissions={"do": {"plan": ["read"], "execution": ["create"]}})
    board = Blackboard(EmbeddedGraph(), config=config)
    board.write([{"@id": "urn:plan:1"}], task=TASK, area="plan")
    doer = board.agent("d", role="do", task=TASK)
    assert doer.read("urn:plan:1") is not None
    assert board.permissions.as_dict() == {"do": {"execution": ["create"], "plan": ["read"]}}
    with pytest.raises(InvalidInputError):
        board.agent("p", role="plan", task=TASK)


def test_a_handle_follows_a_matrix_replaced_after_its_grants(board: Blackboard) -> None:
    doer = board.agent("d", role="do", task=TASK)
    doer.write([{"@id": "urn:do:1"}], area="execution")  # create granted (and remembered)
    doer.write([{"@id": "urn:do:1", "v": 2}], area="execution")  # update granted
    board.permissions = PermissionMatrix({"do": {"execution": ["read"]}})
    with pytest.raises(PermissionDeniedError, match="create"):
        doer.write([{"@id": "urn:do:2"}], area="execution")
    with pytest.raises(PermissionDeniedError, match="update"):
        doer.write([{"@id": "urn:do:1", "v": 3}], area="execution")
    board.permissions = PermissionMatrix()
    assert doer.write([{"@id": "urn:do:2"}], area="execution")[0].generation == 1


def test_a_grant_checked_while_the_matrix_is_replaced_is_not_kept_for_the_new_one(
    board: Blackboard,
) -> None:
    """Another thread's check may replace the cache between a check and its grant's note."""
    doer = board.agent("d", role="do", task=TASK)
    strict = PermissionMatrix({"do": {"execution": ["read"]}})

    class Swapping(PermissionMatrix):
        """Grants, then (as another thread would) installs ``strict`` and checks under it."""

        def check(self, role: str, area: str, operation: Operation | str, *, graph: str) -> None:
            super().check(role, area, operation, graph=graph)
            board.permissions = strict
            doer.authorize("execution", Operation.READ)  # the other thread's check, on ``strict``

    board.permissions = Swapping()
    assert doer.authorize("execution", Operation.CREATE)  # granted by the old matrix
    assert board.permissions is strict
    with pytest.raises(PermissionDeniedError, match="create"):
        doer.write([{"@id": "urn:do:9"}], area="execution")


def test_a_read_allowed_before_follows_a_matrix_replaced_after_it(board: Blackboard) -> None:
    """A graph found readable is remembered with the matrix that allowed it, never beyond."""
    doer = board.agent("d", role="do", task=TASK)
    doer.write([{"@id": "urn:do:1"}], area="execution")
    assert doer.read("urn:do:1") is not None  # remembered as readable
    assert doer.read("urn:do:1") is not None  # the remembered path
    board.permissions = PermissionMatrix({"do": {"execution": ["create"]}})
    with pytest.raises(PermissionDeniedError, match="read"):
        doer.read("urn:do:1")
    board.permissions = PermissionMatrix()
    assert doer.read("urn:do:1") is not None


def test_a_read_checked_while_the_matrix_is_replaced_is_not_kept_for_the_new_one(
    board: Blackboard,
) -> None:
    doer = board.agent("d", role="do", task=TASK)
    doer.write([{"@id": "urn:do:1"}], area="execution")
    blind = PermissionMatrix({"do": {"execution": ["create"]}})

    class Swapping(PermissionMatrix):
        """Allows the read, then (as another thread would) installs ``blind``."""

        def check(self, role: str, area: str, operation: Operation | str, *, graph: str) -> None:
            super().check(role, area, operation, graph=graph)
            board.permissions = blind
            doer.authorize("execution", Operation.CREATE)  # the other thread's check

    board.permissions = Swapping()
    assert doer.read("urn:do:1") is not None  # allowed by the old matrix
    assert board.permissions is blind
    with pytest.raises(PermissionDeniedError, match="read"):
        doer.read("urn:do:1")


def test_a_handles_role_and_task_are_fixed(board: Blackboard) -> None:
    """Its grants and graphs are remembered for them: changing either is refused."""
    doer = board.agent("d", role="do", task=TASK)
    with pytest.raises(AttributeError):
        doer.role = "plan"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        doer.task = "urn:task:other"  # type: ignore[misc]
    assert (doer.role, doer.task) == ("do", TASK)


# -- task operations through a handle ------------------------------------------------------------


@pytest.fixture(params=["memory", "server"])
def coordinated(
    request: pytest.FixtureRequest, tmp_path: Path, store: L0Store
) -> Iterator[Blackboard]:
    """A blackboard with its coordination layer, so task operations reach a registry."""
    backend: GraphBackend = make_backend(request.param, tmp_path, request)
    coordination = Coordination.open(None, config=CoordinationConfig(sweep_interval_s=0))
    value = Blackboard(
        backend,
        store=store,
        bus=coordination.bus,
        config=BlackboardConfig(flush_interval_s=0.0),
        coordination=coordination,
    )
    value.coordination.tasks.register(TASK)  # type: ignore[union-attr]
    yield value
    value.close()


def registry(board: Blackboard) -> TaskRegistry:
    assert board.coordination is not None
    return board.coordination.tasks


@pytest.mark.parametrize("role", ["do", "check", "act"])
def test_only_the_planner_registers_subtasks(coordinated: Blackboard, role: str) -> None:
    handle = coordinated.agent(f"{role}-agent", role=role, task=TASK)
    with pytest.raises(PermissionDeniedError, match="may not create in the 'tasks' area"):
        handle.register_subtask("iri://task/t1/sub")
    assert "iri://task/t1/sub" not in registry(coordinated)
    planner = coordinated.agent("planner", role="plan", task=TASK)
    assert planner.register_subtask("iri://task/t1/sub").parent == TASK
    assert registry(coordinated).subtree(TASK) == [TASK, "iri://task/t1/sub"]


# Each task operation of a handle, the operation of the matrix it needs on ``tasks``, and the
# status the task must have for the operation to succeed when allowed.
TASK_OPERATIONS = {
    "task_status": (Operation.READ, "pending"),
    "start_task": (Operation.UPDATE, "pending"),
    "complete_task": (Operation.UPDATE, "running"),
    "fail_task": (Operation.UPDATE, "running"),
}


@pytest.mark.parametrize("method", sorted(TASK_OPERATIONS))
def test_task_operations_are_refused_where_the_matrix_forbids_them(
    coordinated: Blackboard, method: str
) -> None:
    needed, status = TASK_OPERATIONS[method]
    doer = coordinated.agent("doer", role="do", task=TASK)
    if status == "running":
        registry(coordinated).start(TASK)
    others = [op.value for op in Operation if op is not needed]
    coordinated.permissions = PermissionMatrix({"do": {"tasks": others, "execution": ["read"]}})
    with pytest.raises(PermissionDeniedError, match=f"may not {needed.value} in the 'tasks'"):
        getattr(doer, method)()
    assert registry(coordinated).get(TASK).status.value == status  # nothing changed


@pytest.mark.parametrize("method", sorted(TASK_OPERATIONS))
def test_the_default_matrix_lets_the_planner_run_its_task(
    coordinated: Blackboard, method: str
) -> None:
    _, status = TASK_OPERATIONS[method]
    planner = coordinated.agent("planner", role="plan", task=TASK)
    if status == "running":
        planner.start_task()
    task = getattr(planner, method)()
    expected = {
        "task_status": "pending",
        "start_task": "running",
        "complete_task": "completed",
        "fail_task": "failed",
    }[method]
    assert task.status.value == expected
    assert registry(coordinated).get(TASK).status.value == expected
