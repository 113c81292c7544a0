"""The memory tools for LangChain: standard suites, scoping, refusals as tool errors, an agent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_tests.integration_tests import ToolsIntegrationTests
from langchain_tests.unit_tests import ToolsUnitTests

from gliding_core import HashEmbedder, InvalidInputError, Memory, Scope
from gliding_langchain import (
    GlidingSaveMemoryTool,
    GlidingSearchMemoryTool,
    ScriptedChatModel,
    create_save_memory_tool,
    create_search_memory_tool,
)

ALICE = Scope.user("alice")


@pytest.fixture
def memory() -> Iterator[Memory]:
    with Memory(embedder=HashEmbedder()) as value:
        yield value


class _WithMemory:
    @pytest.fixture(autouse=True)
    def _memory(self) -> Iterator[None]:
        self._open = Memory(embedder=HashEmbedder())
        yield
        self._open.close()


class _SearchTool(_WithMemory):
    @property
    def tool_constructor(self) -> type[BaseTool]:
        return GlidingSearchMemoryTool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"memory": self._open, "scope": ALICE}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"query": "database", "limit": 2}


class TestSearchMemoryToolUnit(_SearchTool, ToolsUnitTests):
    pass


class TestSearchMemoryToolIntegration(_SearchTool, ToolsIntegrationTests):
    pass


class _SaveTool(_WithMemory):
    @property
    def tool_constructor(self) -> type[BaseTool]:
        return GlidingSaveMemoryTool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"memory": self._open, "scope": ALICE}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"content": "Alice prefers tea.", "action": "create"}


class TestSaveMemoryToolUnit(_SaveTool, ToolsUnitTests):
    pass


class TestSaveMemoryToolIntegration(_SaveTool, ToolsIntegrationTests):
    pass


def test_saved_memory_is_found_updated_and_deleted(memory: Memory) -> None:
    save = create_save_memory_tool(memory, scope=ALICE)
    search = create_search_memory_tool(memory, scope=ALICE)
    created = json.loads(save.invoke({"content": "Alice prefers green tea."}))
    assert created["action"] == "created"
    found = json.loads(search.invoke({"query": "green tea"}))
    assert [hit["id"] for hit in found] == [created["id"]]
    assert found[0]["content"] == "Alice prefers green tea."
    save.invoke({"action": "update", "id": created["id"], "content": "Alice prefers coffee."})
    found = json.loads(search.invoke({"query": "coffee"}))
    assert [hit["content"] for hit in found] == ["Alice prefers coffee."]
    save.invoke({"action": "delete", "id": created["id"]})
    assert json.loads(search.invoke({"query": "coffee"})) == []


def test_alice_memory_is_never_found_by_bob(memory: Memory) -> None:
    create_save_memory_tool(memory, scope=ALICE).invoke({"content": "Alice's PIN is 4321."})
    bob = create_search_memory_tool(memory, scope=Scope.user("bob"))
    assert json.loads(bob.invoke({"query": "PIN 4321"})) == []
    unscoped = create_search_memory_tool(memory)
    alice_run = {"configurable": {"user_id": "alice"}}
    bob_run = {"configurable": {"user_id": "bob"}}
    assert json.loads(unscoped.invoke({"query": "PIN 4321"}, config=alice_run))
    assert json.loads(unscoped.invoke({"query": "PIN 4321"}, config=bob_run)) == []


def test_scope_comes_from_the_run_when_the_tool_has_none(memory: Memory) -> None:
    save = create_save_memory_tool(memory)
    save.invoke({"content": "Bob likes jazz."}, config={"configurable": {"thread_id": "t9"}})
    thread = create_search_memory_tool(memory, scope=Scope.thread("t9"))
    assert len(json.loads(thread.invoke({"query": "jazz"}))) == 1


def test_bob_cannot_update_or_delete_alice_memory(memory: Memory) -> None:
    created = json.loads(
        create_save_memory_tool(memory, scope=ALICE).invoke({"content": "Alice owns a cat."})
    )
    bob = create_save_memory_tool(memory, scope=Scope.user("bob"))
    for action in ("update", "delete"):
        reply = bob.invoke({"action": action, "id": created["id"], "content": "a dog"})
        assert reply.startswith("Error: no memory of yours has the id")
    assert "Alice owns a cat." in memory.store.get(created["id"]).content  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"content": "  "}, "content must be"),
        ({"action": "update", "content": "x"}, "needs the id of a memory"),
        ({"action": "create", "id": "urn:x:1", "content": "x"}, "takes no id"),
        ({"action": "delete", "id": "urn:nope:1"}, "no memory of yours"),
    ],
)
def test_refusals_reach_the_model_as_tool_errors(
    memory: Memory, arguments: dict[str, Any], says: str
) -> None:
    save = create_save_memory_tool(memory, scope=ALICE)
    message = save.invoke({"type": "tool_call", "id": "c1", "name": save.name, "args": arguments})
    assert isinstance(message, ToolMessage)
    assert message.status == "error"
    assert says in str(message.content)
    assert memory.store.count() == 0


def test_a_run_without_scope_is_a_tool_error(memory: Memory) -> None:
    reply = create_search_memory_tool(memory).invoke({"query": "anything"})
    assert reply.startswith("Error: a scope needs a user_id")


def test_bad_construction_is_refused(memory: Memory) -> None:
    with pytest.raises(InvalidInputError, match="memory must be"):
        create_search_memory_tool("memory.db", scope=ALICE)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="shared must be"):
        create_search_memory_tool(memory, scope=ALICE, shared="urn:kg")  # type: ignore[arg-type]


def test_an_agent_saves_and_later_finds_a_memory(memory: Memory) -> None:
    def script(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(content=f"Done: {messages[-1].content}")
        if "remember" in messages[-1].text:
            call = {"name": "save_memory", "args": {"content": "User loves sailing."}, "id": "1"}
        else:
            call = {"name": "search_memory", "args": {"query": "sailing"}, "id": "2"}
        return AIMessage(content="", tool_calls=[call])

    model = ScriptedChatModel(reply=script)
    tools = [create_search_memory_tool(memory), create_save_memory_tool(memory)]
    agent = create_agent(model, tools=tools)
    alice = {"configurable": {"user_id": "alice", "thread_id": "a1"}}
    agent.invoke({"messages": [("user", "remember that I love sailing")]}, config=alice)
    later = {"configurable": {"user_id": "alice", "thread_id": "a2"}}
    result = agent.invoke({"messages": [("user", "what do I love?")]}, config=later)
    assert "User loves sailing." in result["messages"][-1].text
    bob = {"configurable": {"user_id": "bob", "thread_id": "b1"}}
    result = agent.invoke({"messages": [("user", "what do I love?")]}, config=bob)
    assert "sailing" not in result["messages"][-1].text


def test_an_argument_out_of_the_schema_is_a_tool_error(memory: Memory) -> None:
    search = create_search_memory_tool(memory, scope=ALICE)
    call = {
        "type": "tool_call",
        "id": "c2",
        "name": search.name,
        "args": {"query": "x", "limit": 500},
    }
    message = search.invoke(call)
    assert isinstance(message, ToolMessage)
    assert message.status == "error"
