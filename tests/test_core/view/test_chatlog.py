"""The chat log: one durable, id-keyed log; each message one L0 entry; history back on reopen."""

from __future__ import annotations

from pathlib import Path

import pytest

from gliding_core import (
    Conversation,
    HashEmbedder,
    InvalidInputError,
    Memory,
    MemoryConfig,
    Scope,
    TopicConfig,
)
from gliding_core.view.chatlog import ChatLog

CONFIG = MemoryConfig(topics=TopicConfig(interval_s=0))


def open_log(memory: Memory, thread: str = "t1") -> ChatLog:
    return ChatLog(Conversation(memory, scope=Scope.thread(thread)))


def test_each_message_is_one_l0_entry_and_recall_finds_it_once(tmp_path: Path) -> None:
    with Memory.open(tmp_path, config=CONFIG, embedder=HashEmbedder()) as memory:
        log = open_log(memory)
        log.append(
            [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "The crate code is 5521.", "id": "m1"},
                {"role": "assistant", "content": "Noted: 5521.", "id": "m2"},
            ]
        )
        # One entry per message, and one for the L1 session's state: no second copy.
        assert memory.store.count() == 3 + 1
        log.append([{"role": "user", "content": "The crate code is 5521.", "id": "m1"}])
        assert memory.store.count() == 3 + 1  # a logged id is not logged again
        hits = memory.search("crate code 5521", 5, filters=Scope.thread("t1").filters())
        assert [h.entry.metadata.get("message_id") for h in hits].count("m1") == 1


def test_a_reopened_log_has_its_history_and_archives_nothing_again(tmp_path: Path) -> None:
    native = {"type": "human", "data": {"content": "hello"}}
    with Memory.open(tmp_path, config=CONFIG, embedder=HashEmbedder()) as memory:
        log = open_log(memory)
        log.append([{"role": "user", "content": "hello", "id": "a"}], natives=[native])
        log.append([{"role": "assistant", "content": "hi there"}])  # gets an id
        count = memory.store.count()
    with Memory.open(tmp_path, config=CONFIG, embedder=HashEmbedder()) as memory:
        log = open_log(memory)
        messages = log.messages()
        assert [m.record["content"] for m in messages] == ["hello", "hi there"]
        assert messages[0].native == native
        assert len(messages[1].id) == 32
        log.append([m.record for m in messages])  # the same messages again: nothing new
        log.conversation.record([m.record for m in messages])
        assert memory.store.count() == count
        assert open_log(memory, "t2").messages() == []  # another chat's log is its own


def test_clear_hides_and_keep_picks_without_deleting(tmp_path: Path) -> None:
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        log = open_log(memory)
        log.append([{"role": "user", "content": f"message {i}", "id": f"m{i}"} for i in range(4)])
        log.keep(["m1", "m3"])
        assert [m.id for m in log.messages()] == ["m1", "m3"]
        log.clear()
        assert log.messages() == []
        assert memory.store.count() == 4 + 1  # the messages and the L1 session's state


def test_a_delivered_input_is_logged_on_its_own_turn(tmp_path: Path) -> None:
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        log = open_log(memory)
        memory.supplements.put(log.conversation.task_iri, "Use the EU region.")
        (item,) = log.conversation.deliver()
        before = memory.store.count()
        record = {"role": "user", "content": item.content, "id": item.iri, "supplement": item.iri}
        (logged,) = log.append([record])
        assert memory.store.count() == before  # the input's turn holds the message
        assert log.messages()[0].record["supplement"] == item.iri
        assert logged.iri == log.conversation.input_turn(item.iri)


def test_bad_input_is_named(tmp_path: Path) -> None:
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        log = open_log(memory)
        with pytest.raises(InvalidInputError, match="natives"):
            log.append([{"role": "user", "content": "x"}], natives=[1, 2])
        with pytest.raises(InvalidInputError, match="role"):
            log.append([{"content": "x"}])
        with pytest.raises(InvalidInputError, match="chat"):
            ChatLog(log.conversation, "")
        with pytest.raises(InvalidInputError, match="Conversation"):
            ChatLog(memory)  # type: ignore[arg-type]
        assert log.messages() == []


def test_each_agent_of_a_scope_has_its_own_chat() -> None:
    with Memory(config=CONFIG, embedder=HashEmbedder()) as memory:
        scope = Scope.thread("t1")
        planner = ChatLog(Conversation(memory, scope=scope, agent="planner"))
        coder = ChatLog(Conversation(memory, scope=scope, agent="coder"))
        planner.append([{"role": "user", "content": "plan it", "id": "m1"}])
        assert coder.messages() == []
        assert [m.id for m in ChatLog(planner.conversation).messages()] == ["m1"]
