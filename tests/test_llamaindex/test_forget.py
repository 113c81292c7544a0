"""Forgetting a user the LlamaIndex way: ``GlidingMemory.forget``, beside ``reset``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from llama_index.core.llms import ChatMessage

from gliding_core import HashEmbedder, Memory, MemoryConfig, TopicConfig
from gliding_llamaindex import GlidingMemory


@pytest.fixture
def memory() -> Iterator[Memory]:
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=HashEmbedder()) as value:
        yield value


def _texts(memory: Memory) -> str:
    return " ".join(text for batch in memory.store.scan_texts() for _, text in batch)


def test_reset_keeps_what_forget_erases_for_every_session_of_the_user(memory: Memory) -> None:
    first = GlidingMemory.from_defaults(memory, session_id="chat-1", user_id="alice")
    second = GlidingMemory.from_defaults(memory, session_id="chat-2", user_id="alice")
    bob = GlidingMemory.from_defaults(memory, session_id="chat-3", user_id="bob")
    first.put(ChatMessage(role="user", content="my passport is Qzpass01"))
    second.put(ChatMessage(role="user", content="my visa is Qzvisa02"))
    bob.put(ChatMessage(role="user", content="my code is Qzbob03"))
    first.reset()
    assert "Qzpass01" in _texts(memory)  # reset keeps the archive
    report = first.forget()
    assert report.target == "user:alice"
    assert "Qzpass01" not in _texts(memory)
    assert "Qzvisa02" not in _texts(memory)
    assert "Qzbob03" in _texts(memory)
    assert first.get_all() == []
