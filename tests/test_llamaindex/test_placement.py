"""Where the memory goes in the prompt: real FunctionAgent and ReActAgent runs find the fact.

``ReActAgent`` drops the leading system message of what the memory returns (it writes its own
ReAct header), so a memory placed there is lost; ``GlidingMemory`` places it, by default, as a
user message before the newest turn, which both agents pass on. The LLM is the only fake
(``MockFunctionCallingLLM`` recording every request); agents, memory, SQLite and Chroma are real.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM

from gliding_core import Memory
from gliding_llamaindex import GlidingMemory

pytestmark = [  # LlamaIndex's workflow touches attributes pydantic deprecated (not our code)
    pytest.mark.filterwarnings(
        "ignore:The `__fields(_set)?__` attribute is deprecated"
        ":pydantic.warnings.PydanticDeprecatedSince20"
    ),
    pytest.mark.filterwarnings(
        "ignore:Accessing the 'model_(computed_)?fields' attribute on the instance is deprecated"
        ":pydantic.warnings.PydanticDeprecatedSince211"
    ),
    # ReActAgent's own step asks its context whether it runs (the workflows package warns).
    pytest.mark.filterwarnings("ignore:is_running called from within a step:DeprecationWarning"),
]

FACT = "The loading dock gate code is 7314-kestrel."
QUESTION = "What is the loading dock gate code?"


class Recorder:
    """The scripted model: records each request, answers in ReAct's final-answer format."""

    def __init__(self) -> None:
        self.requests: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.requests.append([m.model_copy(deep=True) for m in messages])
        return ChatMessage(
            role="assistant",
            content="Thought: I can answer without using any more tools.\nAnswer: noted.",
        )


def agent_of(kind: str, model: Recorder) -> FunctionAgent | ReActAgent:
    llm = MockFunctionCallingLLM(response_generator=model)
    return FunctionAgent(llm=llm, tools=[]) if kind == "function" else ReActAgent(llm=llm, tools=[])


async def last_request(memory: Memory, kind: str, **options: Any) -> list[ChatMessage]:
    """Run a conversation that pushes the fact out of the window, then ask for it."""
    model = Recorder()
    agent = agent_of(kind, model)
    chat = GlidingMemory.from_defaults(
        memory, session_id=f"{kind}-{options}", budget=260, **options
    )
    await agent.run(FACT, memory=chat)
    for i in range(14):
        await agent.run(f"Pallet {i}: stack crates {i} and {i + 1} by bay {i % 3}.", memory=chat)
    await agent.run(QUESTION, memory=chat)
    assert chat.last_view is not None
    assert chat.last_view.dropped > 0  # the fact itself is out of the window
    return model.requests[-1]


def sees(request: list[ChatMessage], text: str) -> bool:
    return any(text in (m.content or "") for m in request)


@pytest.mark.parametrize("kind", ["function", "react"])
async def test_the_recalled_fact_reaches_the_model_of_either_agent(
    memory: Memory, kind: str
) -> None:
    request = await last_request(memory, kind)
    assert sees(request, "7314-kestrel")
    assert sees(request, QUESTION)


async def test_a_system_placement_is_lost_by_react_and_kept_by_function_agents(
    memory: Memory,
) -> None:
    # The finding this setting answers: ReActAgent drops the leading system message.
    assert not sees(await last_request(memory, "react", placement="system"), "7314-kestrel")
    assert sees(await last_request(memory, "function", placement="system"), "7314-kestrel")
