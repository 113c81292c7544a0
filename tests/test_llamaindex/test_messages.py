"""The ChatMessage <-> record converters the adapters share."""

from __future__ import annotations

import pytest
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms.llm import ToolSelection

from gliding_core import InvalidInputError
from gliding_llamaindex.messages import check_messages, from_record, last_user_text, to_record


def test_text_tool_calls_and_results_become_records() -> None:
    call = ChatMessage(
        role="assistant",
        blocks=[
            ToolCallBlock(tool_call_id="c1", tool_name="weather", tool_kwargs={"city": "Oslo"})
        ],
    )
    legacy = ChatMessage(
        role="assistant",
        content="",
        additional_kwargs={
            "tool_calls": [
                ToolSelection(tool_id="c2", tool_name="clock", tool_kwargs={}),
                {"id": "c3", "function": {"name": "map", "arguments": '{"q": "x"}'}},
            ]
        },
    )
    result = ChatMessage(role="tool", content="3 degrees", additional_kwargs={"tool_call_id": "c1"})

    assert to_record(call, key="k1") == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "weather", "args": {"city": "Oslo"}}],
        "id": "k1",
    }
    assert [(c["id"], c["name"]) for c in to_record(legacy)["tool_calls"]] == [
        ("c2", "clock"),
        ("c3", "map"),
    ]
    assert to_record(result, supplement="urn:input:1") == {
        "role": "tool",
        "content": "3 degrees",
        "tool_call_id": "c1",
        "supplement": "urn:input:1",
    }


def test_records_become_messages_and_the_last_user_text_is_found() -> None:
    message = from_record({"role": "system", "content": "memory text", "id": "x"})
    history = [ChatMessage(role="user", content="first"), ChatMessage(role="user", content=" ")]

    assert (message.role.value, message.content) == ("system", "memory text")
    assert last_user_text(history) == "first"
    assert last_user_text([]) is None


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("hello", "'hello'"),
        (ChatMessage(role="user", content="one"), "ChatMessage"),
        ([ChatMessage(role="user", content="ok"), None], "message 1 must be"),
    ],
)
def test_bad_message_lists_are_typed_errors(value: object, named: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        check_messages(value)
    assert named in str(info.value)
