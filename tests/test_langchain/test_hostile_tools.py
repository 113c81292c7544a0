"""Every LangChain tool, called as a hostile model calls it: refused as text, never raised.

The tools are the ``BlackboardToolkit``'s (with ``project_frame``) and the two memory tools.
Each hostile shape of ``hostile_calls.CASES`` goes in by each way LangChain runs a tool
(``invoke`` with a dict, with a ``ToolCall`` as ``create_agent``'s tool node sends it, awaited,
``run``, ``arun``); the answer must be an ``Error:`` text naming what was wrong, and nothing on
the board or in L0 may change. On the code before ``GuardedTool``, extra names (a forged
``agent``) were dropped in silence and the call ran, a ``"5"`` or ``True`` for an integer was
taken, a wrong type came back as ``Tool input validation error``, and an argument nested
1,200 deep raised ``RecursionError`` out of ``BaseTool.run`` (its ``str()`` of the input).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool

from gliding_core import AgentHandle, Memory
from gliding_langchain import (
    BlackboardToolkit,
    ScriptedChatModel,
    create_save_memory_tool,
    create_search_memory_tool,
)
from tests.test_core.hostile_calls import (
    ALICE,
    CASES,
    EXAMPLES,
    MB10,
    TASK,
    Case,
    baseline,
    deep_dict,
    deep_json,
    hostile_calls,
    identity_held,
    open_memory,
    refusal_says_what,
    snapshot,
)

MODES = ["invoke", "tool_call", "ainvoke_tool_call", "run", "arun"]


@pytest.fixture(scope="module")
def board() -> Iterator[tuple[Memory, AgentHandle, dict[str, BaseTool]]]:
    memory = open_memory()
    handle = memory.agent("doer", role="do", task=TASK)
    found: list[BaseTool] = [
        *BlackboardToolkit(handle, scheduler=memory.scheduler).get_tools(),
        create_search_memory_tool(memory, scope=ALICE),
        create_save_memory_tool(memory, scope=ALICE),
    ]
    yield memory, handle, {tool.name: tool for tool in found}
    memory.close()


async def call(tool: BaseTool, arguments: Any, mode: str) -> Any:
    """Call ``tool`` with ``arguments`` the way ``mode`` names."""
    tool_call = {"name": tool.name, "args": arguments, "id": "call-1", "type": "tool_call"}
    if mode == "invoke":
        return tool.invoke(arguments)
    if mode == "tool_call":
        return tool.invoke(tool_call)
    if mode == "ainvoke_tool_call":
        return await tool.ainvoke(tool_call)
    if mode == "run":
        return tool.run(arguments)
    return await tool.arun(arguments)


def text_of(answer: Any, mode: str, tool: str) -> str:
    """The answer's text; a tool call's must be an error ``ToolMessage`` answering it."""
    if "tool_call" in mode:
        assert isinstance(answer, ToolMessage), type(answer).__name__
        assert (answer.tool_call_id, answer.name, answer.status) == ("call-1", tool, "error")
        return str(answer.content)
    assert isinstance(answer, str), type(answer).__name__
    return answer


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
async def test_a_hostile_call_is_refused_as_text_and_changes_nothing(
    board: tuple[Memory, AgentHandle, dict[str, BaseTool]], case: Case, mode: str
) -> None:
    memory, _, found = board
    before = snapshot(memory)
    answer = await call(found[case.tool], case.build(), mode)
    refusal_says_what(text_of(answer, mode, case.tool), case)
    assert snapshot(memory) == before


JSON_TEXTS = {
    "deep-1200": lambda: deep_json(1_200),
    "deep-100000": lambda: deep_json(100_000),
    "huge": lambda: '{"a": "' + "x" * MB10 + '"}',
    "not-json": lambda: '{"a": ',
    "nan": lambda: '{"a": NaN}',
    "overflowing-float": lambda: '{"a": 1e999}',
    "huge-int": lambda: '{"a": ' + "9" * 5_000 + "}",
    "forged": lambda: '{"agent": "planner", "role": "plan"}',
}


@pytest.mark.parametrize("text", sorted(JSON_TEXTS))
@pytest.mark.parametrize("tool", sorted(EXAMPLES))
def test_hostile_json_text_is_refused_before_or_by_its_parse(
    board: tuple[Memory, AgentHandle, dict[str, BaseTool]], tool: str, text: str
) -> None:
    memory, _, found = board
    before = snapshot(memory)
    answer = found[tool].invoke(JSON_TEXTS[text]())
    assert isinstance(answer, str)
    assert answer.startswith("Error:"), answer[:300]
    assert len(answer) < 2_000
    assert snapshot(memory) == before


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (["urn:node:1"], "must be a JSON object"),
        (7, "must be a JSON object"),
        (None, "must be a JSON object"),
        ({"name": "read_node", "args": ["x"], "id": "c", "type": "tool_call"}, "JSON object"),
        ({"name": "read_node", "args": None, "id": "c", "type": "tool_call"}, "JSON object"),
        ({"name": "read_node", "id": "c", "type": "tool_call"}, "JSON object"),
        ({"name": "read_node", "args": {"iri": 5}, "id": 5, "type": "tool_call"}, "id"),
        ({"name": "read_node", "args": {"agent": "planner"}, "type": "tool_call"}, "bound"),
    ],
)
def test_a_malformed_call_is_refused(
    board: tuple[Memory, AgentHandle, dict[str, BaseTool]], value: Any, says: str
) -> None:
    memory, _, found = board
    before = snapshot(memory)
    answer = found["read_node"].invoke(value)
    text = str(answer.content) if isinstance(answer, ToolMessage) else answer
    assert isinstance(text, str)
    assert text.startswith("Error:"), text
    assert says in text
    assert snapshot(memory) == before


def test_a_forged_identity_is_refused_and_the_handle_acts_as_itself(
    board: tuple[Memory, AgentHandle, dict[str, BaseTool]],
) -> None:
    memory, _, found = board
    before = baseline(memory)
    forged = {"agent": "planner", "role": "plan", "sender": "planner"}
    refused = found["post_message"].invoke({"topic": "progress", "payload": {}, **forged})
    assert refused.startswith("Error: post_message takes no argument 'agent', 'role', 'sender'")
    write = {"node": {"@id": "urn:node:plan", "text": "hijacked"}, "area": "plan"}
    assert found["write_node"].invoke({**write, "role": "plan"}).startswith("Error:")
    assert found["write_node"].invoke(write).startswith("Error: not permitted")
    posted = json.loads(found["post_message"].invoke({"topic": "progress"}))
    identity_held(memory, "doer", before)
    coordination = memory.blackboard.coordination
    assert coordination is not None
    assert coordination.messages.read_since(posted["sequence"] - 1)[0].sender == "doer"


def test_a_valid_call_still_runs(board: tuple[Memory, AgentHandle, dict[str, BaseTool]]) -> None:
    _, _, found = board
    read = found["read_node"]
    expected = {"found": False, "id": "urn:node:none"}
    assert json.loads(read.invoke({"iri": "urn:node:none"})) == expected
    assert json.loads(read.invoke('{"iri": "urn:node:none"}'))["found"] is False
    assert json.loads(read.invoke("urn:node:none"))["found"] is False  # one input: the first
    assert isinstance(json.loads(found["list_ready_tasks"].invoke("")), list)  # blank: none


def _hostile_model(arguments: dict[str, Any], tool: str) -> ScriptedChatModel:
    """A model that calls ``tool`` with ``arguments``, then reports what the tool answered."""

    def reply(messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(content=f"the tool said: {last.content}")
        return AIMessage("", tool_calls=[{"name": tool, "args": arguments, "id": "h1"}])

    return ScriptedChatModel(reply=reply)


AGENT_CASES = {
    "forged": ("write_node", lambda: {**EXAMPLES["write_node"], "agent": "planner"}),
    "forged-area": (
        "write_node",
        lambda: {"node": {"@id": "urn:node:plan"}, "area": "plan", "role": "plan"},
    ),
    "missing": ("read_node", dict),
    "wrong-type": ("read_messages", lambda: {"since": "0"}),
    "deep-1200": ("read_node", lambda: {"iri": deep_dict(1_200)}),
    "deep-100000": ("post_message", lambda: {"topic": "t", "payload": deep_dict(100_000)}),
    "huge-string": ("search_memory", lambda: {"query": "x" * MB10}),
}


@pytest.mark.parametrize("name", sorted(AGENT_CASES))
async def test_an_agent_run_with_a_hostile_tool_call_completes_with_the_refusal(
    board: tuple[Memory, AgentHandle, dict[str, BaseTool]], name: str
) -> None:
    memory, _, found = board
    tool, build = AGENT_CASES[name]
    model = _hostile_model(build(), tool)
    agent = create_agent(model, tools=list(found.values()))
    before = snapshot(memory)
    if name.startswith("deep"):
        result = await agent.ainvoke({"messages": [("user", "go")]})
    else:
        result = agent.invoke({"messages": [("user", "go")]})
    answered = model.requests[-1][-1]
    assert isinstance(answered, ToolMessage)
    assert answered.status == "error"
    assert str(answered.content).startswith("Error:")
    assert result["messages"][-1].text.startswith("the tool said: Error:")
    assert snapshot(memory) == before


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call_=hostile_calls())
def test_any_arguments_get_a_result_or_a_refusal_and_never_another_identity(
    board: tuple[Memory, AgentHandle, dict[str, BaseTool]], call_: tuple[str, dict[str, Any]]
) -> None:
    memory, _, found = board
    tool, arguments = call_
    before = baseline(memory)
    tool_call = {"name": tool, "args": arguments, "id": "p1", "type": "tool_call"}
    answer = found[tool].invoke(tool_call)
    assert isinstance(answer, ToolMessage)
    text = str(answer.content)
    if answer.status == "error":
        assert text.startswith("Error:"), text
    else:
        json.loads(text)
    identity_held(memory, "doer", before)
