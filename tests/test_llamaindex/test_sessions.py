"""GlidingMemory's sessions and users: ``session_id`` keys the chat history, ``user_id`` the
long-term recall across that user's sessions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ChatMessage

from gliding_core import HashEmbedder, InvalidInputError, Memory
from gliding_llamaindex import GlidingMemory


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def memory_text(messages: list[ChatMessage]) -> str:
    return " ".join(m.content or "" for m in messages)


@pytest.fixture
def memory() -> Iterator[Memory]:
    with Memory(embedder=HashEmbedder()) as value:
        yield value


def test_each_session_of_a_user_has_its_own_history(memory: Memory) -> None:
    first = GlidingMemory.from_defaults(memory, session_id="chat-1", user_id="alice")
    second = GlidingMemory.from_defaults(memory, session_id="chat-2", user_id="alice")
    first.put(user("My locker code is 3141."))
    second.put(user("Book a table for two."))

    assert [m.content for m in first.get_all()] == ["My locker code is 3141."]
    assert [m.content for m in second.get_all()] == ["Book a table for two."]
    assert first.session_id == "chat-1"
    assert second.session_id == "chat-2"


def test_reset_of_one_session_leaves_the_other(memory: Memory) -> None:
    first = GlidingMemory.from_defaults(memory, session_id="chat-1", user_id="alice")
    second = GlidingMemory.from_defaults(memory, session_id="chat-2", user_id="alice")
    first.put(user("My locker code is 3141."))
    second.put(user("Book a table for two."))

    first.reset()

    assert first.get_all() == []
    assert [m.content for m in second.get_all()] == ["Book a table for two."]


def test_recall_reaches_across_the_users_sessions_and_no_further(memory: Memory) -> None:
    first = GlidingMemory.from_defaults(memory, session_id="chat-1", user_id="alice")
    first.put(user("My locker code is 3141."))
    second = GlidingMemory.from_defaults(memory, session_id="chat-2", user_id="alice")
    bobs = GlidingMemory.from_defaults(memory, session_id="chat-9", user_id="bob")
    question = "What is my locker code?"

    second.put(user(question))
    bobs.put(user(question))

    assert "3141" in memory_text(second.get(question))  # alice's other session
    assert "3141" not in memory_text(bobs.get(question))  # never another user's


def test_a_session_alone_is_its_own_scope(memory: Memory) -> None:
    first = GlidingMemory.from_defaults(memory, session_id="chat-1")
    other = GlidingMemory.from_defaults(memory, session_id="chat-2")
    first.put(user("My locker code is 3141."))
    other.put(user("What is my locker code?"))

    assert other.get_all() == [user("What is my locker code?")]
    assert "3141" not in memory_text(other.get("What is my locker code?"))


def test_sessions_come_back_after_a_restart(tmp_path: Path) -> None:
    with Memory.open(tmp_path, embedder=HashEmbedder()) as memory:
        GlidingMemory.from_defaults(memory, session_id="chat-1", user_id="alice").put(user("one"))
        GlidingMemory.from_defaults(memory, session_id="chat-2", user_id="alice").put(user("two"))
    with Memory.open(tmp_path, embedder=HashEmbedder()) as memory:
        again = GlidingMemory.from_defaults(memory, session_id="chat-1", user_id="alice")
        assert [m.content for m in again.get_all()] == ["one"]


@pytest.mark.parametrize("session_id", ["", 7])
def test_a_bad_session_id_is_a_typed_error(memory: Memory, session_id: object) -> None:
    with pytest.raises(InvalidInputError):
        GlidingMemory.from_defaults(memory, session_id=session_id, user_id="alice")  # type: ignore[arg-type]
