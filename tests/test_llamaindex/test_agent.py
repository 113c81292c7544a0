"""A real LlamaIndex FunctionAgent, driven by a scripted LLM, over many turns with GlidingMemory.

The LLM is the only fake (``MockFunctionCallingLLM`` with a response generator that records
every request); the agent workflow, the memory, SQLite, Chroma and tiktoken are real.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from gliding_core import Memory
from gliding_llamaindex import GlidingMemory

# Building a workflow inspects the agent's members; on a pydantic model that touches attributes
# pydantic deprecated (LlamaIndex's code, not ours): ignore exactly those.
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

TASK = "urn:task:agent-test"
BUDGET = 360
FACT = "The staging database password is amber-falcon-77."
SUPPLEMENT = "Also: use the EU region for every new bucket."


class RecordingModel:
    """The scripted model: records each request; calls the tool when asked to note something."""

    def __init__(self) -> None:
        self.requests: list[list[ChatMessage]] = []
        self.during_call: list[Any] = []  # callables run while the model "thinks"

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.requests.append([m.model_copy(deep=True) for m in messages])
        while self.during_call:
            self.during_call.pop(0)()
        last = messages[-1]
        return ChatMessage(role="assistant", content=f"Acknowledged: {(last.content or '')[:80]}")


def tokens(memory: Memory, messages: list[ChatMessage]) -> int:
    return memory.framing().count(
        [{"role": m.role.value, "content": m.content or ""} for m in messages]
    )


def carrying(messages: list[ChatMessage], text: str) -> list[ChatMessage]:
    return [m for m in messages if m.role.value == "user" and m.content == text]


def put_from_another_thread(memory: Memory, text: str) -> None:
    producer = threading.Thread(target=memory.supplements.put, args=(TASK, text))
    producer.start()
    producer.join()


def build(memory: Memory) -> tuple[FunctionAgent, RecordingModel, GlidingMemory]:
    model = RecordingModel()
    llm = MockFunctionCallingLLM(response_generator=model)
    agent = FunctionAgent(llm=llm, tools=[])
    return agent, model, GlidingMemory.from_defaults(memory, TASK, budget=BUDGET)


async def test_agent_conversation_stays_in_budget_recalls_and_delivers_once(
    memory: Memory,
) -> None:
    agent, model, history = build(memory)

    await agent.run("Let's get the staging environment ready this week.", memory=history)
    await agent.run(FACT, memory=history)
    before = -1
    for i in range(32):
        await agent.run(
            f"Step {i}: provision worker node {i} in rack {i % 4} and tag it batch-{i}.",
            memory=history,
        )
        if i == 20:
            put_from_another_thread(memory, SUPPLEMENT)
            before = len(model.requests)
    await agent.run("Remind me: what is the staging database password?", memory=history)

    # Every request was within the budget, while the history grew far past it.
    assert len(model.requests) == 35
    assert all(tokens(memory, r) <= BUDGET for r in model.requests)
    assert tokens(memory, history.get_all()) > 3 * BUDGET
    assert len(history.get_all()) == 2 * 35 + 1  # each user turn, each reply, the supplement

    # The early fact is no longer in the window, but is recalled into the memory message.
    last = model.requests[-1]
    assert last[-1].content == "Remind me: what is the staging database password?"
    assert last[-2].role.value == "user"  # the memory message, just before the newest turn
    assert "amber-falcon-77" in (last[-2].content or "")  # from L1's context or L0's recall
    assert not carrying(last, FACT)

    # The supplement put between two runs is in the next request, once, as a user message.
    assert not any(carrying(r, SUPPLEMENT) for r in model.requests[:before])
    assert len(carrying(model.requests[before], SUPPLEMENT)) == 1
    assert all(len(carrying(r, SUPPLEMENT)) <= 1 for r in model.requests[before:])


async def test_supplement_put_while_the_model_runs_reaches_the_next_request(
    memory: Memory,
) -> None:
    agent, model, history = build(memory)
    await agent.run("Start the quarterly report.", memory=history)
    model.during_call.append(lambda: put_from_another_thread(memory, SUPPLEMENT))
    await agent.run("Add the revenue table.", memory=history)  # the put lands mid-run
    await agent.run("Now the cost table.", memory=history)

    first, second, third = model.requests
    assert not carrying(first, SUPPLEMENT)
    assert not carrying(second, SUPPLEMENT)
    assert len(carrying(third, SUPPLEMENT)) == 1
    assert [m.content for m in third[-2:]] == [SUPPLEMENT, "Now the cost table."]


async def test_tool_calls_are_archived_and_kept_with_their_results(memory: Memory) -> None:
    def lookup_rack(rack: int) -> str:
        """Return what is installed in a rack."""
        return f"Rack {rack} holds the GPU nodes."

    calls = iter(range(1000))

    def script(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        if messages[-1].role.value == "tool":
            return ChatMessage(role="assistant", content="Rack 7 holds the GPU nodes.")
        block = ToolCallBlock(
            tool_call_id=f"call-{next(calls)}", tool_name="lookup_rack", tool_kwargs={"rack": 7}
        )
        return ChatMessage(role="assistant", blocks=[block])

    llm = MockFunctionCallingLLM(response_generator=script)
    agent = FunctionAgent(llm=llm, tools=[FunctionTool.from_defaults(lookup_rack)])
    history = GlidingMemory.from_defaults(memory, TASK, budget=BUDGET)

    await agent.run("What is in rack 7?", memory=history)

    roles = [m.role.value for m in history.get_all()]
    assert roles == ["user", "assistant", "tool", "assistant"]
    hits = memory.search("rack 7 GPU nodes", 5)
    assert any("GPU nodes" in hit.entry.node["text"] for hit in hits)
