"""Chat framing: exact counts, tool groups, checked records (the one module that knows them)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gliding_core import ChatFraming, InvalidInputError, TokenCounter
from gliding_core.framing import (
    PER_MESSAGE,
    PER_REPLY,
    after_tool_groups,
    check_messages,
    last_user_text,
    message_text,
    tool_groups,
)

TOKENS = TokenCounter()
FRAMING = ChatFraming(TOKENS)


def test_counts_are_exact() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    expected = PER_REPLY + sum(
        PER_MESSAGE + TOKENS.count(m["role"]) + TOKENS.count(m["content"]) for m in messages
    )
    assert FRAMING.count(messages) == expected
    assert FRAMING.group_tokens(messages) == expected - PER_REPLY


def _tool_chat(calls: list[int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for turn, count in enumerate(calls):
        ids = [f"c{turn}-{k}" for k in range(count)]
        out.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": i, "name": "look", "args": {}} for i in ids],
            }
        )
        out += [{"role": "tool", "content": f"result {i}", "tool_call_id": i} for i in ids]
    return out


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=6))
def test_a_tool_call_and_its_results_are_one_group(calls: list[int]) -> None:
    messages = _tool_chat(calls)
    groups = tool_groups(messages)
    assert sorted(i for g in groups for i in g) == list(range(len(messages)))
    for group in groups:
        head = messages[group[0]]
        called = {c["id"] for c in head.get("tool_calls") or []}
        assert {messages[i]["tool_call_id"] for i in group[1:]} == called


def test_a_supplement_inside_a_tool_group_moves_after_it() -> None:
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "name": "look"}]}
    extra = {"role": "user", "content": "also this", "supplement": "urn:input:1"}
    result = {"role": "tool", "content": "done", "tool_call_id": "a"}
    assert after_tool_groups([call, extra, result]) == [call, result, extra]


def test_texts_name_the_tools_called() -> None:
    call = {"role": "assistant", "content": "Looking", "tool_calls": [{"id": "a", "name": "look"}]}
    assert message_text(call) == "Looking (calls look)"
    history = [{"role": "user", "content": "first"}, call, {"role": "user", "content": " "}]
    assert last_user_text(history) == "first"


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ("hello", "list of messages"),
        ([{"content": "x"}], "role"),
        ([{"role": "user", "content": 3}], "content"),
        ([42], "mapping"),
        ([{"role": "user", "content": "x", "id": 7}], "id must be a string"),
    ],
)
def test_bad_input_is_named(messages: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        check_messages(messages)
    with pytest.raises(InvalidInputError, match="TokenCounter"):
        ChatFraming("cl100k")  # type: ignore[arg-type]
