"""GlidingMemoryBlock inside LlamaIndex's stock Memory, with a token limit small enough to flush."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import Memory as ChatMemory
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gliding_core import InvalidInputError, Memory
from gliding_core.view.conversation import RECALL_HEADER
from gliding_llamaindex import GlidingMemoryBlock
from gliding_llamaindex.memory_block import SUPPLEMENT_HEADER

TASK = "urn:task:block-test"


@pytest.fixture
async def engine() -> AsyncIterator[AsyncEngine]:
    """The stock Memory's chat store database, disposed after the test (no connection leaks)."""
    value = create_async_engine("sqlite+aiosqlite:///:memory:")
    yield value
    await value.dispose()


@pytest.fixture
def stock(engine: AsyncEngine) -> Callable[[GlidingMemoryBlock], ChatMemory]:
    """Build LlamaIndex's stock Memory with a block; 150 tokens of history before it flushes."""

    def build(block: GlidingMemoryBlock) -> ChatMemory:
        return ChatMemory.from_defaults(
            session_id="block-test",
            token_limit=300,
            token_flush_size=60,
            chat_history_token_ratio=0.5,
            memory_blocks=[block],
            async_engine=engine,
        )

    return build


async def test_flushed_messages_are_archived_and_recalled(
    memory: Memory, stock: Callable[[GlidingMemoryBlock], ChatMemory]
) -> None:
    block = GlidingMemoryBlock.from_memory(memory, TASK, budget=200)
    chat = stock(block)
    await chat.aput(ChatMessage(role="user", content="The boiler service code is kestrel-19."))
    await chat.aput(ChatMessage(role="assistant", content="Noted the boiler service code."))
    for i in range(20):
        await chat.aput(ChatMessage(role="user", content=f"Schedule cleaning of room {i} at {i}h."))
        await chat.aput(ChatMessage(role="assistant", content=f"Room {i} is booked for {i}h."))

    messages = await chat.aget(input="What was the boiler service code?")

    active = await chat.aget_all()
    assert not any("kestrel" in (m.content or "") for m in active[-10:])
    assert memory.store.count() >= 2  # flushed messages were archived
    system = messages[0]
    assert system.role.value == "system"
    text = system.content or ""
    assert "<gliding_memory>" in text
    assert RECALL_HEADER in text
    assert "kestrel-19" in text.split("<gliding_memory>", 1)[1]  # the L1 context or recall


async def test_a_supplement_comes_with_the_two_gets_after_it_is_put(
    memory: Memory, stock: Callable[[GlidingMemoryBlock], ChatMemory]
) -> None:
    block = GlidingMemoryBlock.from_memory(memory, TASK)
    chat = stock(block)
    await chat.aput(ChatMessage(role="user", content="Write the onboarding guide."))
    memory.supplements.put(TASK, "Add a section on VPN access.")

    first = await chat.aget()
    second = await chat.aget()  # an agent may throw a read away: the next one still has it
    third = await chat.aget()

    for read in (first, second):
        text = read[0].content or ""
        assert text.index(SUPPLEMENT_HEADER) < text.index("</gliding_memory>")
        assert text.count("- Add a section on VPN access.") == 1
    assert all(SUPPLEMENT_HEADER not in (m.content or "") for m in third)
    assert memory.supplements.pending_count(TASK) == 0


async def test_atruncate_cuts_by_tokens(memory: Memory) -> None:
    block = GlidingMemoryBlock.from_memory(memory, TASK)
    text = "one two three four five six seven eight"

    assert await block.atruncate(text, 3) == "one two three four five"
    assert await block.atruncate(text, 8) is None


async def test_bad_inputs_are_typed_errors(memory: Memory) -> None:
    block = GlidingMemoryBlock.from_memory(memory, TASK)
    with pytest.raises(InvalidInputError, match="'flushed text'"):
        await block.aput(["flushed text"])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="budget must be an int >= 1, got -5"):
        GlidingMemoryBlock.from_memory(memory, TASK, budget=-5)
    with pytest.raises(InvalidInputError, match="'nope'"):
        GlidingMemoryBlock.from_memory("nope", TASK)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="Conversation"):
        GlidingMemoryBlock("nope")  # type: ignore[arg-type]


async def test_one_block_serves_each_session_in_its_own_scope(
    memory: Memory, engine: AsyncEngine
) -> None:
    from gliding_core.store.scope import Scope, scope_task_iri

    block = GlidingMemoryBlock.from_memory(memory, budget=200, per_session=True)
    chats = {
        name: ChatMemory.from_defaults(
            session_id=name,
            token_limit=300,
            token_flush_size=60,
            chat_history_token_ratio=0.5,
            memory_blocks=[block],
            async_engine=engine,
        )
        for name in ("harbour", "orchard")
    }
    code = {"harbour": "kestrel-19", "orchard": "plover-44"}
    for name, chat in chats.items():
        await chat.aput(ChatMessage(role="user", content=f"The gate code is {code[name]}."))
        for i in range(20):
            await chat.aput(ChatMessage(role="user", content=f"Book slot {i} at {i}h."))
            await chat.aput(ChatMessage(role="assistant", content=f"Slot {i} booked."))
    memory.supplements.put(scope_task_iri(thread_id="orchard"), "The orchard gate sticks.")

    for name, chat in chats.items():
        text = (await chat.aget(input="What is the gate code?"))[0].content or ""
        other = "orchard" if name == "harbour" else "harbour"
        assert code[name] in text
        assert code[other] not in text
        assert ("gate sticks" in text) == (name == "orchard")
    assert block.conversation_for("orchard").scope == Scope.thread("orchard")
