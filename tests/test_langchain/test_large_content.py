"""The memory never breaks the agent it serves: content of any size in real ``create_agent`` loops.

The model is the scripted chat model (the network edge); the agent graph, the memory's SQLite,
Chroma and tiktoken are real. Each test reads the request the model received.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool

from gliding_core import HashEmbedder, Memory, MemoryConfig, TopicConfig
from gliding_langchain import (
    GlidingChatMessageHistory,
    GlidingMemoryMiddleware,
    ScriptedChatModel,
    SupplementaryInputCallbackHandler,
)
from gliding_langchain.messages import to_records

TASK = "urn:task:sensors"
BUDGET = 2_000
# About 2 MB of a tool's output, with a word at its very end that no head or cut keeps.
DUMP = "".join(f"row {i}: sensor {i % 97} reads {i * 7 % 1000} units. " for i in range(54_000))
DUMP += "The last row names the culprit: quagmire."


@tool
def dump(topic: str) -> str:
    """Dump every sensor reading."""
    return DUMP


def call_then_answer(messages: list[BaseMessage]) -> AIMessage:
    """Call ``dump`` for a human message, then answer from the tool's result."""
    if messages[-1].type == "human":
        call = {"id": f"call-{len(messages)}", "name": "dump", "args": {"topic": "all"}}
        return AIMessage(content="", tool_calls=[call])
    return AIMessage(content=f"Read {len(messages[-1].text)} characters.")


@pytest.fixture
def memory() -> Iterator[Memory]:
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=HashEmbedder()) as value:
        yield value


def sent_tokens(memory: Memory, request: list[BaseMessage]) -> int:
    """The exact token count of a request as the model received it."""
    return memory.framing().count(to_records(request))


def test_a_two_megabyte_tool_result_runs_and_is_kept_whole(memory: Memory) -> None:
    assert len(DUMP.encode()) > 2_000_000
    model = ScriptedChatModel(reply=call_then_answer)
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=BUDGET)
    agent = create_agent(model, [dump], middleware=[middleware], system_prompt="Be brief.")

    state = agent.invoke({"messages": [HumanMessage("Which sensor failed?")]})

    # The agent ran to its answer; the graph state keeps the whole result.
    result = state["messages"][2]
    assert result.type == "tool"
    assert result.text == DUMP
    answer = state["messages"][-1].text  # the model read the cut result
    assert answer.startswith("Read ")
    assert int(answer.split()[1]) < 20_000
    # The request after the tool was within the budget, the result cut with a note in it.
    request = model.requests[1]
    assert sent_tokens(memory, request) <= BUDGET
    sent = next(m for m in request if m.type == "tool")
    assert sent.text.startswith("row 0: sensor 0 reads 0 units.")
    assert "the memory keeps it whole" in sent.text
    assert "quagmire" not in sent.text
    view = middleware.views[-1]
    assert not view.over_budget
    assert view.cut == 1
    assert view.tokens == sent_tokens(memory, request)
    # L0 keeps every byte, under the turn's IRI; the lexical index covers all of it.
    iri = middleware.conversation.archived(result.id)
    assert iri is not None
    assert memory.store.full_text(iri) == DUMP
    assert iri in [hit.entry.iri for hit in memory.store.search_text("quagmire")]
    # The L1 summary stays small.
    assert middleware.conversation.session.total_tokens <= middleware.conversation.session.budget


def test_a_three_megabyte_user_message_runs_within_the_budget(memory: Memory) -> None:
    model = ScriptedChatModel()  # echoes the last human message
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=BUDGET)
    agent = create_agent(model, [], middleware=[middleware])
    pasted = DUMP + DUMP[: len(DUMP) // 2] + " That is all."

    state = agent.invoke({"messages": [HumanMessage(pasted)]})

    assert state["messages"][0].content == pasted
    (request,) = model.requests
    assert sent_tokens(memory, request) <= BUDGET
    assert not middleware.views[-1].over_budget
    iri = middleware.conversation.archived(state["messages"][0].id)
    assert iri is not None
    assert memory.store.full_text(iri) == pasted


def test_a_budget_that_cannot_be_met_still_sends_and_warns_once(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedChatModel()
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=10)
    agent = create_agent(model, [], middleware=[middleware], system_prompt="Be brief, " * 20)

    with caplog.at_level(logging.WARNING, logger="gliding_core.view.conversation"):
        messages: list[Any] = []
        for text in ["Hello there, how are you today?", "And what about tomorrow?"]:
            messages = agent.invoke({"messages": [*messages, HumanMessage(text)]})["messages"]

    assert len(model.requests) == 2  # both requests went
    assert all(view.over_budget for view in middleware.views)
    assert all(view.tokens > 10 for view in middleware.views)
    warnings = [r for r in caplog.records if "over its budget" in r.getMessage()]
    assert len(warnings) == 1  # once per scope


def test_a_view_within_the_budget_is_not_flagged(memory: Memory) -> None:
    model = ScriptedChatModel()
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=BUDGET)
    agent = create_agent(model, [], middleware=[middleware])
    agent.invoke({"messages": [HumanMessage("Hello")]})
    assert not middleware.views[-1].over_budget
    assert middleware.views[-1].cut == 0


def test_a_large_supplementary_input_reaches_the_model_cut_and_is_kept(memory: Memory) -> None:
    model = ScriptedChatModel()
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=BUDGET)
    handler = SupplementaryInputCallbackHandler(middleware.conversation)
    agent = create_agent(model, [], middleware=[middleware])
    item = memory.supplements.put(TASK, DUMP)

    state = agent.invoke({"messages": [HumanMessage("Go on.")]}, config={"callbacks": [handler]})

    delivered = [m for m in state["messages"] if m.type == "human" and m.text == DUMP]
    assert len(delivered) == 1  # the state has it whole, once
    (request,) = model.requests
    assert sent_tokens(memory, request) <= BUDGET
    assert any("the memory keeps it whole" in m.text for m in request)
    turn = middleware.conversation.input_turn(item.iri)
    assert turn is not None
    assert memory.store.full_text(turn) == DUMP
    assert memory.supplements.history(TASK)[0].content == DUMP


def test_the_chat_history_gives_a_large_message_back_exactly(memory: Memory) -> None:
    history = GlidingChatMessageHistory(memory, "big-chat")
    sent = [HumanMessage("Dump it."), AIMessage(DUMP)]
    history.add_messages(sent)

    again = GlidingChatMessageHistory(memory, "big-chat")
    assert [m.content for m in again.messages] == ["Dump it.", DUMP]
