"""The view fills its memory room from an ordered list of context sources, in one settings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gliding_core import (
    ContextSource,
    Conversation,
    ConversationSettings,
    HashEmbedder,
    InvalidInputError,
    Memory,
    MemoryConfig,
    RecallSource,
    SearchFilters,
    SessionContextSource,
    SourcePart,
    SourceRequest,
    TopicConfig,
)

TASK = "urn:task:view-sources"


@pytest.fixture
def memory() -> Iterator[Memory]:
    config = MemoryConfig(topics=TopicConfig(interval_s=0))
    with Memory(config=config, embedder=HashEmbedder()) as value:
        yield value


class Frame:
    """A third source (as an L3 frame will be): fixed lines, cut to the budget."""

    name = "frame"

    def __init__(self, text: str, iri: str) -> None:
        self.text, self.iri = text, iri
        self.requests: list[SourceRequest] = []

    def fill(self, request: SourceRequest) -> SourcePart:
        self.requests.append(request)
        if request.budget < 5 or self.iri in request.shown:
            return SourcePart.empty(self.name)
        return SourcePart(self.name, self.text, 4, (self.iri,))


def chat(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(turns):
        out.append({"role": "user", "content": f"Question {i} about crates", "id": f"u{i}"})
        out.append({"role": "assistant", "content": f"Answer {i}: " + "cargo " * 12, "id": f"a{i}"})
    return out


def test_the_default_sources_are_stale_notes_the_l1_context_then_recall(memory: Memory) -> None:
    chat_ = Conversation(memory, TASK)
    assert [s.name for s in chat_.sources] == ["stale", "l1", "recall"]
    assert all(isinstance(s, ContextSource) for s in chat_.sources)
    assert isinstance(chat_.sources[1], SessionContextSource)
    assert isinstance(chat_.sources[2], RecallSource)


class Searcher:
    """Not a memory: a search function and a token counter are all recall takes."""

    def __init__(self, memory: Memory) -> None:
        self.tokens = memory.tokens
        self.queries: list[str] = []
        self._memory = memory

    def search(self, query: str, k: int = 10, *, filters: SearchFilters | None = None) -> Any:
        self.queries.append(query)
        return self._memory.search(query, k, filters=filters)


def test_recall_takes_a_searcher_not_a_memory(memory: Memory) -> None:
    memory.store.put({"@id": "urn:ex:fact", "text": "The crate code is 5521."})
    searcher = Searcher(memory)
    part = RecallSource(searcher, 2).fill(SourceRequest("crate code", 200))
    assert searcher.queries == ["crate code"]
    assert "5521" in part.text
    assert part.tokens == memory.count_tokens(part.text) <= 200
    for wrong in ("memory", memory.store, object()):
        with pytest.raises(InvalidInputError, match="memory must be a gliding_core Memory"):
            RecallSource(wrong, 2)  # type: ignore[arg-type]


def test_an_extra_source_fills_what_is_left_without_changing_the_view(memory: Memory) -> None:
    frame = Frame("[Frame] the release owner is Ada", "urn:l2:frame:1")
    conversation = Conversation(memory, TASK, budget=300, recall_k=2, extra_sources=[frame])
    history = [{"role": "user", "content": "The crate code is 5521.", "id": "fact"}, *chat(20)]
    history.append({"role": "user", "content": "What is the crate code?", "id": "q"})
    conversation.record(history)

    view = conversation.view(history)

    # Recall is there when a hit is left once the L1 context is shown; its ties between the
    # look-alike turns of ``chat`` break either way, so only its place is pinned.
    sources = [p.source for p in view.parts]
    assert sources in (["l1", "recall", "frame"], ["l1", "frame"])
    assert view.memory.endswith("[Frame] the release owner is Ada")
    assert view.tokens <= 300
    assert view.tokens == memory.framing().count(view.messages)
    (request,) = frame.requests
    assert request.query == "What is the crate code?"
    shown = set(request.shown)
    for part in view.parts[:-1]:  # what the earlier sources quoted is shown to the later ones
        assert set(part.iris) <= shown
    assert conversation.archived("q") in shown  # and what the window shows
    assert request.budget <= 300 - sum(p.tokens for p in view.parts[:-1])


def test_each_source_gets_what_is_left_and_the_view_stays_exact(memory: Memory) -> None:
    conversation = Conversation(memory, TASK, budget=160, recall_k=8)
    history = chat(25)
    conversation.record(history)
    for budget in (60, 100, 160):
        view = conversation.view(history, budget=budget)
        assert view.tokens == memory.framing().count(view.messages)
        assert view.tokens <= budget or len(view.messages) <= 2
        assert sum(p.tokens for p in view.parts) <= memory.tokens.count(view.memory) + 4


def test_placement_user_puts_the_memory_just_before_the_newest_turn(memory: Memory) -> None:
    conversation = Conversation(memory, TASK, budget=300, placement="user")
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "The crate code is 5521.", "id": "fact"},
        *chat(30),
        {"role": "user", "content": "What is the crate code?", "id": "q"},
    ]
    conversation.record(history)

    view = conversation.view(history)

    memory_at = next(i for i, m in enumerate(view.messages) if m.get("memory"))
    assert view.messages[memory_at]["role"] == "user"
    assert view.messages[memory_at + 1]["id"] == "q"
    assert view.messages[0] == history[0]
    assert "5521" in view.messages[memory_at]["content"]
    assert view.tokens == memory.framing().count(view.messages)


def test_placement_system_follows_the_leading_system_messages(memory: Memory) -> None:
    conversation = Conversation(memory, TASK, budget=300)
    history = [{"role": "system", "content": "Be brief."}, *chat(30)]
    conversation.record(history)
    view = conversation.view(history)
    assert view.messages[1]["role"] == "system"
    assert view.messages[1]["memory"] is True
    assert conversation.record(view.messages) == []  # the memory message is never archived


def test_the_settings_are_one_validated_object() -> None:
    base = ConversationSettings(budget=900, recall_k=3)
    changed = ConversationSettings.of(base, window_share=0.25, placement="user")
    assert (changed.budget, changed.recall_k, changed.window_share) == (900, 3, 0.25)
    assert ConversationSettings.of(None) == ConversationSettings()
    assert ConversationSettings.of(base) is base


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"budget": 0}, "budget"),
        ({"recall_k": -1}, "recall_k"),
        ({"window_share": 1.5}, "window_share"),
        ({"summary_share": True}, "summary_share"),
        ({"placement": "top"}, "placement"),
        ({"agent": " "}, "agent"),
    ],
)
def test_bad_settings_are_named(values: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        ConversationSettings(**values)
    with pytest.raises(InvalidInputError, match="unknown conversation setting 'colour'"):
        ConversationSettings.of(None, colour=1)  # type: ignore[call-arg]


def test_conversations_take_settings_or_options(memory: Memory) -> None:
    settings = ConversationSettings(budget=700, recall_k=2, agent="planner")
    chat_ = Conversation(memory, TASK, settings=settings, recall_k=4)
    assert chat_.settings == ConversationSettings(budget=700, recall_k=4, agent="planner")
    assert chat_.session.agent == "planner"
    assert chat_.for_scope(chat_.scope) is chat_
    with pytest.raises(InvalidInputError, match="ContextSource"):
        Conversation(memory, TASK, extra_sources=["frame"])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="settings must be"):
        Conversation(memory, TASK, settings={"budget": 3})  # type: ignore[arg-type]
