"""A LlamaIndex role agent's frame by the tool outputs its chat history holds.

The team memory, each agent's ``GlidingMemory``, the blackboard, SQLite and tiktoken are real;
the messages are those a ``FunctionAgent`` puts into its memory when it finishes a run (its
tool calls and their outputs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM

from gliding_core import HashEmbedder, Memory, MemoryConfig, TopicConfig
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.testing import Request, node_iris
from gliding_core.tools.board_tools import read_node
from gliding_core.view.team import ROLES
from gliding_llamaindex.team import (
    DEFAULT_NAMES,
    RoleFunctionAgent,
    TeamMemory,
    pdca_workflow,
    role_memory,
)
from gliding_llamaindex.testing import ScriptedRole

TASK = "urn:task:li-economy"
A1, A2 = f"{TASK}/artifact/1", f"{TASK}/artifact/2"
LONG = "the parser for the refund format, with its validation and all of its tests"
WORKFLOW_TASK = "urn:task:li-economy-round"
NEXT = dict(zip(ROLES, [*(DEFAULT_NAMES[r] for r in ROLES[1:]), None], strict=True))

pytestmark = [  # as in test_team.py: what the workflow's pydantic models emit
    pytest.mark.filterwarnings(
        "ignore:The `__fields(_set)?__` attribute is deprecated"
        ":pydantic.warnings.PydanticDeprecatedSince20"
    ),
    pytest.mark.filterwarnings(
        "ignore:Accessing the 'model_(computed_)?fields' attribute on the instance is deprecated"
        ":pydantic.warnings.PydanticDeprecatedSince211"
    ),
]


@pytest.fixture
def memory() -> Iterator[Memory]:
    with Memory(
        config=MemoryConfig(topics=TopicConfig(interval_s=0)), embedder=HashEmbedder()
    ) as m:
        coordination = m.blackboard.coordination
        assert coordination is not None
        coordination.tasks.register(TASK)
        yield m


def artifact(doer: AgentHandle, iri: str, status: str = "draft") -> None:
    node = {"@id": iri, "@type": "Artifact", "summary": f"{iri}: {LONG}", "status": status}
    doer.write([node], area="execution")


def tool_turn(result: Any, call: str) -> list[ChatMessage]:
    """An assistant message calling ``read_node`` and the tool's output, as FunctionAgent puts."""
    return [
        ChatMessage(
            role="assistant",
            blocks=[ToolCallBlock(tool_call_id=call, tool_name="read_node", tool_kwargs={})],
        ),
        ChatMessage(
            role="tool",
            content=json.dumps(result),
            additional_kwargs={"tool_call_id": call, "name": "read_node"},
        ),
    ]


def memory_message(messages: list[ChatMessage]) -> str:
    """The text of the view's system messages (the memory, with the frame, is one of them)."""
    return "\n".join(m.content or "" for m in messages if m.role.value == "system")


def test_the_team_memory_shows_a_node_its_history_holds_by_reference(memory: Memory) -> None:
    doer = memory.agent("doer", role="do", task=TASK)
    artifact(doer, A1)
    artifact(doer, A2)
    checker = memory.agent("checker", role="check", task=TASK)
    team = TeamMemory({"checker": role_memory(memory, checker)}, root="checker")
    request = ChatMessage(role="user", content="review the artifacts")
    team.put(request)
    first = memory_message(team.get())
    assert f'"@id":"{A1}"' in first
    assert f'"@id":"{A2}"' in first
    read = tool_turn(read_node(checker, A1), "c1")
    team.put_messages(read)
    held = memory_message(team.get())
    assert f"{A1} (generation 1, unchanged)" in held
    assert f'"@id":"{A1}"' not in held
    assert f'"@id":"{A2}"' in held  # never read: whole
    artifact(doer, A1, "ready")  # another agent writes it
    moved = memory_message(team.get())
    assert f"{A1} changed (generation 1 -> 2)" in moved
    assert '"status":"ready"' in moved
    assert f"{A1} (generation" not in moved
    team.set([request])  # the history without the tool output: whole again
    trimmed = memory_message(team.get())
    assert f'"@id":"{A1}"' in trimmed
    assert "unchanged" not in trimmed
    assert "changed (" not in trimmed


def test_held_messages_count_for_the_next_view_only(memory: Memory) -> None:
    doer = memory.agent("doer", role="do", task=TASK)
    artifact(doer, A1)
    checker = memory.agent("checker", role="check", task=TASK)
    mine = role_memory(memory, checker)
    mine.put(ChatMessage(role="user", content="review the artifacts"))
    scratchpad = tool_turn(read_node(checker, A1), "c1")
    mine.hold(scratchpad)
    assert f"{A1} (generation 1, unchanged)" in memory_message(mine.get())
    assert f'"@id":"{A1}"' in memory_message(mine.get())  # once: the next view is whole
    mine.hold(scratchpad)
    mine.put(ChatMessage(role="user", content="and again"))  # a put drops what was held
    assert "unchanged" not in memory_message(mine.get())
    assert all(m.role.value != "tool" for m in mine.get_all())  # held is never history


async def test_a_workflow_agent_s_tool_results_in_progress_count(memory: Memory) -> None:
    scripts = {role: ScriptedRole(role, WORKFLOW_TASK, next_agent=NEXT[role]) for role in ROLES}
    llms = {role: MockFunctionCallingLLM(response_generator=s) for role, s in scripts.items()}
    team = pdca_workflow(memory, WORKFLOW_TASK, llms, names=DEFAULT_NAMES, budget=1_200)
    assert all(isinstance(a, RoleFunctionAgent) for a in team.workflow.agents.values())
    await team.run(Request("a refund endpoint", ("validate the payment",)).text)
    decision = node_iris(WORKFLOW_TASK)["decision"]
    first, second = (memory_message(r) for r in scripts["act"].requests[:2])
    assert decision not in first  # not written yet
    assert any(  # the decider's write_node result is in the scratchpad sent after the view
        m.role.value == "tool" and decision in (m.content or "") for m in scripts["act"].requests[1]
    )
    assert f"{decision} (generation 1, unchanged)" in second
    assert f'"@id":"{decision}"' not in second
