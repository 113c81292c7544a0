"""GlidingMemory with content of any size: kept whole, shown within the budget, never raising."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ChatMessage

from gliding_core import HashEmbedder, Memory
from gliding_llamaindex import GlidingMemory

TASK = "urn:task:llamaindex-large"
BUDGET = 1_500
# About 2 MB, with a word at its very end that no cut keeps.
DUMP = "".join(f"row {i}: sensor {i % 97} reads {i * 7 % 1000} units. " for i in range(54_000))
DUMP += "The last row names the culprit: quagmire."


def count(memory: Memory, messages: list[ChatMessage]) -> int:
    """The exact token count of ``messages`` as sent, the way the core counts a view."""
    records = [{"role": m.role.value, "content": m.content or ""} for m in messages]
    return memory.framing().count(records)


def test_a_two_megabyte_tool_result_is_kept_whole_and_shown_cut(tmp_path: Path) -> None:
    sent = [
        ChatMessage(role="user", content="Which sensor failed?"),
        ChatMessage(role="tool", content=DUMP, additional_kwargs={"tool_call_id": "c1"}),
    ]
    with Memory.open(tmp_path, embedder=HashEmbedder()) as memory:
        history = GlidingMemory.from_defaults(memory, TASK, session_id="s1", budget=BUDGET)
        history.put_messages(sent)

        shown = history.get()
        assert count(memory, shown) <= BUDGET
        assert history.last_view is not None
        assert not history.last_view.over_budget
        tool = next(m for m in shown if m.role.value == "tool")
        assert "the memory keeps it whole" in (tool.content or "")
        assert [h.entry.iri for h in memory.store.search_text("quagmire")]
    with Memory.open(tmp_path, embedder=HashEmbedder()) as memory:
        again = GlidingMemory.from_defaults(memory, TASK, session_id="s1", budget=BUDGET)
        assert again.get_all() == sent  # exactly, after a restart


def test_a_budget_that_cannot_be_met_still_returns_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with Memory(embedder=HashEmbedder()) as memory:
        history = GlidingMemory.from_defaults(memory, TASK, budget=8)
        history.put(ChatMessage(role="system", content="Be brief, " * 20))
        with caplog.at_level(logging.WARNING, logger="gliding_core.view.conversation"):
            history.put(ChatMessage(role="user", content="Hello there"))
            first = history.get()
            history.put(ChatMessage(role="user", content="And again"))
            second = history.get()
    assert first
    assert second
    assert history.last_view is not None
    assert history.last_view.over_budget
    assert len([r for r in caplog.records if "over its budget" in r.getMessage()]) == 1
