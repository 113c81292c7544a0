"""BlackboardToolSpec: every operation as a tool, refusals as tool output, a FunctionAgent."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from gliding_core import AgentHandle, HashEmbedder, InvalidInputError, Memory
from gliding_core.blackboard.graph import SparqlEndpoint
from gliding_core.coherence import SQLiteDirectory
from gliding_core.projection.scheduler import Scheduler
from gliding_llamaindex import BlackboardToolSpec
from tests.test_core.lossy_proxy import IRI, Board, Proxy, emptied, node_at, step

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

TASK = "urn:task:li-tools"


@pytest.fixture
def board() -> Iterator[tuple[Memory, AgentHandle]]:
    with Memory(embedder=HashEmbedder()) as memory:
        memory.blackboard.coordination.tasks.register(TASK)  # type: ignore[union-attr]
        yield memory, memory.agent("doer", role="do", task=TASK)


def tools(handle: AgentHandle) -> dict[str, FunctionTool]:
    return {t.metadata.get_name(): t for t in BlackboardToolSpec(handle).to_tool_list()}


def test_every_operation_is_a_tool_without_an_identity_argument(
    board: tuple[Memory, AgentHandle],
) -> None:
    found = tools(board[1])
    assert sorted(found) == sorted(BlackboardToolSpec.spec_functions)  # type: ignore[type-var]
    for tool in found.values():
        properties = set(tool.metadata.get_parameters_dict().get("properties", {}))
        assert not properties & {"name", "agent", "role", "task", "handle"}


async def test_operations_sync_and_async(board: tuple[Memory, AgentHandle]) -> None:
    found = tools(board[1])
    node = {"@id": "urn:node:1", "text": "draft"}
    written = json.loads(found["write_node"].call(node=node, area="execution").content)
    assert written["generation"] == 1
    read = json.loads((await found["read_node"].acall(iri="urn:node:1")).content)
    assert read["value"]["text"] == "draft"
    rows = json.loads(found["query_blackboard"].call(sparql="ASK { ?s ?p ?o }").content)
    assert rows == {"boolean": True}
    assert json.loads((await found["claim_task"].acall()).content)["status"] == "running"
    lease = json.loads(found["take_lease"].call(resource="urn:node:1").content)
    assert lease["mode"] == "write"
    guarded = {"node": {**node, "text": "final"}, "area": "execution"}
    done = found["write_node"].call(**guarded, lease_token=lease["token"]).content
    assert json.loads(done)["generation"] == 2
    assert json.loads(found["release_lease"].call(resource="urn:node:1").content)["released"]
    found["post_message"].call(topic="progress", payload={"step": 2})
    messages = json.loads(found["read_messages"].call().content)
    assert [m["payload"] for m in messages] == [{"step": 2}]


def test_refusals_are_tool_output(board: tuple[Memory, AgentHandle]) -> None:
    memory, handle = board
    found = tools(handle)
    found["write_node"].call(node={"@id": "urn:node:2"}, area="execution")
    changed = {"@id": "urn:node:2", "text": "changed"}
    stale = found["write_node"].call(node=changed, area="execution", based_on=0)
    assert "at generation 1, not 0" in stale.content
    again = found["write_node"].call(node={"@id": "urn:node:2"}, area="execution", based_on=0)
    assert '"generation": 1' in again.content  # the same call sent again: what it committed
    memory.agent("rival", role="do", task=TASK).acquire("urn:node:3")
    assert "Held by: rival (write)" in found["take_lease"].call(resource="urn:node:3").content
    checker = tools(memory.agent("checker", role="check", task=TASK))
    denied = checker["write_node"].call(node={"@id": "urn:node:4"}, area="plan").content
    assert denied.startswith("Error: not permitted")
    assert memory.blackboard.read("urn:node:4") is None


def test_bad_construction_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="handle must be an AgentHandle"):
        BlackboardToolSpec("doer")  # type: ignore[arg-type]


async def test_a_function_agent_writes_through_the_tools(
    board: tuple[Memory, AgentHandle],
) -> None:
    memory, handle = board

    def script(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        if messages[-1].role.value == "tool":
            return ChatMessage(role="assistant", content=f"Result: {messages[-1].content}")
        arguments = {"node": {"@id": "urn:node:agent", "text": "done"}, "area": "execution"}
        block = ToolCallBlock(tool_call_id="c1", tool_name="write_node", tool_kwargs=arguments)
        return ChatMessage(role="assistant", blocks=[block])

    llm = MockFunctionCallingLLM(response_generator=script)
    agent = FunctionAgent(llm=llm, tools=BlackboardToolSpec(handle).to_tool_list())
    answer = await agent.run("record that you are done")
    assert '"generation": 1' in str(answer)
    assert memory.blackboard.read("urn:node:agent") is not None


def test_project_frame_with_a_scheduler(board: tuple[Memory, AgentHandle]) -> None:
    memory, handle = board
    assert "project_frame" not in tools(handle)
    handle.write(
        [{"@id": "urn:node:seen", "@type": "Step", "text": "boil water"}], area="execution"
    )
    spec = BlackboardToolSpec(handle, scheduler=Scheduler.for_memory(memory))
    project = {t.metadata.get_name(): t for t in spec.to_tool_list()}["project_frame"]
    view = json.loads(project.call(budget=500).content)
    assert "boil water" in view["view"]
    assert view["tokens"] <= 500


# -- a write whose answer was lost: the tool retries it by its write id ----------------------------


@pytest.fixture
def lossy(oxigraph_server: str, tmp_path: Path) -> Iterator[tuple[Proxy, Board, str]]:
    """A coherent board at ``oxigraph serve`` behind a proxy that loses what it is told to."""
    server = emptied(oxigraph_server)
    proxy = Proxy(server)
    board = Board(SparqlEndpoint(proxy.url), SQLiteDirectory(tmp_path / "coherence.sqlite3"))
    yield proxy, board, server
    board.close()
    proxy.close()


def _write(tool: FunctionTool, text: str, based_on: int) -> str:
    return str(tool.call(node=step(text), area="execution", based_on=based_on).content)


@pytest.mark.parametrize("how", ["reply", "request"])
def test_a_lost_answer_is_retried_and_the_model_gets_the_committed_node(
    lossy: tuple[Proxy, Board, str], how: str
) -> None:
    proxy, board, server = lossy
    write = tools(board.agent("a"))["write_node"]
    assert json.loads(_write(write, "one", 0))["generation"] == 1
    proxy.lose(how)
    result = json.loads(_write(write, "two", 1))
    assert (result["generation"], result["value"]) == (2, step("two"))
    landed = node_at(server)  # written once
    assert (landed.generation, len(landed.writes)) == (2, 2)


def test_an_outcome_still_unknown_after_the_retry_is_an_error_saying_to_read_first(
    lossy: tuple[Proxy, Board, str],
) -> None:
    proxy, board, server = lossy
    write = tools(board.agent("a"))["write_node"]
    _write(write, "one", 0)
    proxy.lose("request")
    proxy.lose("request")
    text = _write(write, "two", 1)
    assert text.startswith("Error: the outcome of this write is unknown")
    assert IRI in text
    assert "read_node" in text
    assert node_at(server).generation == 1
