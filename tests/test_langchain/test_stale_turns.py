"""A LangChain agent's model is told when a node it read through a tool changed afterwards."""

from __future__ import annotations

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from gliding_core import HashEmbedder, Memory
from gliding_core.view.stale_turns import STALE_HEADER
from gliding_langchain import BlackboardToolkit, GlidingMemoryMiddleware, ScriptedChatModel

TASK = "urn:task:stale-agent"
NODE = "urn:node:spec"


def test_the_next_model_call_shows_what_changed_since_the_tool_read_it() -> None:
    with Memory(embedder=HashEmbedder()) as memory:
        memory.blackboard.coordination.tasks.register(TASK)  # type: ignore[union-attr]
        handle = memory.agent("doer", role="do", task=TASK)
        rival = memory.agent("rival", role="do", task=TASK)
        rival.write([{"@id": NODE, "text": "use JSON", "status": "draft"}], area="execution")

        def script(messages: list[BaseMessage]) -> AIMessage:
            tools = [m for m in messages if isinstance(m, ToolMessage)]
            if not tools:
                return AIMessage(
                    "", tool_calls=[{"name": "read_node", "id": "1", "args": {"iri": NODE}}]
                )
            if len(tools) == 1:  # another agent moves the node on while this one works
                rival.write(
                    [{"@id": NODE, "text": "use JSON", "status": "final"}], area="execution"
                )
                return AIMessage("", tool_calls=[{"name": "read_messages", "id": "2", "args": {}}])
            return AIMessage("done")

        model = ScriptedChatModel(reply=script)
        middleware = GlidingMemoryMiddleware(memory, TASK, budget=3000)
        agent = create_agent(model, BlackboardToolkit(handle).get_tools(), middleware=[middleware])
        agent.invoke({"messages": [("user", "check the spec")]})
        second, third = (" ".join(m.text for m in r) for r in model.requests[1:3])
        assert STALE_HEADER not in second
        assert STALE_HEADER in third
        assert f'{NODE} changed (generation 1 -> 2): {{"changed":{{"status":"final"}}}}' in third
