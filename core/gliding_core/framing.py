"""Model view: chat message records, their tool groups and their exact framed token counts.

A chat message is a plain record: ``{"role", "content"}`` with OpenAI-style ``tool_calls`` /
``tool_call_id`` when tools are used, an optional ``id`` and, on delivered supplementary input,
``supplement`` (see ``gliding_core.view.chatlog``). This module is the one place that knows how such
records are checked, grouped and counted; the view (``gliding_core.view.conversation``) and the
adapters use it.

A model's reply is untrusted: a prompt-injected model calls a tool with arguments nested
thousands deep or megabytes long, which the tool refuses, but the call stays in the history.
A record keeps each tool call within ``CALL_LIMITS`` and ``MAX_CALL_BYTES`` of JSON
(``bounded_call``): a call over them keeps its ``id`` and ``name``, and its ``args`` become
``{"elided": "<why>"}``, the marker that they were left out. Checking a record bounds its
calls, so everything downstream (the view's counts, the archive, the chat log, the adapters'
requests built from the view) sees the bounded call and never recurses on the model's depth.
The limits are far beyond a real call, and leave room for the chat log to keep a call twice
(the record and an adapter's own form) within the L0 store's default limits.

Invariants: an assistant message that calls tools and the results answering it form one group,
which a view keeps or drops whole (providers reject an orphaned tool message); token counts are
exact for what a cl100k chat model is sent (``PER_MESSAGE`` per message, ``PER_REPLY`` once),
a bounded call counted as it is bounded; checking copies, it never changes the caller's
records; a call within the limits is kept as it is, and only a call's arguments are ever
elided (content is never cut).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gliding_core.checks import JsonLimits, check_json_value
from gliding_core.errors import InvalidInputError
from gliding_core.jsonld import DEFAULT_MAX_DEPTH, encodes_as_utf8, preview
from gliding_core.tokens import TokenCounter

Message = dict[str, Any]
# Framing tokens per message and per reply, as OpenAI counts them for cl100k chat models.
PER_MESSAGE = 3
PER_REPLY = 3

# What a record keeps of one tool call ({"id", "name", "args"}, the call itself is level 1).
# The chat log stores a call twice (the record, an adapter's form) in one L0 entry's metadata,
# some six levels down: within the store's default 64 levels and 1 MiB.
CALL_LIMITS = JsonLimits(32, 16_384, 262_144, "the limit for a tool call a message keeps")
MAX_CALL_BYTES = 262_144  # of the call's JSON in UTF-8
MAX_CALL_LABEL = 256  # characters of an elided call's id or name that are kept
ELIDED = "elided"  # the key of the arguments that replace a call's elided ones
# A list of content parts is sent as it is (never elided): only its nesting and kinds are bound.
CONTENT_LIMITS = JsonLimits(DEFAULT_MAX_DEPTH, 1_048_576, 2**62, "the limit for message content")


class ChatFraming:
    """Count chat messages exactly as a chat model is sent them.

    Args:
        tokens: the memory's exact counter.
    """

    def __init__(self, tokens: TokenCounter) -> None:
        if not isinstance(tokens, TokenCounter):
            raise InvalidInputError(f"tokens must be a TokenCounter, got {preview(tokens)}")
        self.tokens = tokens

    def count(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Return the exact token count of ``messages`` as sent (with the reply's framing)."""
        return self.group_tokens(messages) + PER_REPLY

    def message_tokens(self, message: Mapping[str, Any]) -> int:
        """Return the tokens one message adds to a request (its tool calls bounded)."""
        return self._tokens(_check_message(message, 0))

    def group_tokens(self, group: Sequence[Mapping[str, Any]]) -> int:
        """Return the tokens a group of messages adds to a request (no reply framing)."""
        return sum(self._tokens(m) for m in check_messages(group))

    def _tokens(self, record: Message) -> int:
        """The tokens of a checked record (its calls bounded: ``json.dumps`` meets no depth)."""
        count = self.tokens.count
        total = PER_MESSAGE + count(str(record["role"])) + count(content_text(record))
        if record.get("tool_calls"):
            total += count(json.dumps(record["tool_calls"], sort_keys=True))
        if record.get("tool_call_id"):
            total += count(str(record["tool_call_id"]))
        return total


def check_messages(messages: object) -> list[Message]:
    """Return copies of the records of ``messages``, checked, their tool calls bounded.

    Raises:
        InvalidInputError: ``messages`` is not a list of mappings, each with a non-empty string
            ``role``, a string, a list of JSON parts (within ``CONTENT_LIMITS``) or no
            ``content``, and a list of mappings or no ``tool_calls``.
    """
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidInputError(f"messages must be a list of messages, got {preview(messages)}")
    return [_check_message(m, i) for i, m in enumerate(messages)]


def _check_message(message: object, index: int) -> Message:
    if not isinstance(message, Mapping):
        raise InvalidInputError(f"message {index} must be a mapping, got {preview(message)}")
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise InvalidInputError(f"message {index} needs a non-empty string role, got {role!r}")
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise InvalidInputError(
            f"message {index} content must be a string or a list of parts, got {preview(content)}"
        )
    if isinstance(content, list):
        check_json_value(content, CONTENT_LIMITS, what=f"the content parts of message {index}")
    key = message.get("id")
    if key is not None and not isinstance(key, str):
        raise InvalidInputError(f"message {index} id must be a string, got {preview(key)}")
    record = dict(message)
    calls = message.get("tool_calls")
    if calls is not None:
        record["tool_calls"] = _bounded_calls(calls, index)
    return record


def _bounded_calls(calls: object, index: int) -> list[dict[str, Any]]:
    if isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Sequence):
        raise InvalidInputError(
            f"message {index} tool_calls must be a list of calls, got {preview(calls)}"
        )
    for call in calls:
        if not isinstance(call, Mapping):
            raise InvalidInputError(
                f"each tool call of message {index} must be a mapping, got {preview(call)}"
            )
    return [bounded_call(call) for call in calls]


def bounded_call(call: Mapping[str, Any]) -> dict[str, Any]:
    """Return a tool call as a record keeps it: a copy, or its arguments elided when over limits.

    A call within ``CALL_LIMITS`` and ``MAX_CALL_BYTES`` (of its JSON in UTF-8) that holds
    only JSON values is copied as it is (its values are not copied). Any other keeps its
    ``id`` and ``name`` (cut to ``MAX_CALL_LABEL`` characters), and its ``args`` become
    ``{"elided": "<why>"}``. The walk is iterative and stops at the first limit, so a call
    nested a hundred thousand deep or ten megabytes long costs little. Bounding a bounded call
    returns an equal one.
    """
    try:
        check_json_value(call, CALL_LIMITS, what="the values of this tool call")
    except InvalidInputError as exc:
        return _elided(call, str(exc))
    size = _size(call)
    if size > MAX_CALL_BYTES:
        return _elided(
            call,
            f"this tool call is {size:,} bytes of JSON, over the limit of {MAX_CALL_BYTES:,}"
            f" ({CALL_LIMITS.name})",
        )
    return dict(call)


def _size(call: Mapping[str, Any]) -> int:
    """The bytes of a checked call's JSON in UTF-8 (orjson: twenty times the encoder's speed)."""
    try:
        return len(orjson.dumps(call))
    except (orjson.JSONEncodeError, TypeError):  # a subclass orjson declines: the encoder can
        return len(json.dumps(call, ensure_ascii=False).encode("utf-8"))


def is_elided(call: Mapping[str, Any]) -> bool:
    """Return whether a bounded call's arguments were elided (``bounded_call``)."""
    args = call.get("args")
    return isinstance(args, Mapping) and len(args) == 1 and isinstance(args.get(ELIDED), str)


def _elided(call: Mapping[str, Any], why: str) -> dict[str, Any]:
    """The call with its arguments replaced by the marker saying why they were left out."""
    kept: dict[str, Any] = {}
    for key in ("id", "name"):
        value = call.get(key)
        if isinstance(value, str):
            kept[key] = _label(value)
        elif key == "id" and key in call:
            kept[key] = None
    reason = f"the arguments of this call were left out of the chat record: {why}"
    return {**kept, "args": {ELIDED: reason}}


def _label(text: str) -> str:
    """A call's id or name as an elided call keeps it: cut, and valid Unicode."""
    cut = text if len(text) <= MAX_CALL_LABEL else text[:MAX_CALL_LABEL] + "..."
    return cut if encodes_as_utf8(cut) else cut.encode("utf-8", "backslashreplace").decode()


def tool_groups(items: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Split message indexes into units: a tool-calling message with its results, or one."""
    groups: list[list[int]] = []
    open_calls: dict[str, int] = {}
    for index, message in enumerate(items):
        call_id = message.get("tool_call_id")
        if message["role"] == "tool" and isinstance(call_id, str) and call_id in open_calls:
            groups[open_calls[call_id]].append(index)
            continue
        groups.append([index])
        for call in message.get("tool_calls") or []:
            if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                open_calls[call["id"]] = len(groups) - 1
    return groups


def after_tool_groups(messages: list[Message]) -> list[Message]:
    """Move each supplement that arrived inside a tool group (after a tool call, before all of
    its results) to just after the group: providers reject a user message there."""
    out: list[Message] = []
    held: list[Message] = []
    waiting: set[str] = set()
    for message in messages:
        if message.get("supplement"):
            (held if waiting else out).append(message)
            continue
        if message["role"] == "tool" and message.get("tool_call_id") in waiting:
            out.append(message)
            waiting.discard(message["tool_call_id"])
        else:  # any other message ends an open group (complete or not)
            out += held
            held = []
            out.append(message)
            calls = message.get("tool_calls") or []
            waiting = {
                c["id"] for c in calls if isinstance(c, Mapping) and isinstance(c.get("id"), str)
            }
        if not waiting:
            out += held
            held = []
    return out + held


def content_text(message: Mapping[str, Any]) -> str:
    """Return a message's content as sent: the string, or the JSON of a list of parts."""
    content = message.get("content")
    if content is None:
        return ""
    return content if isinstance(content, str) else json.dumps(content, sort_keys=True)


def message_text(message: Mapping[str, Any]) -> str:
    """Return what a message says: its content, with the names of the tools it calls."""
    calls = message.get("tool_calls") or []
    names = [str(c.get("name", "")) for c in calls if isinstance(c, Mapping)]
    text = content_text(message)
    return text + (f" (calls {', '.join(names)})" if names else "")


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """Return the text of the newest user message with text, or ``None``."""
    for message in reversed(messages):
        if message["role"] == "user":
            text = message_text(message).strip()
            if text:
                return text
    return None
