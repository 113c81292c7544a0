"""The context window manager (seed 001, 4.4): budgets, relevance, tool-call groups."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding_core import (
    ContextWindowManager,
    ExtractiveSummarizer,
    HashEmbedder,
    InvalidInputError,
    TokenCounter,
)
from gliding_core.attention.window import PER_MESSAGE, PER_REPLY

TOKENS = TokenCounter()


def manager(**options: Any) -> ContextWindowManager:
    return ContextWindowManager(
        TOKENS, ExtractiveSummarizer(TOKENS), embedder=HashEmbedder(), **options
    )


def chat(n: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful agent."}]
    for i in range(n):
        messages.append({"role": "user", "content": f"Question {i} about topic {i % 5}, please."})
        messages.append({"role": "assistant", "content": f"Answer {i}: " + "detail " * 20})
    return messages


def test_messages_within_budget_are_unchanged() -> None:
    messages = chat(2)
    fitted = manager().fit(messages, 10_000)
    assert fitted.messages == messages
    assert fitted.dropped == 0


def test_counts_are_exact() -> None:
    messages = chat(1)
    expected = PER_REPLY + sum(
        PER_MESSAGE + TOKENS.count(m["role"]) + TOKENS.count(m["content"]) for m in messages
    )
    assert manager().count(messages) == expected


def test_fit_keeps_system_and_recent_and_summarises_the_rest() -> None:
    messages = chat(30)
    fitted = manager(keep_recent=4, summary_tokens=60).fit(messages, 400)
    out = fitted.messages
    assert fitted.tokens <= 400
    assert fitted.tokens == manager().count(out)
    assert out[0] == messages[0]
    assert out[-4:] == messages[-4:]
    assert fitted.summarized
    assert out[1]["role"] == "system"
    assert out[1]["content"].startswith("[Summary of ")
    assert fitted.dropped > 0
    kept = [m for m in out if m in messages]
    assert kept == [m for m in messages if m in kept]  # original order


def test_the_most_relevant_middle_messages_stay() -> None:
    messages = chat(20)
    messages[9] = {"role": "user", "content": "The invoice webhook secret is rotated weekly."}
    fitted = manager(keep_recent=2, summary_tokens=40).fit(
        messages, 300, query="when is the invoice webhook secret rotated"
    )
    assert messages[9] in fitted.messages


def _tool_conversation(calls: list[int]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "agent"}]
    for turn, count in enumerate(calls):
        messages.append({"role": "user", "content": f"step {turn}: " + "words " * 15})
        if count:
            ids = [f"call-{turn}-{k}" for k in range(count)]
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": i, "name": "search", "args": {"q": i}} for i in ids],
                }
            )
            messages.extend(
                {"role": "tool", "tool_call_id": i, "content": "result " * 10} for i in ids
            )
        messages.append({"role": "assistant", "content": f"done {turn}"})
    return messages


@settings(max_examples=80, deadline=None)
@given(
    calls=st.lists(st.integers(0, 3), min_size=1, max_size=12),
    budget=st.integers(60, 900),
    keep_recent=st.integers(0, 6),
)
def test_a_tool_call_and_its_results_are_never_separated(
    calls: list[int], budget: int, keep_recent: int
) -> None:
    messages = _tool_conversation(calls)
    out = manager(keep_recent=keep_recent, summary_tokens=30).fit(messages, budget).messages
    called = {c["id"] for m in out for c in m.get("tool_calls") or []}
    answered = {m["tool_call_id"] for m in out if m["role"] == "tool"}
    assert called == answered  # no orphaned result, no unanswered call
    for index, message in enumerate(out):
        if message["role"] == "tool":
            previous = out[index - 1]
            assert previous.get("tool_calls") or previous["role"] == "tool"


def test_the_budget_holds_unless_only_the_last_group_is_left() -> None:
    messages = chat(40)
    for budget in (50, 120, 250, 600):
        fitted = manager(keep_recent=6).fit(messages, budget)
        assert fitted.tokens <= budget or len(fitted.messages) <= 2


@pytest.mark.parametrize(
    ("messages", "budget", "message"),
    [
        ("hello", 100, "list of messages"),
        ([{"content": "x"}], 100, "role"),
        ([{"role": "user", "content": 3}], 100, "content"),
        ([42], 100, "mapping"),
        ([{"role": "user", "content": "x"}], 0, "budget"),
    ],
)
def test_bad_input_is_named(messages: object, budget: int, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        manager().fit(messages, budget)  # type: ignore[arg-type]
