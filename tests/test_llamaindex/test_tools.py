"""MemoryToolSpec: the tools, scoping, refusals as tool output, and a real FunctionAgent."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from gliding_core import InvalidInputError, Memory, Scope
from gliding_llamaindex import MemoryToolSpec

# Building a workflow inspects the agent's members; on a pydantic model that touches attributes
# pydantic deprecated (LlamaIndex's code, not ours): ignore exactly those, as test_agent does.
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

ALICE = Scope.user("alice")


def tools(memory: Memory, scope: Scope = ALICE) -> dict[str, FunctionTool]:
    return {t.metadata.get_name(): t for t in MemoryToolSpec(memory, scope=scope).to_tool_list()}


def test_spec_gives_search_and_save_with_schemas(memory: Memory) -> None:
    found = tools(memory)
    assert sorted(found) == ["save_memory", "search_memory"]
    schema = found["save_memory"].metadata.get_parameters_dict()
    assert schema["properties"]["action"]["enum"] == ["create", "update", "delete"]
    assert "scope" not in schema["properties"]  # bound at build time, never the model's
    assert found["search_memory"].metadata.get_parameters_dict()["required"] == ["query"]


async def test_save_update_delete_and_search_sync_and_async(memory: Memory) -> None:
    found = tools(memory)
    created = json.loads(found["save_memory"].call(content="Alice keeps bees.").content)
    hits = json.loads((await found["search_memory"].acall(query="bees")).content)
    assert [hit["id"] for hit in hits] == [created["id"]]
    await found["save_memory"].acall(
        action="update", id=created["id"], content="Alice keeps goats."
    )
    hits = json.loads(found["search_memory"].call(query="goats").content)
    assert [hit["content"] for hit in hits] == ["Alice keeps goats."]
    found["save_memory"].call(action="delete", id=created["id"])
    assert json.loads(found["search_memory"].call(query="goats").content) == []


def test_alice_memory_is_never_found_by_bob(memory: Memory) -> None:
    created = json.loads(tools(memory)["save_memory"].call(content="Alice's PIN is 4321.").content)
    bob = tools(memory, Scope.user("bob"))
    assert json.loads(bob["search_memory"].call(query="PIN 4321").content) == []
    refused = bob["save_memory"].call(action="delete", id=created["id"]).content
    assert refused.startswith("Error: no memory of yours has the id")
    assert memory.store.get(created["id"]) is not None


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"content": ""}, "content must be"),
        ({"action": "update", "content": "x"}, "needs the id of a memory"),
        ({"action": "forget", "id": "urn:x:1"}, "action: Input should be 'create'"),
    ],
)
def test_refusals_are_tool_output_saying_what_to_do(
    memory: Memory, arguments: dict[str, Any], says: str
) -> None:
    output = tools(memory)["save_memory"].call(**arguments)
    assert output.content.startswith("Error:")
    assert says in output.content
    assert memory.store.count() == 0


def test_bad_construction_is_refused(memory: Memory) -> None:
    with pytest.raises(InvalidInputError, match="memory must be"):
        MemoryToolSpec("memory.db", scope=ALICE)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="scope must be a Scope"):
        MemoryToolSpec(memory, scope="alice")  # type: ignore[arg-type]


async def test_a_function_agent_saves_then_finds_its_memory(memory: Memory) -> None:
    def script(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        last = messages[-1]
        if last.role.value == "tool":
            return ChatMessage(role="assistant", content=f"Noted: {last.content}")
        if "remember" in str(last.content):
            name, arguments = "save_memory", {"content": "User's dog is called Rex."}
        else:
            name, arguments = "search_memory", {"query": "dog name"}
        block = ToolCallBlock(tool_call_id="c1", tool_name=name, tool_kwargs=arguments)
        return ChatMessage(role="assistant", blocks=[block])

    def agent(scope: Scope) -> FunctionAgent:
        llm = MockFunctionCallingLLM(response_generator=script)
        return FunctionAgent(llm=llm, tools=MemoryToolSpec(memory, scope=scope).to_tool_list())

    await agent(ALICE).run("remember my dog is Rex")
    answer = await agent(ALICE).run("what is my dog called?")
    assert "Rex" in str(answer)
    answer = await agent(Scope.user("bob")).run("what is my dog called?")
    assert "Rex" not in str(answer)
