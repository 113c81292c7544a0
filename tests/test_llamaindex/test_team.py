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

from gliding_core import InvalidInputError, Memory
from gliding_core.testing import Request, artifact_iri, node_iris, round_problems, step_iri
from gliding_core.view.team import ROLES
from gliding_llamaindex.team import (
    DEFAULT_NAMES,
    RoleWorkflow,
    TeamMemory,
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
NEXT = dict(zip(ROLES, [*(DEFAULT_NAMES[r] for r in ROLES[1:]), None], strict=True))


def build(
    memory: Memory, *, do: Callable[[list[ChatMessage]], None] | None = None
) -> tuple[RoleWorkflow, dict[str, ScriptedRole]]:
    scripts = {
        role: ScriptedRole(
            role, TASK, next_agent=NEXT[role], during_call=do if role == "do" else None
        )
        for role in ROLES
    }
    llms = {role: MockFunctionCallingLLM(response_generator=s) for role, s in scripts.items()}
    return pdca_workflow(memory, TASK, llms, budget=1_200), scripts


def text(messages: list[ChatMessage]) -> str:
    return "\n".join(m.content or "" for m in messages)


async def test_the_workflow_hands_off_in_order_and_leaves_a_correct_board(memory: Memory) -> None:
    team, _ = build(memory)
    output = await team.run(REQUEST.text)
    assert team.memory.handovers == ["planner", "doer", "checker", "decider"]
    assert str(output) == "act: 2 tool calls, 0 refused"
    assert round_problems(memory.blackboard, TASK, len(REQUEST.steps)) == []
    for role in ROLES:  # each agent was given the request, and only its own history
        history = team.memory.memory_of(DEFAULT_NAMES[role]).get_all()
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
    doer = team.memory.memory_of("doer").get_all()
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
        TeamMemory({"doer": team.memory.memory_of("doer")}, root="planner")
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
