"""The chat history (legacy ``RunnableWithMessageHistory`` path) on L0 and L1."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from gliding_core import HashEmbedder, InvalidInputError, Memory
from gliding_langchain import GlidingChatMessageHistory, ScriptedChatModel


@pytest.fixture
def memory() -> Iterator[Memory]:
    with Memory(embedder=HashEmbedder()) as value:
        yield value


def chat(count: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(count):
        out += [HumanMessage(f"Question {i} about llamas in Peru"), AIMessage(f"Llama fact {i}.")]
    return out


def test_messages_come_back_exactly_and_in_order(memory: Memory) -> None:
    history = GlidingChatMessageHistory(memory, "chat/1")
    sent = chat(3)
    history.add_messages(sent)

    back = history.messages
    assert [(m.type, m.text) for m in back] == [(m.type, m.text) for m in sent]
    assert all(m.id for m in back)


def test_the_history_survives_reopening(tmp_path: Path) -> None:
    with Memory.open(tmp_path, embedder=HashEmbedder()) as memory:
        GlidingChatMessageHistory(memory, "c").add_messages(chat(2))
    with Memory.open(tmp_path, embedder=HashEmbedder()) as memory:
        assert len(GlidingChatMessageHistory(memory, "c").messages) == 4


def test_a_budget_keeps_the_prompt_small_and_recalls_old_turns(memory: Memory) -> None:
    history = GlidingChatMessageHistory(memory, "long", budget=150)
    history.add_messages([HumanMessage("My cat is called Saffron."), AIMessage("Noted.")])
    history.add_messages(chat(30))
    history.add_message(HumanMessage("What is my cat called?"))

    view = history.messages
    assert len(history.all_messages) == 63
    assert history.conversation.view([]).tokens <= 150
    assert view[0].type == "system"
    assert "Saffron" in view[0].text
    assert view[-1].text == "What is my cat called?"


def test_clear_hides_messages_but_keeps_them_in_l0(memory: Memory) -> None:
    history = GlidingChatMessageHistory(memory, "c")
    history.add_messages(chat(2))
    before = memory.store.count()

    history.clear()

    assert history.messages == []
    assert memory.store.count() == before
    assert memory.store.by_tags(["chat:cleared"])


def test_chats_are_kept_apart(memory: Memory) -> None:
    GlidingChatMessageHistory(memory, "a").add_messages(chat(1))
    assert GlidingChatMessageHistory(memory, "b").messages == []


def test_runnable_with_message_history_uses_it(memory: Memory) -> None:
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )
    model = ScriptedChatModel()
    histories: dict[str, GlidingChatMessageHistory] = {}

    def get(session_id: str) -> GlidingChatMessageHistory:
        return histories.setdefault(session_id, GlidingChatMessageHistory(memory, session_id))

    with warnings.catch_warnings():  # the legacy wrapper warns that it is deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        chain = RunnableWithMessageHistory(
            prompt | model, get, input_messages_key="question", history_messages_key="history"
        )
        config = {"configurable": {"session_id": "s1"}}
        chain.invoke({"question": "Hello there"}, config=config)
        chain.invoke({"question": "Second question"}, config=config)

    assert [m.text for m in histories["s1"].messages] == [
        "Hello there",
        "You said: Hello there",
        "Second question",
        "You said: Second question",
    ]
    assert [m.text for m in model.requests[-1]][:2] == ["Hello there", "You said: Hello there"]


def test_bad_input_is_rejected_and_nothing_is_written(memory: Memory) -> None:
    with pytest.raises(InvalidInputError, match="session_id"):
        GlidingChatMessageHistory(memory, "")
    history = GlidingChatMessageHistory(memory, "c")
    with pytest.raises(InvalidInputError, match="LangChain messages"):
        history.add_messages([HumanMessage("ok"), "not a message"])  # type: ignore[list-item]
    assert history.messages == []


def test_a_repeated_or_odd_id_never_replaces_a_message(memory: Memory) -> None:
    history = GlidingChatMessageHistory(memory, "c")
    history.add_messages([HumanMessage("hello", id="m1"), AIMessage("yo", id="m1")])
    history.add_messages([HumanMessage("again", id="m1"), HumanMessage("hi", id="has space")])

    assert [m.text for m in history.messages] == ["hello", "yo", "again", "hi"]
    assert len({m.id for m in history.messages}) == 4
    assert len(history.conversation.session.turns) == 4


def test_a_chat_is_a_thread_scope_no_other_chat_reads(memory: Memory) -> None:
    from gliding_core import Scope
    from gliding_langchain import GlidingRetriever

    mine = GlidingChatMessageHistory(memory, "mine", budget=120)
    theirs = GlidingChatMessageHistory(memory, "theirs", budget=120)
    mine.add_messages([HumanMessage("My cat is called Saffron."), AIMessage("Noted.")])
    theirs.add_messages([HumanMessage("My cat is called Pepper."), AIMessage("Noted.")])
    theirs.add_messages(chat(20))
    theirs.add_message(HumanMessage("What is my cat called?"))

    prompt = "\n".join(m.text for m in theirs.messages)
    assert "Pepper" in prompt
    assert "Saffron" not in prompt
    assert mine.conversation.scope == Scope.thread("mine")
    assert GlidingRetriever(memory=memory, k=50).invoke("cat called Saffron Pepper") == []


def test_a_message_is_one_l0_entry_whatever_adapter_wrote_it(memory: Memory) -> None:
    from llama_index.core.base.llms.types import ChatMessage

    from gliding_core import Scope
    from gliding_llamaindex import GlidingMemory

    langchain_chat = GlidingChatMessageHistory(memory, "shared-chat")
    langchain_chat.add_messages([HumanMessage("The kiln fires at 1200 C."), AIMessage("Noted.")])
    # Not 4: the message is its turn's archive (and the L1 session's state is one entry).
    assert memory.store.count() == 2 + 1
    llamaindex_chat = GlidingMemory.from_defaults(memory, session_id="shared-chat")
    llamaindex_chat.put(ChatMessage(role="user", content="And the glaze cures at 900 C."))
    assert memory.store.count() == 3 + 1

    # One chat log: each adapter reads what the other wrote, in order.
    assert [m.content for m in llamaindex_chat.get_all()] == [
        "The kiln fires at 1200 C.",
        "Noted.",
        "And the glaze cures at 900 C.",
    ]
    assert [m.text for m in langchain_chat.all_messages][-1] == "And the glaze cures at 900 C."
    hits = memory.search("kiln fires 1200", 5, filters=Scope.thread("shared-chat").filters())
    texts = [h.entry.node["text"] for h in hits]
    assert texts.count("The kiln fires at 1200 C.") == 1  # found once, not twice
