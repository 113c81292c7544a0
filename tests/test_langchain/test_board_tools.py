"""BlackboardToolkit: a standard test class per tool, refusals as messages, a real agent."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_tests.integration_tests import ToolsIntegrationTests
from langchain_tests.unit_tests import ToolsUnitTests

from gliding_core import AgentHandle, HashEmbedder, InvalidInputError, Memory
from gliding_core.blackboard.graph import SparqlEndpoint
from gliding_core.coherence import SQLiteDirectory
from gliding_core.projection.scheduler import Scheduler
from gliding_langchain import BlackboardToolkit, ScriptedChatModel
from gliding_langchain.board_tools import blackboard_tool
from tests.test_core.lossy_proxy import IRI, Board, Proxy, emptied, node_at, step

TASK = "urn:task:tools"
EXAMPLES: dict[str, dict[str, Any]] = {
    "read_node": {"iri": "urn:node:1"},
    "write_node": {"node": {"@id": "urn:node:2", "text": "x"}, "area": "execution"},
    "query_blackboard": {"sparql": "SELECT ?s WHERE { ?s ?p ?o } LIMIT 1"},
    "claim_task": {},
    "complete_task": {},
    "list_ready_tasks": {},
    "take_lease": {"resource": "urn:node:3", "mode": "write"},
    "release_lease": {"resource": "urn:node:3"},
    "post_message": {"topic": "progress", "payload": {"done": 1}},
    "read_messages": {"since": 0},
    "project_frame": {"budget": 400},
}


def open_board() -> tuple[Memory, AgentHandle]:
    memory = Memory(embedder=HashEmbedder())
    memory.blackboard.coordination.tasks.register(TASK)  # type: ignore[union-attr]
    return memory, memory.agent("doer", role="do", task=TASK)


@pytest.fixture
def board() -> Iterator[tuple[Memory, AgentHandle]]:
    memory, handle = open_board()
    yield memory, handle
    memory.close()


def _standard(name: str, base: type) -> type:
    class Standard(base):  # type: ignore[misc, valid-type]
        @pytest.fixture(autouse=True)
        def _board(self) -> Iterator[None]:
            self._memory, self._handle = open_board()
            yield
            self._memory.close()

        @property
        def tool_constructor(self) -> BaseTool:
            scheduler = self._memory.scheduler if name == "project_frame" else None
            return blackboard_tool(self._handle, name, scheduler=scheduler)

        @property
        def tool_constructor_params(self) -> dict[str, Any]:
            return {}

        @property
        def tool_invoke_params_example(self) -> dict[str, Any]:
            return EXAMPLES[name]

    return Standard


# One unit and one integration class per tool, as langchain-tests wants them.
for _name in EXAMPLES:
    _title = "".join(part.title() for part in _name.split("_"))
    for _suffix, _base in (("Unit", ToolsUnitTests), ("Integration", ToolsIntegrationTests)):
        _cls = _standard(_name, _base)
        _cls.__name__ = _cls.__qualname__ = f"Test{_title}{_suffix}"
        globals()[_cls.__name__] = _cls
del _cls


def tools(handle: AgentHandle) -> dict[str, BaseTool]:
    return {tool.name: tool for tool in BlackboardToolkit(handle).get_tools()}


def test_toolkit_has_one_tool_per_operation_and_no_identity_argument(
    board: tuple[Memory, AgentHandle],
) -> None:
    memory, handle = board
    toolkit = BlackboardToolkit(handle=handle, scheduler=memory.scheduler)
    found = {tool.name: tool for tool in toolkit.get_tools()}
    assert sorted(found) == sorted(EXAMPLES)
    assert sorted(tools(handle)) == sorted(set(EXAMPLES) - {"project_frame"})
    for tool in found.values():
        fields = set(tool.get_input_schema().model_json_schema().get("properties", {}))
        assert not fields & {"name", "agent", "role", "task", "handle"}


def test_a_stale_write_says_the_current_generation(board: tuple[Memory, AgentHandle]) -> None:
    found = tools(board[1])
    node = {"@id": "urn:node:9", "text": "first"}
    first = json.loads(
        found["write_node"].invoke({"node": node, "area": "execution", "based_on": 0})
    )
    assert first["generation"] == 1
    call = {"node": {"@id": "urn:node:9", "text": "second"}, "area": "execution", "based_on": 0}
    refused = found["write_node"].invoke(call)
    assert "at generation 1, not 0" in refused
    assert "based_on=1" in refused
    assert json.loads(found["read_node"].invoke({"iri": "urn:node:9"}))["value"]["text"] == "first"
    done = json.loads(found["write_node"].invoke({**call, "based_on": 1}))
    assert done["generation"] == 2


def test_a_lease_conflict_names_the_holder(board: tuple[Memory, AgentHandle]) -> None:
    memory, handle = board
    memory.agent("rival", role="do", task=TASK).acquire("urn:node:5")
    found = tools(handle)
    assert "Held by: rival (write)" in found["take_lease"].invoke({"resource": "urn:node:5"})
    refused = found["write_node"].invoke({"node": {"@id": "urn:node:5"}, "area": "execution"})
    assert refused.startswith("Error:")
    assert "rival" in refused


def test_a_role_refusal_is_a_message_and_writes_nothing(
    board: tuple[Memory, AgentHandle],
) -> None:
    memory, _ = board
    checker = tools(memory.agent("checker", role="check", task=TASK))
    refused = checker["write_node"].invoke({"node": {"@id": "urn:node:7"}, "area": "plan"})
    assert refused.startswith("Error: not permitted")
    assert memory.blackboard.read("urn:node:7") is None
    update = checker["query_blackboard"].invoke({"sparql": "INSERT DATA { <urn:a> <urn:b> 1 }"})
    assert update.startswith("Error:")


def test_tasks_and_messages(board: tuple[Memory, AgentHandle]) -> None:
    memory, handle = board
    coordination = memory.blackboard.coordination
    assert coordination is not None
    coordination.tasks.register("urn:task:tools:a", parent=TASK)
    found = tools(handle)
    ready = json.loads(found["list_ready_tasks"].invoke({}))
    assert [task["id"] for task in ready] == [TASK, "urn:task:tools:a"]
    assert json.loads(found["claim_task"].invoke({}))["status"] == "running"
    ready = json.loads(found["list_ready_tasks"].invoke({}))
    assert [task["id"] for task in ready] == ["urn:task:tools:a"]
    found["post_message"].invoke({"topic": "progress", "payload": {"step": 1}})
    messages = json.loads(found["read_messages"].invoke({"topic": "progress"}))
    assert [(m["sender"], m["payload"]) for m in messages] == [("doer", {"step": 1})]


def test_bad_construction_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="handle must be an AgentHandle"):
        BlackboardToolkit("doer")  # type: ignore[arg-type]


def test_an_agent_refused_a_stale_write_retries_with_the_current_generation(
    board: tuple[Memory, AgentHandle],
) -> None:
    memory, handle = board
    memory.agent("rival", role="do", task=TASK).write(
        [{"@id": "urn:node:plan", "text": "rival's"}], area="execution"
    )

    def script(messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage) and last.status == "error":
            based_on = int(str(last.content).split("based_on=")[1].split(".")[0])
            args = {"node": {"@id": "urn:node:plan", "text": "mine"}, "area": "execution"}
            return AIMessage(
                "",
                tool_calls=[
                    {"name": "write_node", "id": "2", "args": {**args, "based_on": based_on}}
                ],
            )
        if isinstance(last, ToolMessage):
            return AIMessage(content=f"written: {last.content}")
        args = {
            "node": {"@id": "urn:node:plan", "text": "mine"},
            "area": "execution",
            "based_on": 0,
        }
        return AIMessage("", tool_calls=[{"name": "write_node", "id": "1", "args": args}])

    agent = create_agent(
        ScriptedChatModel(reply=script), tools=BlackboardToolkit(handle).get_tools()
    )
    result = agent.invoke({"messages": [("user", "write the plan")]})
    assert '"generation": 2' in result["messages"][-1].text
    node = memory.blackboard.read("urn:node:plan")
    assert node is not None
    assert json.loads(node.content)["text"] == "mine"


def test_project_frame_is_offered_with_a_scheduler(board: tuple[Memory, AgentHandle]) -> None:
    memory, handle = board
    assert "project_frame" not in tools(handle)
    handle.write(
        [{"@id": "urn:node:seen", "@type": "Step", "text": "boil water"}], area="execution"
    )
    toolkit = BlackboardToolkit(handle, scheduler=Scheduler.for_memory(memory))
    project = {tool.name: tool for tool in toolkit.get_tools()}["project_frame"]
    view = json.loads(project.invoke({"budget": 500}))
    assert view["level"] in ("l3", "l2")
    assert "boil water" in view["view"]
    assert view["tokens"] <= 500


def test_of_racing_writers_based_on_one_generation_exactly_one_wins(
    board: tuple[Memory, AgentHandle],
) -> None:
    memory, handle = board
    handle.write([{"@id": "urn:node:race", "text": "v1"}], area="execution")
    writers = [tools(memory.agent(f"w{i}", role="do", task=TASK))["write_node"] for i in range(8)]
    start = threading.Barrier(len(writers))

    def write(tool: BaseTool, index: int) -> str:
        start.wait()
        node = {"@id": "urn:node:race", "text": f"by w{index}"}
        return str(tool.invoke({"node": node, "area": "execution", "based_on": 1}))

    with ThreadPoolExecutor(len(writers)) as pool:
        replies = list(pool.map(write, writers, range(len(writers))))
    assert sum(not reply.startswith("Error:") for reply in replies) == 1
    assert all("at generation 2, not 1" in r for r in replies if r.startswith("Error:"))
    node = memory.blackboard.read("urn:node:race")
    assert node is not None
    assert node.generation == 2


def test_an_argument_out_of_the_schema_is_a_tool_error(board: tuple[Memory, AgentHandle]) -> None:
    write = tools(board[1])["write_node"]
    message = write.invoke({"type": "tool_call", "id": "c3", "name": "write_node", "args": {}})
    assert isinstance(message, ToolMessage)
    assert message.status == "error"


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


def _write(tool: BaseTool, text: str, based_on: int) -> ToolMessage:
    call = {
        "name": "write_node",
        "args": {"node": step(text), "area": "execution", "based_on": based_on},
        "id": f"w-{text}",
        "type": "tool_call",
    }
    answer = tool.invoke(call)
    assert isinstance(answer, ToolMessage)
    return answer


@pytest.mark.parametrize("how", ["reply", "request"])
def test_a_lost_answer_is_retried_and_the_model_gets_the_committed_node(
    lossy: tuple[Proxy, Board, str], how: str
) -> None:
    proxy, board, server = lossy
    write = {t.name: t for t in BlackboardToolkit(board.agent("a")).get_tools()}["write_node"]
    assert _write(write, "one", 0).status == "success"
    proxy.lose(how)
    answer = _write(write, "two", 1)
    assert answer.status == "success"
    result = json.loads(str(answer.content))
    assert (result["generation"], result["value"]) == (2, step("two"))
    landed = node_at(server)  # written once
    assert (landed.generation, len(landed.writes)) == (2, 2)


def test_an_outcome_still_unknown_after_the_retry_is_an_error_saying_to_read_first(
    lossy: tuple[Proxy, Board, str],
) -> None:
    proxy, board, server = lossy
    write = {t.name: t for t in BlackboardToolkit(board.agent("a")).get_tools()}["write_node"]
    _write(write, "one", 0)
    proxy.lose("request")
    proxy.lose("request")
    answer = _write(write, "two", 1)
    assert answer.status == "error"
    text = str(answer.content)
    assert text.startswith("Error: the outcome of this write is unknown")
    assert IRI in text
    assert "read_node" in text
    assert node_at(server).generation == 1
