"""A LlamaIndex agent whose model makes hostile tool calls runs to its answer, its memory bounded.

The scripted LLM (the network edge) calls a blackboard tool with arguments 1,200 objects deep,
then 100,000 deep (both built iteratively), then ten megabytes long, and then answers. Each tool
refuses; the run must go on. Before ``framing.bounded_call``, ``GlidingMemory`` raised
``RecursionError`` converting the call (``messages._json``) and could not store the ten
megabytes (``ContentTooLargeError`` from the chat log), so the run failed. Now the memory keeps
and gives back each call with its arguments elided, and every message's content whole. The
agents are a real ``FunctionAgent`` and ``create_role_agent``'s, with ``GlidingMemory``; the
memory block is run inside LlamaIndex's stock ``Memory``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.memory import Memory as ChatMemory
from llama_index.core.tools import ToolSelection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gliding_core import AgentHandle, Memory
from gliding_core.framing import ELIDED, is_elided
from gliding_core.projection.scheduler import Scheduler
from gliding_llamaindex import BlackboardToolSpec, GlidingMemory, GlidingMemoryBlock
from gliding_llamaindex.messages import bounded_message, to_record
from gliding_llamaindex.team import create_role_agent
from tests.test_core.hostile_calls import MB10, TASK, deep_dict, open_memory, snapshot

pytestmark = [  # building a workflow touches attributes pydantic deprecated (LlamaIndex's code)
    pytest.mark.filterwarnings(
        "ignore:The `__fields(_set)?__` attribute is deprecated"
        ":pydantic.warnings.PydanticDeprecatedSince20"
    ),
    pytest.mark.filterwarnings(
        "ignore:Accessing the 'model_(computed_)?fields' attribute on the instance is deprecated"
        ":pydantic.warnings.PydanticDeprecatedSince211"
    ),
]

BUDGET = 1_200
ANSWER = "Done: every call was refused, the plan stands."
CALLS: list[tuple[str, Any, str]] = [
    ("read_node", lambda: {"iri": deep_dict(1_200)}, "levels deep"),
    ("post_message", lambda: {"topic": "t", "payload": deep_dict(100_000)}, "levels deep"),
    ("read_node", lambda: {"iri": "x" * MB10}, "characters"),
]


def hostile_llm() -> MockFunctionCallingLLM:
    """An LLM that makes the three hostile calls, one a step, then gives its answer."""
    steps = itertools.count()

    def reply(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        step = next(steps)
        if step < len(CALLS):
            tool, build, _ = CALLS[step]
            block = ToolCallBlock(
                tool_call_id=f"hostile-{step}", tool_name=tool, tool_kwargs=build()
            )
            return ChatMessage(role="assistant", blocks=[block])
        return ChatMessage(role="assistant", content=ANSWER)

    return MockFunctionCallingLLM(response_generator=reply)


@pytest.fixture
def board() -> Iterator[tuple[Memory, AgentHandle]]:
    memory = open_memory()
    yield memory, memory.agent("doer", role="do", task=TASK)
    memory.close()


def agent_of(kind: str, memory: Memory, handle: AgentHandle) -> FunctionAgent:
    if kind == "role_agent":
        return create_role_agent(hostile_llm(), handle, can_handoff_to=[])
    tools = BlackboardToolSpec(handle, scheduler=Scheduler.for_memory(memory)).to_tool_list()
    return FunctionAgent(llm=hostile_llm(), tools=tools)


def calls_of(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    return [call for m in messages for call in to_record(m).get("tool_calls", [])]


@pytest.mark.parametrize("kind", ["function_agent", "role_agent"])
async def test_a_run_with_deep_and_huge_tool_calls_completes_with_its_answer(
    board: tuple[Memory, AgentHandle], kind: str
) -> None:
    memory, handle = board
    chat = GlidingMemory.from_defaults(memory, TASK, budget=BUDGET)
    before = snapshot(memory)

    answer = str(await agent_of(kind, memory, handle).run("Check the plan.", memory=chat))

    assert answer == ANSWER
    assert snapshot(memory) == before  # every call refused: nothing written
    history = chat.get_all()
    assert [m.role.value for m in history] == ["user", *["assistant", "tool"] * 3, "assistant"]
    results = [m for m in history if m.role.value == "tool"]
    for result, (_, _, says) in zip(results, CALLS, strict=True):
        assert (result.content or "").startswith("Error:")
        assert says in (result.content or "")
    calls = calls_of(history)
    assert [c["id"] for c in calls] == ["hostile-0", "hostile-1", "hostile-2"]
    for call, (_, _, says) in zip(calls, CALLS, strict=True):
        assert is_elided(call)
        assert says in call["args"][ELIDED]
    assert sum(len(m.model_dump_json()) for m in history) < 20_000

    # The next run reads the history back (a view within the budget) and goes on.
    again = str(await agent_of(kind, memory, handle).run("And now?", memory=chat))
    assert again == ANSWER
    view = chat.last_view
    assert view is not None
    assert view.tokens <= BUDGET
    reopened = GlidingMemory.from_defaults(memory, TASK, budget=BUDGET).get_all()
    assert [m.model_dump() for m in reopened] == [m.model_dump() for m in chat.get_all()]


@pytest.fixture
async def engine() -> AsyncIterator[AsyncEngine]:
    value = create_async_engine("sqlite+aiosqlite:///:memory:")
    yield value
    await value.dispose()


async def test_the_memory_block_archives_flushed_hostile_calls(
    memory: Memory, engine: AsyncEngine
) -> None:
    block = GlidingMemoryBlock.from_memory(memory, TASK, budget=200)
    stock = ChatMemory.from_defaults(
        session_id="hostile",
        token_limit=300,
        token_flush_size=60,
        chat_history_token_ratio=0.5,
        memory_blocks=[block],
        async_engine=engine,
    )
    flushed = [ChatMessage(role="user", content="Check the plan; the code is heron-7.")]
    for step, (tool, build, _) in enumerate(CALLS):
        block_call = ToolCallBlock(tool_call_id=f"c{step}", tool_name=tool, tool_kwargs=build())
        flushed.append(ChatMessage(role="assistant", blocks=[block_call]))
        flushed.append(
            ChatMessage(
                role="tool",
                content="Error: refused",
                additional_kwargs={"tool_call_id": f"c{step}"},
            )
        )
    await block.aput(flushed)  # as the stock Memory flushes them
    text = await block.aget([ChatMessage(role="user", content="What is the code?")])
    assert "heron-7" in text
    turns = memory.store.by_tags(["turn"])
    assert sum("(calls " in (e.node.get("text") or "") for e in turns) == len(CALLS)
    await stock.aput(ChatMessage(role="user", content="Hello again."))  # the stock path runs too
    assert any("Hello again." in (m.content or "") for m in await stock.aget())


def test_bounded_message_elides_blocks_and_raw_calls_over_the_limits() -> None:
    ordinary = ChatMessage(
        role="assistant",
        blocks=[ToolCallBlock(tool_call_id="1", tool_name="read_node", tool_kwargs={"iri": "a"})],
    )
    assert bounded_message(ordinary) is ordinary
    hostile = ChatMessage(
        role="assistant",
        blocks=[
            TextBlock(text="Reading."),
            ToolCallBlock(tool_call_id="1", tool_name="read_node", tool_kwargs={"iri": "a"}),
            ToolCallBlock(tool_call_id="2", tool_name="read_node", tool_kwargs=deep_dict(100_000)),
        ],
        additional_kwargs={
            "tool_calls": [
                ToolSelection(tool_id="3", tool_name="post_message", tool_kwargs=deep_dict(1_200)),
                {"id": "4", "function": {"name": "read_node", "arguments": "x" * MB10}},
                {"id": "5", "function": {"name": "read_node", "arguments": '{"iri": "b"}'}},
            ]
        },
    )
    bounded = bounded_message(hostile)
    assert bounded is not hostile
    assert bounded.content == "Reading."
    assert bounded.blocks[1] is hostile.blocks[1]
    calls = calls_of([bounded])
    assert [c["id"] for c in calls] == ["1", "2", "3", "4", "5"]
    assert [is_elided(c) for c in calls] == [False, True, True, True, False]
    assert calls == calls_of([hostile])  # its record is the original's
    assert len(json.dumps(calls)) < 4_000
    assert bounded.additional_kwargs["tool_calls"][2] is hostile.additional_kwargs["tool_calls"][2]
    assert bounded_message(bounded) is bounded
