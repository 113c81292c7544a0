"""The memory middleware and the supplementary-input handler in real ``create_agent`` loops.

The model is the scripted chat model (the network edge); the agent graph, the memory's SQLite,
Chroma and tiktoken are real.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from gliding_core import (
    ConversationSettings,
    HashEmbedder,
    InvalidInputError,
    Memory,
    MemoryConfig,
    TopicConfig,
)
from gliding_langchain import (
    GlidingMemoryMiddleware,
    ScriptedChatModel,
    SupplementaryInputCallbackHandler,
)
from gliding_langchain.messages import SUPPLEMENT_ID_PREFIX

TASK = "urn:task:trip"


@tool
def lookup(topic: str) -> str:
    """Look a topic up in the travel notes."""
    return f"Notes on {topic}: " + "the guide says many things " * 6


def tool_then_answer(messages: list[BaseMessage]) -> AIMessage:
    """Call ``lookup`` for each new human message, then answer from the tool's result."""
    last = messages[-1]
    if last.type == "human":
        call = {"id": f"call-{len(messages)}-{time.monotonic_ns()}", "name": "lookup"}
        return AIMessage(content="", tool_calls=[{**call, "args": {"topic": last.text[:40]}}])
    return AIMessage(content=f"Answer based on: {last.text[:60]}")


@pytest.fixture
def memory() -> Iterator[Memory]:
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=HashEmbedder()) as value:
        yield value


def run_chat(
    agent: Any, turns: list[str], config: dict[str, Any] | None = None
) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for text in turns:
        state = agent.invoke({"messages": [*messages, HumanMessage(text)]}, config=config)
        messages = state["messages"]
    return messages


TURNS = [
    "My passport number ends in 4471 and I fly to Lisbon on the ninth of May.",
    *[
        f"Tell me about sight number {i} in Lisbon, a place with tiles and trams."
        for i in range(25)
    ],
    "What does my passport number end in?",
]


def test_the_model_sees_a_budgeted_view_while_the_state_keeps_everything(memory: Memory) -> None:
    model = ScriptedChatModel(reply=tool_then_answer)
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=600)
    agent = create_agent(model, [lookup], middleware=[middleware], system_prompt="Be brief.")

    history = run_chat(agent, TURNS)

    assert len(history) == 4 * len(TURNS)  # human, tool call, tool result, answer: all kept
    assert all(view.tokens <= 600 for view in middleware.views)
    assert middleware.views[-1].history_tokens > 3 * 600
    # The system prompt stays first and carries the memory.
    last_request = model.requests[-1]
    assert last_request[0].type == "system"
    assert last_request[0].text.startswith("Be brief.")
    # The early fact left the window long ago; recall brings it back for the question.
    assert "4471" in last_request[0].text
    assert all("4471" not in m.text for m in last_request[1:])


def test_a_tool_call_and_its_result_are_never_separated(memory: Memory) -> None:
    model = ScriptedChatModel(reply=tool_then_answer)
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=350, window_share=0.3)
    agent = create_agent(model, [lookup], middleware=[middleware])

    run_chat(agent, TURNS[:12])

    for request in model.requests:
        calls = {c["id"] for m in request if isinstance(m, AIMessage) for c in m.tool_calls}
        results = {m.tool_call_id for m in request if isinstance(m, ToolMessage)}
        assert results <= calls  # no orphaned tool result
        for message in request:
            if isinstance(message, AIMessage) and message.tool_calls and message is not request[-1]:
                index = request.index(message)
                assert isinstance(request[index + 1], ToolMessage)


def test_every_message_is_archived_once_in_l0_and_l1(memory: Memory) -> None:
    model = ScriptedChatModel(reply=tool_then_answer)
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=600)
    agent = create_agent(model, [lookup], middleware=[middleware])

    history = run_chat(agent, TURNS[:5])

    turns = memory.store.by_tags(["turn", f"session:{middleware.conversation.session.id}"])
    assert len(turns) == len(history)
    assert all(middleware.conversation.archived(m.id or "") for m in history)
    hits = memory.search("passport 4471", 3)
    assert any("4471" in h.entry.content for h in hits)


def test_async_agent_runs_through_the_middleware(memory: Memory) -> None:
    model = ScriptedChatModel(reply=tool_then_answer)
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=500)
    agent = create_agent(model, [lookup], middleware=[middleware])

    async def chat() -> list[BaseMessage]:
        messages: list[BaseMessage] = []
        for text in TURNS[:6]:
            state = await agent.ainvoke({"messages": [*messages, HumanMessage(text)]})
            messages = state["messages"]
        return messages

    history = asyncio.run(chat())

    assert len(history) == 24
    assert all(view.tokens <= 500 for view in middleware.views)


def test_supplementary_inputs_from_another_thread_reach_the_next_request_once(
    memory: Memory,
) -> None:
    """1,000 inputs put while the agent works: each is in the first model request whose
    cycle started after it was put, it is added to the state once, and none is lost."""
    total = 1_000
    done = threading.Event()
    put_at: dict[str, float] = {}

    cycles: list[float] = []

    class Timed(GlidingMemoryMiddleware):
        def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
            cycles.append(time.monotonic())
            return super().before_model(state, runtime)

    def keep_working(messages: list[BaseMessage]) -> AIMessage:
        if done.is_set() and memory.supplements.pending_count(TASK) == 0:
            return AIMessage(content="All inputs handled.")
        time.sleep(0.002)
        call = {"id": f"call-{time.monotonic_ns()}", "name": "lookup", "args": {"topic": "x"}}
        return AIMessage(content="", tool_calls=[call])

    def producer() -> None:
        for i in range(total):
            text = f"supplement {i}"
            memory.supplements.put(TASK, text)
            put_at[text] = time.monotonic()
            if i % 50 == 0:
                time.sleep(0.01)
        done.set()

    model = ScriptedChatModel(reply=keep_working)
    middleware = Timed(memory, TASK, budget=2_000)
    handler = SupplementaryInputCallbackHandler(middleware.conversation)
    agent = create_agent(model, [lookup], middleware=[middleware])
    thread = threading.Thread(target=producer)
    thread.start()
    state = agent.invoke(
        {"messages": [HumanMessage("Work until the user stops sending notes.")]},
        config={"callbacks": [handler], "recursion_limit": 100_000},
    )
    thread.join()
    # Inputs the handler took during the last call are in the session: the next run shows them.
    state = agent.invoke(
        {"messages": [*state["messages"], HumanMessage("Anything else?")]},
        config={"callbacks": [handler]},
    )

    delivered = [m for m in state["messages"] if (m.id or "").startswith(SUPPLEMENT_ID_PREFIX)]
    texts = [m.text for m in delivered]
    assert sorted(texts) == sorted(put_at)  # every input, exactly once
    first_seen: dict[str, int] = {}
    for index, request in enumerate(model.requests):
        for message in request:
            if (message.id or "").startswith(SUPPLEMENT_ID_PREFIX):
                first_seen.setdefault(message.text, index)
    assert set(first_seen) == set(put_at)
    for text, when in put_at.items():
        expected = next(i for i, started in enumerate(cycles) if started > when)
        assert first_seen[text] <= expected
    assert handler.cycles == len(model.requests)
    assert memory.supplements.pending_count(TASK) == 0


def test_the_handler_alone_moves_inputs_into_the_session(memory: Memory) -> None:
    model = ScriptedChatModel()
    handler = SupplementaryInputCallbackHandler.for_task(memory, TASK)
    memory.supplements.put(TASK, "Use the metric system.")

    model.invoke([HumanMessage("hello")], config={"callbacks": [handler]})

    assert [item.content for item in handler.taken] == ["Use the metric system."]
    context = handler.conversation.session.context().text
    assert "metric system" in context
    assert memory.supplements.pending_count(TASK) == 0


def test_bad_arguments_get_typed_errors(memory: Memory) -> None:
    with pytest.raises(InvalidInputError, match="memory"):
        GlidingMemoryMiddleware("not a memory", TASK)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="budget"):
        GlidingMemoryMiddleware(memory, TASK, budget=0)
    with pytest.raises(InvalidInputError, match="window_share"):
        GlidingMemoryMiddleware(memory, TASK, window_share=1.5)
    with pytest.raises(InvalidInputError, match="conversation"):
        SupplementaryInputCallbackHandler("nope")  # type: ignore[arg-type]


def test_system_prompt_content_blocks_are_kept(memory: Memory) -> None:
    from langchain_core.messages import SystemMessage

    model = ScriptedChatModel(reply=tool_then_answer)
    middleware = GlidingMemoryMiddleware(memory, TASK, budget=300)
    prompt = SystemMessage(
        content=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    )
    agent = create_agent(model, [lookup], middleware=[middleware], system_prompt=prompt)

    run_chat(agent, TURNS[:8])

    system = model.requests[-1][0]
    assert isinstance(system.content, list)
    assert system.content[0] == prompt.content[0]
    assert "[Context from" in system.content[-1]["text"]  # type: ignore[index]


@pytest.mark.parametrize("placement", ["system", "user"])
def test_the_memory_goes_where_the_placement_says(memory: Memory, placement: str) -> None:
    model = ScriptedChatModel(reply=lambda messages: AIMessage(content="Noted."))
    settings = ConversationSettings(budget=260, placement=placement)  # type: ignore[arg-type]
    middleware = GlidingMemoryMiddleware(memory, TASK, settings=settings)
    agent = create_agent(model, [], system_prompt="Be brief.", middleware=[middleware])
    run_chat(agent, [*TURNS[:10], "What is my passport number?"])

    request = model.requests[-1]
    view = middleware.views[-1]
    assert view.memory
    assert request[-1].text == "What is my passport number?"
    if placement == "system":
        assert request[0].type == "system"
        assert request[0].text.startswith("Be brief.")
        assert view.memory in request[0].text
    else:
        assert request[0].text == "Be brief."  # the system prompt, alone
        assert request[-2].type == "human"
        assert request[-2].text == view.memory  # just before the newest turn
