"""A LangChain agent whose model makes hostile tool calls runs to its answer, its memory bounded.

The scripted model (the network edge) calls a blackboard tool with arguments 1,200 objects
deep, then 100,000 deep (both built iteratively), then ten megabytes long, and then answers.
Each tool refuses; the run must go on. Before ``framing.bounded_call``, the memory middleware's
next model view raised ``RecursionError`` (``ChatFraming.message_tokens``' ``json.dumps`` of the
call), and the ten megabytes were counted by tiktoken at every step (over 30 seconds a run).
Now the model is sent each call with its arguments elided (as the view counted it), the graph
state keeps the call as the model made it, and L0, the L1 session and the chat log keep every
message's content. The agents are a real ``create_agent`` loop with ``GlidingMemoryMiddleware``
and the ``SupplementaryInputCallbackHandler``, and ``create_role_agent``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from gliding_core import AgentHandle, Memory
from gliding_core.framing import ELIDED, is_elided
from gliding_langchain import (
    BlackboardToolkit,
    GlidingChatMessageHistory,
    GlidingMemoryMiddleware,
    ScriptedChatModel,
    SupplementaryInputCallbackHandler,
    create_role_agent,
)
from gliding_langchain.messages import bounded_message
from tests.test_core.hostile_calls import MB10, TASK, deep_dict, open_memory, snapshot

BUDGET = 1_200
ANSWER = "Done: every call was refused, the plan stands."
# The model's moves: (tool, arguments, what the tool's refusal and the marker say).
CALLS: list[tuple[str, Any, str]] = [
    ("read_node", lambda: {"iri": deep_dict(1_200)}, "levels deep"),
    ("post_message", lambda: {"topic": "t", "payload": deep_dict(100_000)}, "levels deep"),
    ("read_node", lambda: {"iri": "x" * MB10}, "characters"),
]


def hostile_model() -> ScriptedChatModel:
    """A model that makes the three hostile calls, one a step, then gives its answer."""
    steps = itertools.count()

    def reply(messages: list[BaseMessage]) -> AIMessage:
        step = next(steps)
        if step < len(CALLS):
            tool, build, _ = CALLS[step]
            call = {"name": tool, "args": build(), "id": f"hostile-{step}"}
            return AIMessage("", tool_calls=[call])
        return AIMessage(ANSWER)

    return ScriptedChatModel(reply=reply)


@pytest.fixture
def board() -> Iterator[tuple[Memory, AgentHandle]]:
    memory = open_memory()
    yield memory, memory.agent("doer", role="do", task=TASK)
    memory.close()


def built(kind: str, model: ScriptedChatModel, memory: Memory, handle: AgentHandle) -> Any:
    """The agent graph and its memory middleware."""
    if kind == "role_agent":
        agent = create_role_agent(model, handle, memory=memory, budget=BUDGET)
        return agent.graph, agent.middleware
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=BUDGET)
    tools = BlackboardToolkit(handle, scheduler=memory.scheduler).get_tools()
    return create_agent(model, tools, middleware=[middleware]), middleware


def calls_size(request: list[BaseMessage]) -> int:
    """The characters of JSON of the tool calls a request carries."""
    return sum(
        len(json.dumps(m.tool_calls)) for m in request if isinstance(m, AIMessage) and m.tool_calls
    )


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
@pytest.mark.parametrize("kind", ["create_agent", "role_agent"])
async def test_a_run_with_deep_and_huge_tool_calls_completes_with_its_answer(
    board: tuple[Memory, AgentHandle], kind: str, mode: str
) -> None:
    memory, handle = board
    model = hostile_model()
    graph, middleware = built(kind, model, memory, handle)
    handler = SupplementaryInputCallbackHandler.for_middleware(middleware)
    before = snapshot(memory)
    inputs = {"messages": [("user", "Check the plan.")]}
    config: Any = {"callbacks": [handler]}
    if mode == "invoke":
        state = graph.invoke(inputs, config=config)
    else:
        state = await graph.ainvoke(inputs, config=config)
    messages = state["messages"]

    assert messages[-1].text == ANSWER
    results = [m for m in messages if isinstance(m, ToolMessage)]
    assert len(results) == len(CALLS)
    for result, (_, _, says) in zip(results, CALLS, strict=True):
        assert result.status == "error"
        assert str(result.content).startswith("Error:")
        assert says in str(result.content)
    assert snapshot(memory) == before  # every call refused: nothing written
    assert handler.cycles == len(CALLS) + 1

    # The state keeps each call as the model made it; the model is sent it elided.
    made = [m for m in messages if isinstance(m, AIMessage) and m.tool_calls]
    assert made[2].tool_calls[0]["args"]["iri"] == "x" * MB10
    assert len(model.requests) == len(CALLS) + 1
    for step, request in enumerate(model.requests[1:]):
        assert calls_size(request) < 4_000  # no request carries the arguments
        sent = next(m for m in reversed(request) if isinstance(m, AIMessage) and m.tool_calls)
        call = sent.tool_calls[0]
        assert call["id"] == f"hostile-{step}"
        assert ELIDED in call["args"]
        assert CALLS[step][2] in call["args"][ELIDED]
    assert all(view.tokens <= BUDGET for view in middleware.views)

    # Every message is archived, its content whole; a call as the tool it names.
    chat = middleware.conversation
    archived = []
    for message in messages:
        entry = memory.store.get(chat.archived(message.id or "") or "")
        assert entry is not None, message.type
        archived.append(entry.node["text"])
    calling = {"(calls read_node)", "(calls post_message)"}
    expected = [m.text.strip() or "?" for m in messages]
    assert [t for t in archived if t not in calling] == [t for t in expected if t != "?"]
    assert [t for t in archived if t in calling] == [
        "(calls read_node)",
        "(calls post_message)",
        "(calls read_node)",
    ]


def test_the_chat_history_keeps_hostile_calls_elided_and_the_rest_whole(
    board: tuple[Memory, AgentHandle],
) -> None:
    memory, handle = board
    graph, _ = built("role_agent", hostile_model(), memory, handle)
    messages = graph.invoke({"messages": [("user", "Check the plan.")]})["messages"]
    history = GlidingChatMessageHistory(memory, "thread-1", budget=BUDGET)
    history.add_messages(messages)

    kept = history.all_messages
    assert [m.text for m in kept] == [m.text for m in messages]
    assert [m.type for m in kept] == [m.type for m in messages]
    calls = [m.tool_calls[0] for m in kept if isinstance(m, AIMessage) and m.tool_calls]
    assert [c["id"] for c in calls] == ["hostile-0", "hostile-1", "hostile-2"]
    assert all(is_elided(c) for c in calls)
    assert sum(len(json.dumps(c)) for c in calls) < 4_000
    assert history.messages[-1].text == ANSWER  # the budgeted view of it
    again = GlidingChatMessageHistory(memory, "thread-1").all_messages  # read back from L0
    assert [m.model_dump() for m in again] == [m.model_dump() for m in kept]


def test_bounded_message_copies_only_a_message_with_a_call_over_the_limits() -> None:
    ordinary = AIMessage(
        "", tool_calls=[{"name": "read_node", "args": {"iri": "urn:a"}, "id": "1"}]
    )
    assert bounded_message(ordinary) is ordinary
    raw = {"tool_calls": [{"id": "1", "function": {"arguments": "x" * MB10}}], "keep": 1}
    hostile = AIMessage(
        "Reading.",
        tool_calls=[
            {"name": "read_node", "args": {"iri": "urn:a"}, "id": "1"},
            {"name": "read_node", "args": {"iri": deep_dict(100_000)}, "id": "2"},
        ],
        additional_kwargs=raw,
    )
    bounded = bounded_message(hostile)
    assert bounded is not hostile
    assert bounded.text == "Reading."
    assert bounded.tool_calls[0] == hostile.tool_calls[0]
    assert is_elided(bounded.tool_calls[1])
    assert bounded.tool_calls[1]["id"] == "2"
    assert bounded.additional_kwargs == {"keep": 1}  # the provider's raw form is left out
    assert hostile.tool_calls[1]["args"]["iri"] is deep_dict(100_000)  # the original unchanged
    assert bounded_message(bounded) is bounded
