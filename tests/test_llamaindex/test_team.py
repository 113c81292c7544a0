"""The round with LlamaIndex: four FunctionAgents in an AgentWorkflow, each with its own memory.

The workflow, the agents' loops, the hand-offs, the memories, the blackboard, SQLite and
tiktoken are real; the LLMs are ``MockFunctionCallingLLM``s acting from the role scripts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM

from gliding_core import Event, EventType, InvalidInputError, Memory
from gliding_core.testing import Request, artifact_iri, node_iris, round_problems, step_iri
from gliding_core.view.team import ROLES
from gliding_llamaindex.team import (
    DEFAULT_NAMES,
    RoleWorkflow,
    TeamMemory,
    create_role_agent,
    default_names,
    pdca_workflow,
    role_memory,
)
from gliding_llamaindex.testing import ScriptedRole, pdca_llm

pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:The `__fields(_set)?__` attribute is deprecated"
        ":pydantic.warnings.PydanticDeprecatedSince20"
    ),
    pytest.mark.filterwarnings(
        "ignore:Accessing the 'model_(computed_)?fields' attribute on the instance is deprecated"
        ":pydantic.warnings.PydanticDeprecatedSince211"
    ),
]

TASK = "urn:task:li-refunds"
REQUEST = Request("a refund endpoint", ("validate the payment", "call the vault"))
NOTE = "Note from the user: refunds need an audit row."
NAMES = default_names(TASK)  # the workflow's agents unless named: the hand-offs name them


def following(names: dict[str, str]) -> dict[str, str | None]:
    """Role -> the agent it hands off to (none for the last)."""
    return dict(zip(ROLES, [*(names[r] for r in ROLES[1:]), None], strict=True))


def build(
    memory: Memory, *, do: Callable[[list[ChatMessage]], None] | None = None, task: str = TASK
) -> tuple[RoleWorkflow, dict[str, ScriptedRole]]:
    after = following(default_names(task))
    scripts = {
        role: ScriptedRole(
            role, task, next_agent=after[role], during_call=do if role == "do" else None
        )
        for role in ROLES
    }
    llms = {role: MockFunctionCallingLLM(response_generator=s) for role, s in scripts.items()}
    return pdca_workflow(memory, task, llms, budget=1_200), scripts


def text(messages: list[ChatMessage]) -> str:
    return "\n".join(m.content or "" for m in messages)


async def test_the_workflow_hands_off_in_order_and_leaves_a_correct_board(memory: Memory) -> None:
    team, _ = build(memory)
    output = await team.run(REQUEST.text)
    assert team.memory.handovers == [NAMES[role] for role in ROLES]
    assert str(output) == "act: 2 tool calls, 0 refused"
    assert round_problems(memory.blackboard, TASK, len(REQUEST.steps)) == []
    for role in ROLES:  # each agent was given the request, and only its own history
        history = team.memory.memory_of(NAMES[role]).get_all()
        users = [m.content for m in history if m.role.value == "user"]
        assert users == [REQUEST.text], role


async def test_each_agent_sees_its_frame_and_no_area_it_may_not_read(memory: Memory) -> None:
    team, scripts = build(memory)
    await team.run(REQUEST.text)
    steps = [step_iri(TASK, i) for i in (1, 2)]
    artifacts = [artifact_iri(TASK, i) for i in (1, 2)]
    iris = node_iris(TASK)
    first = {role: text(scripts[role].requests[0]) for role in ROLES}
    assert all(iri in first["do"] for iri in steps)
    assert all(iri in first["check"] for iri in artifacts)
    assert iris["review"] in first["act"]
    hidden = {
        "check": [*steps, iris["plan"], iris["decision"]],
        "act": [*steps, *artifacts, iris["plan"]],
        "do": [iris["review"], iris["decision"]],
    }
    for role, never in hidden.items():
        for request in scripts[role].requests:
            leaked = [iri for iri in never if f'"{iri}"' in text(request)]
            assert leaked == [], f"{role} was shown {leaked}"


async def test_a_supplementary_input_reaches_the_working_agent_exactly_once(
    memory: Memory,
) -> None:
    sent: list[threading.Thread] = []

    def send(_: list[ChatMessage]) -> None:
        if not sent:  # the user sends a note while the do agent works
            sent.append(threading.Thread(target=memory.supplements.put, args=(TASK, NOTE)))
            sent[0].start()
            sent[0].join()

    team, scripts = build(memory, do=send)
    await team.run(REQUEST.text)
    assert NOTE not in text(scripts["do"].requests[0])
    assert text(scripts["do"].requests[1]).count(NOTE) == 1
    doer = team.memory.memory_of(NAMES["do"]).get_all()
    assert [m.content for m in doer].count(NOTE) == 1
    for role in ("plan", "check", "act"):
        assert all(NOTE not in text(r) for r in scripts[role].requests), role
    assert memory.supplements.pending_count(TASK) == 0
    assert round_problems(memory.blackboard, TASK, 2) == []


def test_every_agent_reads_through_the_memorys_one_scheduler(memory: Memory) -> None:
    team, _ = build(memory)
    assert list(team.handles) == list(ROLES)
    for handle in team.handles.values():
        frame = team.memory.memory_of(handle.name).conversation.extra_sources[0]
        assert frame.scheduler is memory.scheduler  # type: ignore[attr-defined]
    with pytest.raises(InvalidInputError, match="names must differ"):
        pdca_workflow(
            memory, TASK, {r: pdca_llm(r, TASK) for r in ROLES}, names=dict.fromkeys(ROLES, "x")
        )


def test_team_memory_checks_its_parts(memory: Memory) -> None:
    team, _ = build(memory)
    with pytest.raises(InvalidInputError, match="root"):
        TeamMemory({"doer": team.memory.memory_of(NAMES["do"])}, root="planner")
    with pytest.raises(InvalidInputError, match="not a GlidingMemory"):
        TeamMemory({"doer": object()}, root="doer")  # type: ignore[dict-item]
    with pytest.raises(InvalidInputError, match="no agent"):
        team.memory.memory_of("nobody")
    with pytest.raises(InvalidInputError, match="missing"):
        pdca_workflow(memory, TASK, {"plan": pdca_llm("plan", TASK)})
    with pytest.raises(InvalidInputError, match="llms must map roles"):
        pdca_workflow(memory, TASK, [pdca_llm("plan", TASK)])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="memory must be a gliding Memory"):
        role_memory("memory", team.handles["do"])  # type: ignore[arg-type]


async def test_rounds_on_three_tasks_run_in_one_memory_and_leave_no_agent(memory: Memory) -> None:
    coordination = memory.blackboard.coordination
    assert coordination is not None
    tasks = [f"urn:task:li-round-{n}" for n in (1, 2, 3)]
    finished: list[str] = []

    def keep(event: Event) -> None:
        if event.payload["status"] == "Completed":
            finished.append(str(event.source))

    memory.bus.subscribe(keep, [EventType.AGENT_STATUS_CHANGED.value])
    for task in tasks:
        team, _ = build(memory, task=task)
        output = await team.run(REQUEST.text)
        assert str(output) == "act: 2 tool calls, 0 refused", task
        assert team.memory.handovers == [default_names(task)[role] for role in ROLES]
        assert round_problems(memory.blackboard, task, len(REQUEST.steps)) == [], task
        assert coordination.tasks.get(task).status.value == "completed"
        assert coordination.agents.agents() == [], task  # completed and unregistered
    assert finished == [default_names(task)[role] for task in tasks for role in ROLES]


def test_a_name_another_task_holds_is_refused_saying_how_to_proceed(memory: Memory) -> None:
    coordination = memory.blackboard.coordination
    assert coordination is not None
    memory.agent("planner", role="plan", task="urn:task:elsewhere")
    llms = {role: pdca_llm(role, TASK) for role in ROLES}
    with pytest.raises(InvalidInputError) as refused:
        pdca_workflow(memory, TASK, llms, names=DEFAULT_NAMES)
    message = str(refused.value)
    assert "agent 'planner' is live as 'plan' on 'urn:task:elsewhere'" in message
    assert "another name" in message
    assert "unregister('planner')" in message
    assert "default_names(task)" in message
    assert TASK not in coordination.tasks  # refused before anything was written
    team, _ = build(memory)  # the task's own names: beside that agent
    assert team.memory.handovers == [NAMES["plan"]]


def test_role_agents_and_the_workflow_take_the_frameworks_arguments(memory: Memory) -> None:
    llms = {role: pdca_llm(role, TASK) for role in ROLES}
    options = {"timeout": 120.0, "initial_state": {"ticket": "R-7"}, "verbose": False}
    team = pdca_workflow(memory, TASK, llms, workflow_options=options)
    assert team.workflow.initial_state == {"ticket": "R-7"}
    assert team.workflow._timeout == 120.0
    with pytest.raises(InvalidInputError, match=r"\['root_agent'\] are set by the round"):
        pdca_workflow(memory, TASK, llms, workflow_options={"root_agent": "x"})
    with pytest.raises(InvalidInputError, match="workflow_options must map"):
        pdca_workflow(memory, TASK, llms, workflow_options=["timeout"])  # type: ignore[arg-type]
    handle = team.handles["do"]
    agent = create_role_agent(
        pdca_llm("do", TASK), handle, description="Builds the artifacts.", streaming=False
    )
    assert (agent.name, agent.description, agent.streaming) == (
        handle.name,
        "Builds the artifacts.",
        False,
    )
    assert agent.turn is None  # a turn only in a round
    with pytest.raises(InvalidInputError, match=r"\['name'\] are set by the role agent"):
        create_role_agent(pdca_llm("do", TASK), handle, name="other")
    with pytest.raises(InvalidInputError, match="turn must be a bool"):
        create_role_agent(pdca_llm("do", TASK), handle, turn="yes")  # type: ignore[arg-type]


async def test_a_workflow_runs_again_from_its_first_agent(memory: Memory) -> None:
    team, _ = build(memory)
    await team.run(REQUEST.text)
    await team.run(REQUEST.text)  # a second round of the same team
    assert team.memory.handovers == [NAMES[role] for role in ROLES]
    assert memory.blackboard.coordination.agents.agents() == []  # type: ignore[union-attr]
