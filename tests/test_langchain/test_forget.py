"""Forgetting a user the LangChain ways: the middleware, the chat history, the LangGraph store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from gliding_core import HashEmbedder, Memory, MemoryConfig, Scope, TopicConfig
from gliding_langchain import GlidingChatMessageHistory, GlidingMemoryMiddleware, GlidingStore

TASK = "urn:task:forget"


@pytest.fixture
def memory() -> Iterator[Memory]:
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=HashEmbedder()) as value:
        yield value


def _texts(memory: Memory) -> str:
    return " ".join(text for batch in memory.store.scan_texts() for _, text in batch)


def test_the_middleware_forgets_a_user_as_mem0_deletes_all_of_one(memory: Memory) -> None:
    middleware = GlidingMemoryMiddleware(memory, TASK)
    for user in ("alice", "bob"):
        middleware.conversation_for(Scope.user(user)).record(
            [{"role": "user", "content": f"my passport is Qz{user}pass"}]
        )
    report = middleware.forget(user_id="alice")
    assert report.target == "user:alice"
    assert report.kinds == {"Turn": 1, "SessionState": 1}  # the turn, and its session's state
    assert "Qzalicepass" not in _texts(memory)
    assert "Qzbobpass" in _texts(memory)
    recalled = middleware.conversation_for(Scope.user("alice")).view(
        [{"role": "user", "content": "what is my passport?"}]
    )
    assert "Qzalicepass" not in recalled.memory


def test_clear_keeps_what_forget_erases(memory: Memory) -> None:
    history = GlidingChatMessageHistory(memory, "chat-1")
    history.add_messages([HumanMessage("my passport is Qzpass77"), AIMessage("noted")])
    history.clear()
    assert history.messages == []
    assert "Qzpass77" in _texts(memory)  # clear hides; recall still finds it
    report = history.forget()
    assert report.target == "thread:chat-1"
    assert report.kinds == {"Turn": 2, "SessionState": 1}
    assert "Qzpass77" not in _texts(memory)


def test_the_store_forgets_a_namespace_and_only_it(memory: Memory) -> None:
    store = GlidingStore(memory, scope_template=("memories", "{user_id}"))
    store.put(("memories", "alice"), "a", {"text": "Qzalicememory"})
    store.put(("memories", "bob"), "b", {"text": "Qzbobmemory"})
    report = store.forget(("memories", "alice"))
    assert report.removed == 1
    assert store.get(("memories", "alice"), "a") is None
    assert store.get(("memories", "bob"), "b") is not None
    assert store.forget(("memories", "nobody")).removed == 0
    assert "Qzalicememory" not in _texts(memory)


def test_forgetting_a_user_through_the_middleware_takes_their_store_items(memory: Memory) -> None:
    store = GlidingStore(memory, scope_template=("memories", "{user_id}"))
    store.put(("memories", "alice"), "a", {"text": "Qzaliceitem"})
    GlidingMemoryMiddleware(memory, TASK).forget(user_id="alice")
    assert store.get(("memories", "alice"), "a") is None


def test_the_store_refuses_a_bad_prefix(memory: Memory) -> None:
    with pytest.raises(ValueError, match="prefix"):
        GlidingStore(memory).forget("memories")  # type: ignore[arg-type]
