"""A role agent's frame by what its model request holds: reference, change, whole.

A real ``create_agent`` loop with the memory middleware and the blackboard tools, the real
blackboard, SQLite and tiktoken; the chat model is scripted (it calls the tools a test lays
out, and records every request it gets).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.runtime import Runtime

from gliding_core import HashEmbedder, InvalidInputError, Memory, MemoryConfig, TopicConfig
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.view.team import role_conversation
from gliding_langchain import BlackboardToolkit, GlidingMemoryMiddleware, ScriptedChatModel
from gliding_langchain.team import create_role_agent

TASK = "urn:task:economy"
A1, A2 = f"{TASK}/artifact/1", f"{TASK}/artifact/2"
STEP = f"{TASK}/step/1"
LONG = "the parser for the refund format, with its validation and all of its tests"

Step = Callable[[], list[dict[str, Any]]]  # the tool calls of one model call (none: the end)


@pytest.fixture
def memory() -> Iterator[Memory]:
    with Memory(
        config=MemoryConfig(topics=TopicConfig(interval_s=0)), embedder=HashEmbedder()
    ) as m:
        coordination = m.blackboard.coordination
        assert coordination is not None
        coordination.tasks.register(TASK)
        yield m


def artifact(doer: AgentHandle, iri: str, summary: str, status: str = "draft") -> None:
    doer.write(
        [{"@id": iri, "@type": "Artifact", "summary": summary, "status": status}], area="execution"
    )


def scripted(steps: list[Step]) -> ScriptedChatModel:
    """A model whose call ``n`` runs ``steps[n]`` and calls the tools it returns."""

    made = iter(range(len(steps) + 1))

    def reply(messages: list[BaseMessage]) -> AIMessage:
        number = next(made, len(steps))
        calls = steps[number]() if number < len(steps) else []
        for index, call in enumerate(calls):
            call.setdefault("id", f"call-{number}-{index}")
        return AIMessage(content="" if calls else "done", tool_calls=calls)

    return ScriptedChatModel(reply=reply)


def read(iri: str) -> Step:
    return lambda: [{"name": "read_node", "args": {"iri": iri}}]


def then(action: Callable[[], None], step: Step) -> Step:
    def run() -> list[dict[str, Any]]:
        action()
        return step()

    return run


def memory_text(request: list[BaseMessage]) -> str:
    """The system message of a request: the instructions, then the memory (the frame)."""
    assert request[0].type == "system"
    return request[0].text


class DropToolResults(AgentMiddleware[AgentState[Any], Any, Any]):
    """The user's trimming: from the model call ``at`` on, drop every tool call and result."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.calls = at, 0

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        self.calls += 1
        if self.calls < self.at:
            return None
        doomed = [
            m.id
            for m in state["messages"]
            if m.id and (isinstance(m, ToolMessage) or getattr(m, "tool_calls", None))
        ]
        return {"messages": [RemoveMessage(id=key) for key in doomed]} if doomed else None


def test_a_node_read_is_a_reference_then_its_change_then_whole_once_trimmed(
    memory: Memory,
) -> None:
    doer = memory.agent("doer", role="do", task=TASK)
    artifact(doer, A1, f"artifact 1: {LONG}")
    artifact(doer, A2, f"artifact 2: {LONG}")
    checker = memory.agent("checker", role="check", task=TASK)
    revise = lambda: artifact(doer, A1, f"artifact 1: {LONG}", "ready")  # noqa: E731
    model = scripted([read(A1), then(revise, read(STEP)), read(STEP), read(STEP)])
    agent = create_role_agent(model, checker, memory=memory, middleware=[DropToolResults(4)])
    agent.graph.invoke({"messages": [("user", "review the artifacts")]})
    first, held, moved, trimmed = (memory_text(r) for r in model.requests[:4])
    # Never read: both artifacts whole.
    assert f"artifact 1: {LONG}" in first
    assert f"artifact 2: {LONG}" in first
    # Read at its current generation: a reference; the other artifact, never read, whole.
    assert f"{A1} (generation 1, unchanged)" in held
    assert f'"@id":"{A1}"' not in held
    assert f'"@id":"{A2}"' in held
    # Another agent wrote it: the change, never a reference to the old copy.
    assert f"{A1} changed (generation 1 -> 2)" in moved
    assert '"status":"ready"' in moved
    assert f"{A1} (generation" not in moved
    # The tool result is out of the request: whole again, though an earlier call showed it.
    assert not any(isinstance(m, ToolMessage) for m in model.requests[3])
    assert f'"@id":"{A1}"' in trimmed
    assert "unchanged" not in trimmed
    assert "changed (" not in trimmed
    views = agent.middleware.views
    assert all(view.tokens <= 1_200 for view in views)
    frames = [next(p.tokens for p in view.parts if p.source == "frame") for view in views]
    assert frames[1] < frames[0]  # the economy: the copy in the request is not repeated
    assert frames[3] == frames[0]  # whole again ("ready" costs what "draft" did)


def test_nothing_the_agent_may_not_read_reaches_its_frame(memory: Memory) -> None:
    planner = memory.agent("planner", role="plan", task=TASK)
    planner.write([{"@id": STEP, "@type": "Step", "summary": "the secret plan step"}], area="plan")
    doer = memory.agent("doer", role="do", task=TASK)
    artifact(doer, A1, f"artifact 1: {LONG}")
    step = memory.blackboard.read(STEP)
    assert step is not None
    # A tool that answers like read_node, for a node of an area the checker may not read.
    planted = {"found": True, "id": STEP, "generation": step.generation, "value": step.node}

    def peek() -> str:
        return json.dumps(planted)

    tool = StructuredTool.from_function(peek, name="peek", description="Peek.")
    checker = memory.agent("checker", role="check", task=TASK)
    model = scripted([read(STEP), lambda: [{"name": "peek", "args": {}}], read(A1)])
    agent = create_role_agent(model, checker, memory=memory, tools=[tool])
    agent.graph.invoke({"messages": [("user", "review the artifacts")]})
    refused = [m for m in model.requests[1] if isinstance(m, ToolMessage)]
    assert "not permitted" in refused[0].text  # read_node refuses it: no copy
    for request in model.requests:
        frame = memory_text(request)
        assert STEP not in frame
        assert "secret" not in frame
    assert f"{A1} (generation 1, unchanged)" in memory_text(model.requests[3])


def test_the_economy_can_be_turned_off(memory: Memory) -> None:
    doer = memory.agent("doer", role="do", task=TASK)
    artifact(doer, A1, f"artifact 1: {LONG}")
    checker = memory.agent("checker", role="check", task=TASK)
    model = scripted([read(A1)])
    chat = role_conversation(memory, checker, economy=False, budget=1_200)
    graph = create_agent(
        model,
        BlackboardToolkit(checker).get_tools(),
        middleware=[GlidingMemoryMiddleware(conversation=chat)],
    )
    graph.invoke({"messages": [("user", "review the artifacts")]})
    second = "\n".join(m.text for m in model.requests[1] if not isinstance(m, ToolMessage))
    assert f'"@id":"{A1}"' in second
    assert "unchanged" not in second
    with pytest.raises(InvalidInputError, match="economy must be a bool"):
        role_conversation(memory, checker, economy="yes")  # type: ignore[arg-type]
