"""A LlamaIndex chat (``session_id``) served by two workers in turn, each with its own ``Memory``
on one shared directory: every ``get`` returns what one worker serving the chat returns, the
L1 context included; an input sent meanwhile is delivered once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ChatMessage

from gliding_core import Memory
from gliding_core.store.scope import Scope
from gliding_llamaindex import GlidingMemory
from tests.workers import LINES, worker_memories

TURNS = 10


@pytest.fixture
def memories(tmp_path: Path) -> Iterator[tuple[Memory, Memory, Memory]]:
    with worker_memories(tmp_path) as made:
        yield made


def _gliding(memory: Memory) -> GlidingMemory:
    return GlidingMemory.from_defaults(memory, session_id="s1", budget=260, recall_k=3)


def _chat(chats: list[GlidingMemory], inputs: Memory) -> list[list[tuple[str, str]]]:
    """Ten turns, turn n served by ``chats[n % len(chats)]``; what each ``get`` returned."""
    seen = []
    for turn in range(TURNS):
        if turn == 4:
            task = Scope.thread("s1").task_iri
            inputs.supplements.put(task, "Also: the deadline is Friday.")
        chat = chats[turn % len(chats)]
        chat.put(ChatMessage(role="user", content=f"Turn {turn}: {LINES[turn % len(LINES)]}"))
        seen.append([(str(m.role.value), str(m.content)) for m in chat.get()])
        chat.put(ChatMessage(role="assistant", content=f"Noted turn {turn}, item {turn * 3}."))
    return seen


def test_a_chat_served_by_two_workers_in_turn_gets_what_one_worker_gives(
    memories: tuple[Memory, Memory, Memory],
) -> None:
    first, second, alone = memories
    pair = [_gliding(m) for m in (first, second)]
    single = _gliding(alone)
    got, expected = _chat(pair, second), _chat([single], alone)
    for turn, (one, other) in enumerate(zip(got, expected, strict=True)):
        assert one == other, f"turn {turn} differs"
    assert any("[Context from" in text for view in expected for _, text in view)
    shown = [text for view in got for _, text in view if text == "Also: the deadline is Friday."]
    assert shown  # delivered, and kept in every later view, as one message each time
    assert all(
        sum(text == "Also: the deadline is Friday." for _, text in view) <= 1 for view in got
    )
    assert [m.content for m in pair[0].get_all()] == [m.content for m in pair[1].get_all()]
