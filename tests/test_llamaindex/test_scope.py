"""Scoping per user and session through GlidingMemory, its block and the retriever.

Each user's turns carry words only that user says: any of them in another user's view or
retriever result is a leak. The memory, SQLite, Chroma and tiktoken are real.
"""

from __future__ import annotations

import re

import pytest
from llama_index.core.base.llms.types import ChatMessage

from gliding_core import InvalidInputError, Memory
from gliding_core.scope import Scope, scope_task_iri
from gliding_llamaindex import GlidingMemory, GlidingMemoryBlock, GlidingRetriever

WORDS = {"alice": ("whale", "cobalt", "harpoon"), "bob": ("fox", "crimson", "lantern")}
TURNS = 20


def said(user: str, session: str, turn: int) -> str:
    a, b, c = WORDS[user]
    return f"{user} {session} turn {turn}: the {a} by the {b} {c} needs item {turn}."


def leaks(user: str, text: str) -> list[str]:
    other = "bob" if user == "alice" else "alice"
    return [w for w in (other, *WORDS[other]) if re.search(rf"\b{w}\b", text)]


def test_two_users_two_sessions_each_never_see_each_other(memory: Memory) -> None:
    chats = {
        (user, session): GlidingMemory.from_defaults(
            memory, session_id=f"{user}-{session}", user_id=user, budget=220, recall_k=4
        )
        for user in WORDS
        for session in ("s1", "s2")
    }
    recalled = 0
    for turn in range(TURNS):
        for (user, session), chat in chats.items():
            chat.put(ChatMessage(role="user", content=said(user, session, turn)))
            shown = chat.get()
            text = "\n".join(m.content or "" for m in shown)
            assert leaks(user, text) == [], text
            chat.put(ChatMessage(role="assistant", content=f"Noted item {turn}."))
            assert chat.last_view is not None
            recalled += bool(chat.last_view.recall)
    assert recalled > TURNS  # recall ran: a leak would have shown
    everything = " ".join(w for words in WORDS.values() for w in words)
    for user in WORDS:
        nodes = GlidingRetriever(memory, k=20, scope=Scope.user(user)).retrieve(everything)
        assert nodes
        assert all(leaks(user, n.node.get_content()) == [] for n in nodes)
    assert GlidingRetriever(memory, k=20).retrieve(everything) == []


def test_sessions_are_scopes_and_input_reaches_its_session_only(memory: Memory) -> None:
    first = GlidingMemory.from_defaults(memory, session_id="s1", budget=300)
    second = GlidingMemory.from_defaults(memory, session_id="s2", budget=300)
    assert first.session_id == "s1"
    assert first.conversation.task_iri == scope_task_iri(thread_id="s1")
    memory.supplements.put(scope_task_iri(thread_id="s1"), "Ship the harpoon by Friday.")
    for chat in (second, first, second, first):
        chat.put(ChatMessage(role="user", content="What is next?"))

        shown = [m.content or "" for m in chat.get()]

        count = sum(text.count("Ship the harpoon by Friday.") for text in shown)
        assert count == (1 if chat is first else 0)


def test_a_block_reads_its_own_scope(memory: Memory) -> None:
    alice = GlidingMemoryBlock.from_memory(memory, user_id="alice")
    bob = GlidingMemoryBlock.from_memory(memory, user_id="bob")
    alice.conversation.record([{"role": "user", "content": said("alice", "s", 0)}])
    bob.conversation.record([{"role": "user", "content": said("bob", "s", 0)}])

    text = bob._text("whale cobalt harpoon fox crimson lantern")

    assert "fox" in text
    assert leaks("bob", text) == []


def test_scope_arguments_are_checked(memory: Memory) -> None:
    with pytest.raises(InvalidInputError, match="thread id"):
        GlidingMemory.from_defaults(memory, session_id="")
    with pytest.raises(InvalidInputError, match="shared"):
        GlidingMemory.from_defaults(memory, session_id="s", shared="urn:kg:x")
    with pytest.raises(InvalidInputError, match="scope"):
        GlidingRetriever(memory, scope="user:alice")  # type: ignore[arg-type]
