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

from gliding_core import HashEmbedder, Memory, MemoryConfig, TopicConfig
from gliding_core.blackboard.handle import AgentHandle
from gliding_core.board_tools import read_node
from gliding_llamaindex.team import TeamMemory, role_memory

TASK = "urn:task:li-economy"
A1, A2 = f"{TASK}/artifact/1", f"{TASK}/artifact/2"
LONG = "the parser for the refund format, with its validation and all of its tests"


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
