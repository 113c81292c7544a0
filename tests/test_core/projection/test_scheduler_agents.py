"""Frames read as an agent: only the areas its role may read, at every level of the read path."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gliding_core import HashEmbedder, InvalidInputError, Memory, PermissionDeniedError
from gliding_core.blackboard.board import AgentHandle, task_graphs
from gliding_core.blackboard.permissions import PermissionMatrix
from gliding_core.config import BlackboardConfig, MemoryConfig, TopicConfig
from gliding_core.store.scope import Scope
from gliding_core.view.frame_source import FrameSource
from gliding_core.view.sources import SourceRequest

TASK = "urn:ex:task:agents"
OTHER = "urn:ex:task:agents-other"
WRITTEN_AREAS = ("plan", "execution", "review", "decision", "knowledge", "shared")


@pytest.fixture
def memory() -> Iterator[Memory]:
    config = MemoryConfig(
        topics=TopicConfig(interval_s=0), blackboard=BlackboardConfig(flush_interval_s=0)
    )
    with Memory(config=config, embedder=HashEmbedder()) as value:
        yield value


def actor_iri(agent: AgentHandle) -> str:
    """The IRI of an agent's node in the agents area (the coordination layer's mirror)."""
    return f"urn:gliding-horse:agent:{agent.name}"


def write_every_area(memory: Memory, task: str = TASK) -> None:
    """One summarised node in each area, and a plan step in plan and in execution."""
    board = memory.blackboard
    for area in WRITTEN_AREAS:
        node = {"@id": f"{task}/{area}", "@type": "Note", "summary": f"secret of {area}"}
        board.write([node], task=task, area=area)
    step = {"@type": "PlanStep", "plan": {"@id": f"{task}/plan"}}
    board.write([{**step, "@id": f"{task}/planned", "summary": "x"}], task=task, area="plan")
    board.write([{**step, "@id": f"{task}/doing", "summary": "y"}], task=task, area="execution")


@pytest.mark.parametrize("role", ["plan", "do", "check", "act"])
def test_an_agent_sees_exactly_the_areas_its_role_may_read(memory: Memory, role: str) -> None:
    write_every_area(memory)
    scheduler = memory.scheduler.with_roles({role: "summary_only"})
    agent = memory.agent("a", role=role, task=TASK)
    read = scheduler.read(TASK, role, budget=2_000, agent=agent)
    readable = set(PermissionMatrix().areas(role))
    expected = {f"{TASK}/{area}" for area in WRITTEN_AREAS if area in readable}
    shown = {iri for iri in read.iris if iri.split("/")[-1] in WRITTEN_AREAS}
    assert read.level == "l3"
    assert shown == expected
    for area in set(WRITTEN_AREAS) - readable:
        assert f"secret of {area}" not in read.text
    system = scheduler.read(TASK, role, budget=2_000)
    assert {f"{TASK}/{area}" for area in WRITTEN_AREAS} <= set(system.iris)


def test_a_view_built_for_the_system_is_not_served_to_an_agent(memory: Memory) -> None:
    write_every_area(memory)
    scheduler = memory.scheduler
    doer = memory.agent("d", role="do", task=TASK)
    system = scheduler.read(TASK, "do", budget=1_000)  # da_input over plan and execution
    assert {f"{TASK}/planned", f"{TASK}/doing"} <= set(system.iris)
    mine = scheduler.read(TASK, "do", budget=1_000, agent=doer)  # the plan area is denied
    assert f"{TASK}/doing" in mine.iris
    assert f"{TASK}/planned" not in mine.iris
    assert scheduler.read(TASK, "do", budget=1_000).iris == system.iris  # and back again
    assert scheduler.read(TASK, "do", budget=1_000, agent=doer).iris == mine.iris
    assert scheduler.projector.cache.stats().views == 2


def test_a_frame_of_no_readable_area_is_empty_and_the_fallback_is_confined(
    memory: Memory,
) -> None:
    write_every_area(memory)
    scheduler = memory.scheduler.with_roles({"act": "da_input"})  # plan, exec., knowl.
    actor = memory.agent("x", role="act", task=TASK)  # reads review, decision (and tasks...)
    read = scheduler.read(TASK, "act", budget=2_000, agent=actor)
    assert read.level == "l2"
    assert {f"{TASK}/review", f"{TASK}/decision"} <= set(read.iris)
    for denied in ("plan", "execution", "knowledge", "shared", "planned", "doing"):
        assert f"{TASK}/{denied}" not in read.iris
    assert actor_iri(actor) not in read.iris  # the coordination mirror is not content
    assert scheduler.projector.project(TASK, "da_input", areas=[]).step == "empty"


def test_l0_as_an_agent_keeps_what_its_role_may_read(memory: Memory) -> None:
    plan_graph, execution_graph = task_graphs(TASK, ["plan", "execution"])
    memory.store.put({"@id": "urn:ex:l0:plan", "text": "the parser plan"}, named_graph=plan_graph)
    memory.store.put(
        {"@id": "urn:ex:l0:done", "text": "the parser code"}, named_graph=execution_graph
    )
    (foreign,) = task_graphs(OTHER, ["execution"])
    memory.store.put({"@id": "urn:ex:l0:other", "text": "parser elsewhere"}, named_graph=foreign)
    memory.store.put({"@id": "urn:ex:l0:fact", "text": "a parser fact"})
    memory.store.put(
        {"@id": "urn:ex:l0:task-fact", "text": "the task's parser fact"},
        tags=[Scope.task(TASK).tag],
    )
    scheduler = memory.scheduler
    doer = memory.agent("d", role="do", task=TASK)
    assert scheduler.read(TASK, "do", budget=500, agent=doer).iris == ("urn:ex:l0:done",)
    assert set(scheduler.read(TASK, "do", budget=500).iris) == {
        "urn:ex:l0:plan",
        "urn:ex:l0:done",
    }
    memory.store.delete("urn:ex:l0:done")
    memory.store.delete("urn:ex:l0:plan")
    found = scheduler.read(TASK, "do", budget=500, query="parser", agent=doer)
    assert found.level == "l0"
    assert set(found.iris) == {"urn:ex:l0:task-fact"}  # the task's scope, no other
    system = scheduler.read(TASK, "do", budget=500, query="parser").iris
    assert {"urn:ex:l0:other", "urn:ex:l0:fact", "urn:ex:l0:task-fact"} <= set(system)


def test_reads_an_agent_may_not_make_are_refused(memory: Memory) -> None:
    scheduler = memory.scheduler
    doer = memory.agent("d", role="do", task=TASK)
    with pytest.raises(PermissionDeniedError, match="works on task"):
        scheduler.read(OTHER, "do", budget=100, agent=doer)
    with pytest.raises(PermissionDeniedError, match="has role 'do'"):
        scheduler.read(TASK, "plan", budget=100, agent=doer)
    with pytest.raises(PermissionDeniedError, match="works on task"):
        FrameSource(scheduler, OTHER, "do", agent=doer)
    assert scheduler.read(TASK, "executor", budget=100, agent=doer).level == "none"  # an alias
    with Memory(engines=False, embedder=HashEmbedder()) as elsewhere:
        stranger = elsewhere.agent("s", role="do", task=TASK)
        with pytest.raises(InvalidInputError, match="this scheduler's blackboard"):
            scheduler.read(TASK, "do", budget=100, agent=stranger)
    with pytest.raises(InvalidInputError, match="AgentHandle"):
        FrameSource.for_agent(scheduler, "d")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="areas"):
        scheduler.projector.project(TASK, "da_input", areas="plan")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="area"):
        scheduler.projector.project(TASK, "da_input", areas=["attic"])


def test_frame_source_for_an_agent(memory: Memory) -> None:
    write_every_area(memory)
    scheduler = memory.scheduler
    doer = memory.agent("d", role="do", task=TASK)
    source = FrameSource.for_agent(scheduler, doer)
    assert (source.task, source.role) == (TASK, "do")
    part = source.fill(SourceRequest("next?", 1_000))
    assert f"{TASK}/doing" in part.iris
    assert f"{TASK}/planned" not in part.iris
    assert part.tokens == memory.count_tokens(part.text) <= 1_000
    assert FrameSource(scheduler, TASK, "do", agent=doer).fill(SourceRequest(None, 1_000)) == part


def test_a_parameter_naming_a_denied_node_shows_only_what_the_role_may_read(
    memory: Memory,
) -> None:
    write_every_area(memory)
    scheduler = memory.scheduler
    doer = memory.agent("d", role="do", task=TASK)
    params = {"plan": f"{TASK}/plan"}  # the plan node is in the plan area: denied to do
    mine = scheduler.read(TASK, "do", budget=1_000, params=params, agent=doer)
    assert f"{TASK}/doing" in mine.iris
    assert f"{TASK}/planned" not in mine.iris
    assert "secret of plan" not in mine.text
    system = scheduler.read(TASK, "do", budget=1_000, params=params)
    assert f"{TASK}/planned" in system.iris


def test_an_agent_s_view_follows_writes_to_its_areas_only(memory: Memory) -> None:
    write_every_area(memory)
    projector = memory.scheduler.projector
    readable = memory.agent("d", role="do", task=TASK).readable_areas()
    first = projector.project(TASK, "da_input", budget=1_000, areas=readable)
    step = {"@type": "PlanStep", "plan": {"@id": f"{TASK}/plan"}, "summary": "z"}
    memory.blackboard.write([{**step, "@id": f"{TASK}/hidden"}], task=TASK, area="plan")
    unchanged = projector.project(TASK, "da_input", budget=1_000, areas=readable)
    assert unchanged.cached  # the plan area is not read: its write changes nothing here
    assert unchanged.iris == first.iris
    memory.blackboard.write([{**step, "@id": f"{TASK}/new"}], task=TASK, area="execution")
    after = projector.project(TASK, "da_input", budget=1_000, areas=readable)
    assert not after.cached
    assert f"{TASK}/new" in after.iris
    assert f"{TASK}/hidden" not in after.iris
