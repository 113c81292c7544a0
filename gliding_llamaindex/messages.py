"""Adapter: LlamaIndex ``ChatMessage`` <-> the plain message records ``gliding_core`` reads.

A record is ``{"role", "content"}`` with OpenAI-style ``tool_calls`` (``id``, ``name``, ``args``)
and ``tool_call_id`` when tools are used, an optional ``id``, and ``supplement`` (the input's
IRI) on delivered supplementary input (see ``gliding_core.framing``).

Invariants: converting never modifies the message; the content of a record is the text of the
message's text blocks (images and other media are not text and are left out); a record only
holds JSON values, so the core can count it exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock

from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import preview

Record = dict[str, Any]


def check_message(message: object, index: int = 0) -> ChatMessage:
    """Return ``message`` if it is a ``ChatMessage``.

    Raises:
        InvalidInputError: it is not; the error names the value and its position.
    """
    if not isinstance(message, ChatMessage):
        raise InvalidInputError(
            f"message {index} must be a llama_index ChatMessage, got {preview(message)}"
        )
    return message


def check_messages(messages: object) -> list[ChatMessage]:
    """Return ``messages`` as a list after checking each is a ``ChatMessage``."""
    if isinstance(messages, (str, bytes, Mapping, ChatMessage)) or not isinstance(
        messages, (list, tuple)
    ):
        raise InvalidInputError(
            f"messages must be a list of llama_index ChatMessage, got {preview(messages)}"
        )
    return [check_message(m, i) for i, m in enumerate(messages)]


def to_record(
    message: ChatMessage, *, key: str | None = None, supplement: str | None = None
) -> Record:
    """Return the record of ``message``; ``key`` becomes its ``id``."""
    record: Record = {"role": message.role.value, "content": message.content or ""}
    calls = [_call(block) for block in message.blocks if isinstance(block, ToolCallBlock)]
    calls += [_call(item) for item in message.additional_kwargs.get("tool_calls") or []]
    if calls:
        record["tool_calls"] = calls
    call_id = message.additional_kwargs.get("tool_call_id")
    if isinstance(call_id, str):
        record["tool_call_id"] = call_id
    if key is not None:
        record["id"] = key
    if supplement is not None:
        record["supplement"] = supplement
    return record


def from_record(record: Mapping[str, Any]) -> ChatMessage:
    """Return a new ``ChatMessage`` with the record's role and text (for messages the core made)."""
    return ChatMessage(role=record["role"], content=str(record.get("content") or ""))


def last_user_text(messages: list[ChatMessage]) -> str | None:
    """Return the text of the newest user message that has text, or ``None``."""
    for message in reversed(messages):
        if message.role.value == "user" and (message.content or "").strip():
            return message.content
    return None


def _call(item: object) -> dict[str, Any]:
    """One tool call as ``{"id", "name", "args"}``, from a block, a ``ToolSelection`` or a dict.

    LlamaIndex LLM integrations carry calls as ``ToolCallBlock``s, or in ``additional_kwargs``
    as OpenAI-style dicts or objects; the core only needs the id (to keep a call with its
    results) and the name (to say which tool was called).
    """
    if isinstance(item, ToolCallBlock):
        return {"id": item.tool_call_id, "name": item.tool_name, "args": _json(item.tool_kwargs)}
    fields = item if isinstance(item, Mapping) else vars(item) if hasattr(item, "__dict__") else {}
    function = fields.get("function")
    function_fields = (
        function if isinstance(function, Mapping) else getattr(function, "__dict__", {}) or {}
    )
    key = fields.get("id") or fields.get("tool_id") or fields.get("tool_call_id")
    name = fields.get("name") or fields.get("tool_name") or function_fields.get("name")
    args = fields.get("tool_kwargs") or function_fields.get("arguments") or {}
    return {
        "id": key if isinstance(key, str) else None,
        "name": str(name or ""),
        "args": _json(args),
    }


def _json(value: object) -> Any:
    """``value`` if it is JSON-like (a string or a dict of such), else its string form."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    return str(value)
