"""Scoping per user and session through GlidingMemory, its block and the retriever.

Each user's turns carry words only that user says: any of them in another user's view or
retriever result is a leak. The memory, SQLite, Chroma and tiktoken are real.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM

from gliding_core import InvalidInputError, Memory
from gliding_core.store.scope import Scope, scope_task_iri
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
        nodes = GlidingRetriever(memory, k=20, scope=Scope.user(user), include_turns=True).retrieve(
            everything
        )
        assert nodes
        assert all(leaks(user, n.node.get_content()) == [] for n in nodes)
    assert GlidingRetriever(memory, k=20, include_turns=True).retrieve(everything) == []


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

    text = bob._text(bob.conversation, "whale cobalt harpoon fox crimson lantern")

    assert "fox" in text
    assert leaks("bob", text) == []


def test_scope_arguments_are_checked(memory: Memory) -> None:
    with pytest.raises(InvalidInputError, match="thread id"):
        GlidingMemory.from_defaults(memory, session_id="")
    with pytest.raises(InvalidInputError, match="shared"):
        GlidingMemory.from_defaults(memory, session_id="s", shared="urn:kg:x")
    with pytest.raises(InvalidInputError, match="scope"):
        GlidingRetriever(memory, scope="user:alice")  # type: ignore[arg-type]


# Building a workflow inspects the agent's members; on a pydantic model that touches attributes
# pydantic deprecated (LlamaIndex's code, not ours): ignore exactly those.
@pytest.mark.filterwarnings(
    "ignore:The `__fields(_set)?__` attribute is deprecated"
    ":pydantic.warnings.PydanticDeprecatedSince20"
)
@pytest.mark.filterwarnings(
    "ignore:Accessing the 'model_(computed_)?fields' attribute on the instance is deprecated"
    ":pydantic.warnings.PydanticDeprecatedSince211"
)
async def test_function_agent_runs_of_two_users_never_mix(memory: Memory) -> None:
    """A real FunctionAgent (the LLM scripted), two users with two sessions each, 20 turns."""
    requests: list[list[ChatMessage]] = []

    def model(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        requests.append([m.model_copy(deep=True) for m in messages])
        return ChatMessage(role="assistant", content="Noted.")

    agent = FunctionAgent(llm=MockFunctionCallingLLM(response_generator=model), tools=[])
    chats = {
        (user, session): GlidingMemory.from_defaults(
            memory, session_id=f"{user}-{session}", user_id=user, budget=240
        )
        for user in WORDS
        for session in ("s1", "s2")
    }
    for turn in range(TURNS):
        for (user, session), chat in chats.items():
            await agent.run(said(user, session, turn), memory=chat)

    assert len(requests) == 4 * TURNS
    for request in requests:
        user = next(m for m in reversed(request) if m.role.value == "user").content or ""
        text = "\n".join(m.content or "" for m in request)
        assert leaks(user.split()[0], text) == [], text


def test_inputs_from_two_threads_are_shown_once_by_the_memory(memory: Memory) -> None:
    """100 inputs from two threads while the chat goes on: each is in no view before the one
    that delivers it, then in exactly one message of each view, never in the memory text."""
    chat = GlidingMemory.from_defaults(memory, session_id="s", budget=4_000, recall_k=8)
    task = scope_task_iri(thread_id="s")
    texts = [f"whale route update #{p}{i:03d}." for p in "ab" for i in range(50)]

    def produce(batch: list[str]) -> None:
        for text in batch:
            memory.supplements.put(task, text)

    producers = [threading.Thread(target=produce, args=(texts[i::2],)) for i in range(2)]
    for thread in producers:
        thread.start()
    views: list[list[ChatMessage]] = []
    turn = 0
    while any(t.is_alive() for t in producers) or memory.supplements.pending_count(task):
        chat.put(ChatMessage(role="user", content=f"Next whale route update please ({turn})."))
        views.append(chat.get())
        chat.put(ChatMessage(role="assistant", content="Charted."))
        turn += 1
    for thread in producers:
        thread.join()

    for text in texts:
        counts = [sum((m.content or "").count(text) for m in view) for view in views]
        first = next(i for i, n in enumerate(counts) if n)
        assert set(counts[first:]) == {1}, text
        for view in views[first:]:  # the one message is the delivered input itself
            assert [m.content for m in view if text in (m.content or "")] == [text]
