"""Adapter: LlamaIndex ``ChatMessage`` <-> the plain message records ``gliding_core`` reads.

A record is ``{"role", "content"}`` with OpenAI-style ``tool_calls`` (``id``, ``name``, ``args``)
and ``tool_call_id`` when tools are used, an optional ``id``, and ``supplement`` (the input's
IRI) on delivered supplementary input (see ``gliding_core.framing``).

A record's tool calls are bounded (``gliding_core.framing.bounded_call``): a call a model sent
with arguments nested thousands deep or megabytes long keeps its id and name, its arguments
elided. ``bounded_message`` is the message as its record shows it, for what is stored in
LlamaIndex's own form (the chat log) and given back to an agent: the message itself, or a copy
with those calls elided.

Invariants: converting never modifies the message; the content of a record is the text of the
message's text blocks (images and other media are not text and are left out); a record only
holds JSON values, so the core can count it exactly; no conversion recurses deeper than
``CALL_LIMITS.depth`` into a model's arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock

from gliding_core.errors import InvalidInputError
from gliding_core.framing import CALL_LIMITS, MAX_CALL_BYTES, bounded_call, is_elided
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


def bounded_message(message: ChatMessage) -> ChatMessage:
    """Return ``message``, or a copy whose tool calls over the record's limits are elided.

    A ``ToolCallBlock`` of an elided call gets ``{"elided": why}`` for ``tool_kwargs``; a call
    in ``additional_kwargs["tool_calls"]`` becomes an OpenAI-style call with those arguments
    as its JSON text. The copy's record is the message's; bounding it returns it unchanged.
    """
    update: dict[str, Any] = {}
    blocks = [_bounded_block(block) for block in message.blocks]
    if _changed(blocks, message.blocks):
        update["blocks"] = blocks
    raw = message.additional_kwargs.get("tool_calls")
    if isinstance(raw, list):
        items = [_bounded_item(item) for item in raw]
        if _changed(items, raw):
            update["additional_kwargs"] = {**message.additional_kwargs, "tool_calls": items}
    return message.model_copy(update=update) if update else message


def _changed(new: list[Any], old: list[Any]) -> bool:
    return any(a is not b for a, b in zip(new, old, strict=True))


def _bounded_block(block: Any) -> Any:
    if not isinstance(block, ToolCallBlock) or is_elided({"args": block.tool_kwargs}):
        return block
    call = _call(block)
    if not is_elided(call):
        return block
    return ToolCallBlock(
        tool_call_id=call.get("id"), tool_name=call.get("name", ""), tool_kwargs=call["args"]
    )


def _bounded_item(item: object) -> object:
    call = _call(item)
    if not is_elided(call):
        return item
    function = {"name": call.get("name", ""), "arguments": json.dumps(call["args"])}
    elided = {"id": call.get("id"), "type": "function", "function": function}
    return item if item == elided else elided  # an item bounded before stays as it is


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
        args = _json(_parsed(item.tool_kwargs))
        return bounded_call({"id": item.tool_call_id, "name": item.tool_name, "args": args})
    fields = item if isinstance(item, Mapping) else vars(item) if hasattr(item, "__dict__") else {}
    function = fields.get("function")
    function_fields = (
        function if isinstance(function, Mapping) else getattr(function, "__dict__", {}) or {}
    )
    key = fields.get("id") or fields.get("tool_id") or fields.get("tool_call_id")
    name = fields.get("name") or fields.get("tool_name") or function_fields.get("name")
    args = fields.get("tool_kwargs") or function_fields.get("arguments") or {}
    args = _json(_parsed(args))
    return bounded_call(
        {"id": key if isinstance(key, str) else None, "name": str(name or ""), "args": args}
    )


def _parsed(args: object) -> object:
    """Arguments given as JSON text (OpenAI's form) as the object it holds; other values as
    they are, and text too long to keep, or no JSON object, as it is."""
    if not isinstance(args, str) or len(args) > MAX_CALL_BYTES or not args.startswith("{"):
        return args
    try:
        value = json.loads(args)
    except (ValueError, RecursionError):  # no JSON, or nested too deep for the parser
        return args
    return value if isinstance(value, dict) else args


def _json(value: object, depth: int = 2) -> Any:
    """``value`` if it is JSON-like (a string or a dict of such), else its string form.

    ``depth`` is the level of ``value`` in its call (the arguments are level 2): a container
    deeper than ``bounded_call`` keeps is left as it is, for it to elide, so the conversion
    never recurses deeper than that whatever the model sent.
    """
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if depth > CALL_LIMITS.depth and isinstance(value, (Mapping, list, tuple)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v, depth + 1) for v in value]
    return str(value)
