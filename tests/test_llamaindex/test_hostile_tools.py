"""Every LlamaIndex tool, called as a hostile model calls it: refused as output, never raised.

The tools are the ``BlackboardToolSpec``'s (with ``project_frame``) and the ``MemoryToolSpec``'s.
Each hostile shape of ``hostile_calls.CASES`` goes in by each way LlamaIndex calls a tool
(``call``, ``acall`` and ``__call__`` with keywords; ``call_tool`` and ``acall_tool``, as
``predict_and_call`` does; a ``FunctionAgent``, which awaits ``acall`` with the model's parsed
arguments); the output must be an ``Error:`` text naming what was wrong, and nothing on the
board or in L0 may change. Top-level names that are no strings cannot be Python keywords
(Python refuses ``f(**{1: x})`` before any tool runs), so those cases go in nested or
positionally. On the code before ``GuardedToolSpec``, an extra keyword (a forged ``agent``) or a
missing one raised ``TypeError`` out of ``call``, and no value was checked against the schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool, ToolOutput
from llama_index.core.tools.calling import acall_tool, call_tool
from llama_index.core.tools.tool_spec.base import BaseToolSpec

from gliding_core import AgentHandle, Memory
from gliding_core.projection.scheduler import Scheduler
from gliding_llamaindex import BlackboardToolSpec, MemoryToolSpec
from gliding_llamaindex.team import create_role_agent
from tests.test_core.hostile_calls import (
    ALICE,
    CASES,
    EXAMPLES,
    MB10,
    TASK,
    Case,
    baseline,
    deep_dict,
    hostile_calls,
    identity_held,
    open_memory,
    refusal_says_what,
    snapshot,
)

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

MODES = ["call", "acall", "__call__", "call_tool", "acall_tool"]
KEYWORD_CASES = [case for case in CASES if case.keywords]


def _specs(memory: Memory, handle: AgentHandle) -> list[BaseToolSpec]:
    scheduler = Scheduler.for_memory(memory)
    return [BlackboardToolSpec(handle, scheduler=scheduler), MemoryToolSpec(memory, scope=ALICE)]


@pytest.fixture(scope="module")
def board() -> Iterator[tuple[Memory, AgentHandle, dict[str, FunctionTool]]]:
    memory = open_memory()
    handle = memory.agent("doer", role="do", task=TASK)
    found = [tool for spec in _specs(memory, handle) for tool in spec.to_tool_list()]
    yield memory, handle, {tool.metadata.get_name(): tool for tool in found}
    memory.close()


async def call(tool: FunctionTool, arguments: dict[str, Any], mode: str) -> ToolOutput:
    """Call ``tool`` with ``arguments`` the way ``mode`` names."""
    if mode == "call":
        return tool.call(**arguments)
    if mode == "acall":
        return await tool.acall(**arguments)
    if mode == "__call__":
        return tool(**arguments)
    if mode == "call_tool":
        return call_tool(tool, arguments)
    return await acall_tool(tool, arguments)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", KEYWORD_CASES, ids=lambda case: case.id)
async def test_a_hostile_call_is_refused_as_output_and_changes_nothing(
    board: tuple[Memory, AgentHandle, dict[str, FunctionTool]], case: Case, mode: str
) -> None:
    memory, _, found = board
    before = snapshot(memory)
    output = await call(found[case.tool], case.build(), mode)
    assert isinstance(output, ToolOutput)
    refusal_says_what(output.content, case)
    assert snapshot(memory) == before


@pytest.mark.parametrize(
    ("tool", "args", "kwargs", "says"),
    [
        ("read_node", ("urn:a", "urn:b"), {}, "takes at most 1 arguments, got 2"),
        ("claim_task", ("now",), {}, "takes at most 0 arguments"),
        ("read_node", ("urn:a",), {"iri": "urn:b"}, "both by position and by name"),
        ("read_node", (["urn:a"],), {}, "iri: Input should be a valid string"),
        ("read_node", ({1: "x"},), {}, "no string"),
        ("write_node", ({"@id": "urn:n", None: 1}, "execution"), {}, "no string"),
        ("post_message", ("t", deep_dict(1_200)), {}, "levels deep"),
    ],
)
def test_positional_arguments_are_checked_as_named_ones(
    board: tuple[Memory, AgentHandle, dict[str, FunctionTool]],
    tool: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    says: str,
) -> None:
    memory, _, found = board
    before = snapshot(memory)
    output = found[tool].call(*args, **kwargs)
    assert output.content.startswith("Error:"), output.content
    assert says in output.content
    assert snapshot(memory) == before


def test_a_valid_call_still_runs_by_name_or_position(
    board: tuple[Memory, AgentHandle, dict[str, FunctionTool]],
) -> None:
    _, _, found = board
    expected = {"found": False, "id": "urn:node:none"}
    assert json.loads(found["read_node"].call(iri="urn:node:none").content) == expected
    assert json.loads(found["read_node"].call("urn:node:none").content) == expected
    assert json.loads(call_tool(found["read_node"], {"iri": "urn:node:none"}).content) == expected


def test_the_tools_keep_the_schemas_and_descriptions_of_their_methods(
    board: tuple[Memory, AgentHandle, dict[str, FunctionTool]],
) -> None:
    memory, handle, found = board
    for spec in _specs(memory, handle):
        for plain in BaseToolSpec.to_tool_list(spec):  # the tools as LlamaIndex builds them
            guarded = found[plain.metadata.get_name()]
            assert guarded.metadata.description == plain.metadata.description
            assert "*args" not in guarded.metadata.description
            schema = guarded.metadata.get_parameters_dict()
            assert schema == plain.metadata.get_parameters_dict()


def test_a_forged_identity_is_refused_and_the_handle_acts_as_itself(
    board: tuple[Memory, AgentHandle, dict[str, FunctionTool]],
) -> None:
    memory, _, found = board
    before = baseline(memory)
    forged = {"agent": "planner", "role": "plan", "sender": "planner"}
    refused = found["post_message"].call(topic="progress", **forged).content
    assert refused.startswith("Error: post_message takes no argument 'agent', 'role', 'sender'")
    write = {"node": {"@id": "urn:node:plan", "text": "hijacked"}, "area": "plan"}
    assert found["write_node"].call(**write, role="plan").content.startswith("Error:")
    assert found["write_node"].call(**write).content.startswith("Error: not permitted")
    posted = json.loads(found["post_message"].call(topic="progress").content)
    identity_held(memory, "doer", before)
    coordination = memory.blackboard.coordination
    assert coordination is not None
    assert coordination.messages.read_since(posted["sequence"] - 1)[0].sender == "doer"


AGENT_CASES = {
    "forged": ("write_node", lambda: {**EXAMPLES["write_node"], "agent": "planner"}),
    "forged-area": (
        "write_node",
        lambda: {"node": {"@id": "urn:node:plan"}, "area": "plan", "role": "plan"},
    ),
    "missing": ("read_node", dict),
    "wrong-type": ("read_messages", lambda: {"since": True}),
    "deep-1200": ("read_node", lambda: {"iri": deep_dict(1_200)}),
    "deep-100000": ("post_message", lambda: {"topic": "t", "payload": deep_dict(100_000)}),
    "huge-string": ("read_node", lambda: {"iri": "x" * MB10}),
}


def _hostile_llm(tool: str, arguments: dict[str, Any]) -> MockFunctionCallingLLM:
    def reply(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        if messages[-1].role.value == "tool":
            return ChatMessage(role="assistant", content=f"the tool said: {messages[-1].content}")
        block = ToolCallBlock(tool_call_id="h1", tool_name=tool, tool_kwargs=arguments)
        return ChatMessage(role="assistant", blocks=[block])

    return MockFunctionCallingLLM(response_generator=reply)


@pytest.mark.parametrize("kind", ["function_agent", "role_agent"])
@pytest.mark.parametrize("name", sorted(AGENT_CASES))
async def test_an_agent_run_with_a_hostile_tool_call_completes_with_the_refusal(
    board: tuple[Memory, AgentHandle, dict[str, FunctionTool]], name: str, kind: str
) -> None:
    memory, handle, found = board
    tool, build = AGENT_CASES[name]
    llm = _hostile_llm(tool, build())
    agent = (
        FunctionAgent(llm=llm, tools=list(found.values()))
        if kind == "function_agent"
        else create_role_agent(llm, handle, can_handoff_to=[])
    )
    before = snapshot(memory)
    answer = str(await agent.run("go"))
    assert answer.startswith("the tool said: Error:"), answer[:300]
    assert snapshot(memory) == before


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call_=hostile_calls())
def test_any_arguments_get_a_result_or_a_refusal_and_never_another_identity(
    board: tuple[Memory, AgentHandle, dict[str, FunctionTool]], call_: tuple[str, dict[str, Any]]
) -> None:
    memory, _, found = board
    tool, arguments = call_
    before = baseline(memory)
    text = found[tool].call(**arguments).content
    if not text.startswith("Error:"):
        json.loads(text)
    identity_held(memory, "doer", before)
